"""AutoML jobs and pipeline nodes (type: automl): what runs them on this machine."""

# the image each AutoML task's environment is built on (its conda file brings the rest)
IMAGE = "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04"
# keys a command or sweep job shares with an AutoML job, passed through as they are
SHARED_KEYS = ("name", "display_name", "experiment_name", "description", "tags", "compute",
               "resources", "environment_variables", "identity", "properties")
