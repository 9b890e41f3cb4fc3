"""AutoML jobs and pipeline nodes (type: automl): what runs them on this machine."""
