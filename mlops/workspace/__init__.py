"""The local workspace: models, data, environments and components registered on this machine,
resolved by name, version and label as Azure's workspace resolves them (docs/workspace.md).

records.py   one asset version's record (asset.json), typed
store.py     the folder: create (immutable versions, the next integer), get, list, archive
references.py  `azureml:` references and `azureml://` URIs -> the workspace's files
mlflow_models.py  models registered through MLflow, taken in as versions of the same registry
jobs.py      finished local jobs by name (`azureml://jobs/<name>/outputs/<output>`), and the
             outputs they declare with `name:`, registered when they complete
"""
