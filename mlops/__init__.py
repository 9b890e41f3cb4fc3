"""Local tooling for the Azure ML specs: validation and local runs. Never shipped to Azure.

Module map, by subsystem (entry points run with `python -m mlops.<name>`):

validation   validate (entry: schema, azure-ai-ml and lint layers), specs (loading, kinds, line
             numbers), lint, lint_assets, skus, workflow_lint (entry), overrides (--set)
runtime      runtime (resolve -> snapshot -> environment -> launch -> collect), tasks (a spec's
             command as a task), resolve (inputs, outputs, substitution), binding and outputs
             (where inputs and outputs live), snapshot, launch (processes, distribution, signals),
             watchdog, readonly_inputs, tracking and tracking_server (MLflow), uris (asset map)
orchestrators run (entry: any job spec), sweep and sampling and policies, pipeline and graph,
             parallel and mltable (parallel nodes), reuse (step reuse)
environments envs (entry: which layers an environment needs), layers (building them), envspec
             and envfiles (reading environment definitions), requirements, pins
endpoints    serve (entry: the local online endpoint), batch (entry: batch deployments),
             batch_worker (the driver in each batch process), deployment (a deployment spec's
             kind, code and environment), models (its model and AZUREML_MODEL_DIR layout),
             nocode/ (Azure's scoring for MLflow models deployed without code)
project      [tool.mlops] in pyproject.toml: what the tooling knows about this project; errors
"""
