"""Deployments served locally: deployment (a spec's kind, code and environment), models (its model
and the AZUREML_MODEL_DIR layout), batch_worker (the driver in each batch process), nocode/ (Azure's
scoring for MLflow models deployed without code). The entries are mlops.serve and mlops.batch."""
