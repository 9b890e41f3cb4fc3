"""The one local runtime (engine.py: resolve -> snapshot -> environment -> launch -> collect)
and everything a started process needs: tasks (Task, and spec -> Task), values, binding,
snapshot, placement (distribution), launch (the one launcher: processes, signals), environ (a
process's variables), records (status.json and run.json, typed), service (a server left
running), devices, watchdog, readonly_inputs, mlflow_runs (over mlflow_rest or mlflow_store),
mlflow_server and mlflow_serve (the warm tracking server), uris (the asset map), reuse (step
reuse), job (a checked job spec and its run folder), failures (what a failed log says about
this machine), minibatch and minibatch_worker (the mini-batch driver).

This package's own import is empty: the watchdog loads records.py alone.
"""
