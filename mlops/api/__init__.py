"""The public surface of the local runtime: `Session` (session.py), whose methods are the local
twins of `az ml` verbs. The `azml` command (mlops/cli), the make targets' front doors and the
tests come in through it; below it, the rooms do the work:

  session   Session: jobs (run in the foreground, or created in the background), assets,
            endpoints
  jobs      a job created, streamed, canceled, downloaded (the background runner)
  records   a job by name: its run folder and run.json, how it stands
  views     a job as `az ml job show` prints it (azure-ai-ml's entity)
  registry  `az ml <kind> create|list|show|archive|restore` on the local workspace
  drafts    an asset spec (the YAML `az ml <kind> create -f` takes) as the version to register
  assets    a registered version as `az ml <kind> show` prints it
"""
