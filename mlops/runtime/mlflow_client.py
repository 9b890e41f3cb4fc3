"""The job's own MLflow client meeting the local store as it meets Azure's (copied into every
task's top layer as _mlops_mlflow_client.py and installed by a .pth file, inside a job with an
MLflow run only; standard library only, Python 3.7's syntax).

On Azure a job's artifacts go to the workspace's store through azureml-mlflow's artifact
repository, which joins the path it is given onto the run's artifact prefix as it is
(azureml-mlflow 1.62: AzureMLflowArtifactRepository._get_full_artifact_path): an absolute
`artifact_path` (`mlflow.sklearn.log_model(model, os.path.abspath("model"))`,
`mlflow.log_artifacts(folder, "/outputs/x")`) is taken. Locally the run's artifacts are a folder,
and MLflow's LocalArtifactRepository refuses such a path in every release ("Invalid artifact
path", its verify_artifact_path). Here the local repository takes it as Azure's store keeps it:
under the run's artifacts, without its leading `/` (`/tmp/wd/model` -> `tmp/wd/model`).
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import posixpath
import sys

TARGET = "mlflow.store.artifact.local_artifact_repo"


def relative(artifact_path):
    """An absolute artifact path as a path under the run's artifacts; others as they are."""
    if isinstance(artifact_path, str) and artifact_path.startswith(("/", "\\")):
        return posixpath.normpath(artifact_path.replace("\\", "/")).lstrip("/") or None
    return artifact_path


def patch(module) -> None:
    repository = module.LocalArtifactRepository
    log_artifact, log_artifacts = repository.log_artifact, repository.log_artifacts

    def log_one(self, local_file, artifact_path=None):
        return log_artifact(self, local_file, relative(artifact_path))

    def log_many(self, local_dir, artifact_path=None):
        return log_artifacts(self, local_dir, relative(artifact_path))

    repository.log_artifact, repository.log_artifacts = log_one, log_many


class PatchingLoader:
    """A loader (the import system's protocol: create_module, exec_module) that patches the
    module it loads; neither class derives from importlib.abc, whose import costs every job's
    interpreter a tenth of a second (azureml_run.py's are the same)."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        with contextlib.suppress(AttributeError):  # another MLflow layout: as it is
            patch(module)


class Finder:
    """A meta path finder (find_spec) for MLflow's local artifact repository alone."""

    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = PatchingLoader(spec.loader)
        return spec


def install():
    """At interpreter start (the top layer's .pth): only inside a job with an MLflow run."""
    if os.environ.get("MLFLOW_RUN_ID") and not any(isinstance(f, Finder)
                                                   for f in sys.meta_path):
        sys.meta_path.insert(0, Finder())
