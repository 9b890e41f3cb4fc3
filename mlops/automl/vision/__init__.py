"""A trial of an image AutoML job on Azure's runner: job code, copied as the trial's code and run
in the runner's own environment (conda.yml); its modules import one another by file name."""
