"""The tabular AutoML stand-in: a job's code folder, copied into its working directory and run
in the stand-in's own environment (conda.yml). Its modules import none of mlops."""
