"""`Run.get_context()` of azureml-core (SDK v1) inside a local job: the job's MLflow run.

On Azure, a script's `Run.get_context()` is the job's run: `run.log(...)` lands in it, and
`run.experiment.workspace.get_mlflow_tracking_uri()` is the workspace's MLflow. Outside Azure,
azureml-core falls back to an offline run that only prints what it is given and has no
experiment, so a published step that registers through it fails locally on an attribute of None.
This module is copied into every task's top layer and installed by a .pth file: when a job
imports `azureml.core.run` and the real context is that offline fallback, get_context() returns a
local run instead, which forwards to the job's MLflow run (MLFLOW_RUN_ID, MLFLOW_TRACKING_URI):
log, log_list, log_row, log_table, log_image, tags, properties, uploads, the parent run, the
experiment's name and the workspace's MLflow tracking URI. What needs a live workspace
(`Dataset.get_by_name`, `Datastore.get`, `Model.register`, compute) ends in one line that names
the call and the entry of the local asset map (assets/local-paths.yml, MLOPS_ASSET_FILE) that
stands in for what it asks for (MLOPS_STAND_INS: the map's `azureml:<name>` entries); where such
an entry exists, `Model.get_model_path` answers from it. Standard library only, Python 3.7's
syntax: it runs in every environment's Python.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import json
import os
import sys

TARGET = "azureml.core.run"
MODEL = "azureml.core.model"
STAND_INS = "MLOPS_STAND_INS"  # {"azureml:<name>": local path}, from the asset map
ASSET_FILE = "MLOPS_ASSET_FILE"
NAME_ARGS = ("name", "model_name", "datastore_name", "dataset_name")


def stand_in(name, version=None):
    """The local path the asset map gives `azureml:<name>[:<version>]`, or None."""
    try:
        entries = json.loads(os.environ.get(STAND_INS) or "{}")
    except ValueError:
        return None
    keys = ([f"azureml:{name}:{version}"] if version else []) + [f"azureml:{name}"]
    return next((entries[key] for key in keys if key in entries), None)


WRAPPERS = ("wrapper", "wrapped", "inner", "decorator", "<lambda>")


def _call():
    """The azureml-core call the job's code made (the outermost azureml frame that is not a
    decorator's) and the asset name it was given (in it or a frame it called)."""
    frame, frames = sys._getframe(1), []
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("azureml."):
            frames.append(frame)
        frame = frame.f_back
    named = [f for f in frames if f.f_code.co_name not in WRAPPERS
             and not f.f_code.co_name.startswith("_")]
    if not named:
        return "this call", None
    call, caller = named[-1], frames[-1].f_back
    name = next((f.f_locals[a] for f in reversed(frames[:frames.index(call) + 1])
                 for a in NAME_ARGS if isinstance(f.f_locals.get(a), str)), None)
    where = f" (at {os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno})" \
        if caller is not None else ""
    return _qualified(call) + where, name


def _qualified(frame) -> str:
    """`Dataset.get_by_name`: the code's qualified name (3.11), else the class of its module
    that holds this very code (a static or class method, a method)."""
    code = frame.f_code
    if hasattr(code, "co_qualname"):
        return code.co_qualname
    for owner in list(frame.f_globals.values()):
        member = vars(owner).get(code.co_name) if isinstance(owner, type) else None
        function = getattr(member, "__func__", member)
        while function is not None:  # through decorators (functools.wraps' __wrapped__)
            if getattr(function, "__code__", None) is code:
                return f"{owner.__name__}.{code.co_name}"
            function = getattr(function, "__wrapped__", None)
    return code.co_name


class NeedsWorkspace(AttributeError):
    """An SDK v1 call that reads the live workspace a local run does not have."""


def needs_workspace(attribute: str) -> NeedsWorkspace:
    call, name = _call()
    file = os.environ.get(ASSET_FILE) or "assets/local-paths.yml"
    if "Datastore" in call:
        key = f"azureml://datastores/{name or '<name>'}/paths/"
        hint = f"the local stand-in is an entry `{key}: <local folder>/` in {file}"
    elif name and stand_in(name):
        hint = (f"{file} maps azureml:{name} to {stand_in(name)}: hand it to the job as an "
                f"input (path: azureml:{name}) and read the input's path")
    else:
        hint = (f"the local stand-in is an entry `azureml:{name or '<name>'}: <local path>` in "
                f"{file}, handed to the job as an input (path: azureml:{name or '<name>'})")
    return NeedsWorkspace(f"{call} needs a live Azure ML workspace (workspace.{attribute}), "
                          f"which a local run does not have; {hint}")


class LocalWorkspace:
    """What a script reads from `run.experiment.workspace` locally; what needs the live
    workspace is refused by name (NeedsWorkspace, an AttributeError: hasattr() stays false)."""

    # as the job's variables name it (environ.tracking_env): this file runs in the job's Python
    name = os.environ.get("AZUREML_ARM_WORKSPACE_NAME", "local")
    subscription_id = os.environ.get("AZUREML_ARM_SUBSCRIPTION", "")
    resource_group = os.environ.get("AZUREML_ARM_RESOURCEGROUP", "")
    location = "local"

    def get_mlflow_tracking_uri(self):
        return os.environ.get("MLFLOW_TRACKING_URI", "")

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise needs_workspace(attribute)


class LocalExperiment:
    def __init__(self, name):
        self.name = name
        self.workspace = LocalWorkspace()
        self.id = os.environ.get("MLFLOW_EXPERIMENT_ID", "")


def _client():
    """The environment's own MLflow client, if it has one (azureml-core images do)."""
    try:  # optional: a job environment without MLflow keeps azureml-core's offline printing
        tracking = importlib.import_module("mlflow.tracking")
    except ImportError:
        return None
    return tracking.MlflowClient()


class Forwarding:
    """The methods of azureml-core's offline run, forwarded to the job's MLflow run (mixed in
    before that offline run class, whose printing stays where MLflow is missing)."""

    def __init__(self, run_id):
        self._identify(run_id)
        self._mlflow = _client()
        self._tags = {}
        self._properties = {}

    @property
    def experiment(self):
        return LocalExperiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", "Default"))

    @property
    def parent(self):
        """The pipeline's, sweep's or AutoML job's run above this one (None at the top)."""
        if self._mlflow is None:
            return None
        parent = self._mlflow.get_run(self.id).data.tags.get("mlflow.parentRunId")
        return type(self)(parent) if parent else None

    def _metric(self, name, value, step=None):
        if self._mlflow is None:
            return False
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self._mlflow.set_tag(self.id, name, str(value))
        else:
            self._mlflow.log_metric(self.id, name, float(value), step=step or 0)
        return True

    def log(self, name, value, description="", step=None):
        if not self._metric(name, value, step):
            super().log(name, value, description)

    def log_list(self, name, value, description=""):
        for step, item in enumerate(value):
            self._metric(name, item, step)

    def log_row(self, name, description=None, **kwargs):
        for column, value in kwargs.items():
            self._metric(f"{name}.{column}", value)

    def log_table(self, name, value, description=""):
        for column, items in dict(value).items():
            self.log_list(f"{name}.{column}", list(items))

    def log_image(self, name, path=None, plot=None, description=""):
        if self._mlflow is None:
            return super().log_image(name, path, plot, description)
        if plot is not None:
            figure = plot.gcf() if hasattr(plot, "gcf") else plot
            self._mlflow.log_figure(self.id, figure, f"images/{name}.png")
        elif path:
            self._mlflow.log_artifact(self.id, path, "images")
        return None

    def upload_file(self, name, path_or_stream, datastore_name=None):
        if self._mlflow is not None:
            self._mlflow.log_artifact(self.id, path_or_stream, os.path.dirname(name) or None)

    def upload_files(self, names, paths, return_artifacts=False, timeout_seconds=None,
                     datastore_name=None):
        """Each file under its own name (`outputs/model.pt`), whatever the local file is called."""
        if self._mlflow is None:
            return None
        import shutil
        import tempfile

        for name, path in zip(names, paths):  # noqa: B905 (no strict= before 3.10)
            with tempfile.TemporaryDirectory() as folder:
                named = os.path.join(folder, os.path.basename(name))
                shutil.copyfile(path, named)
                self._mlflow.log_artifact(self.id, named, os.path.dirname(name) or None)
        return None

    def upload_folder(self, name, path, datastore_name=None):
        if self._mlflow is not None:
            self._mlflow.log_artifacts(self.id, path, name or None)

    def set_tags(self, tags):
        for key, value in dict(tags).items():
            self.tag(key, value)

    def tag(self, name, value=None):
        self._tags[name] = "" if value is None else str(value)
        if self._mlflow is not None:
            self._mlflow.set_tag(self.id, name, self._tags[name])

    def get_tags(self):
        if self._mlflow is None:
            return dict(self._tags)
        return dict(self._mlflow.get_run(self.id).data.tags)

    def add_properties(self, properties):
        self._properties.update(properties)
        for key, value in dict(properties).items():
            self.tag(f"properties.{key}", value)

    def get_properties(self):
        return dict(self._properties)

    def get_metrics(self, name=None, **kwargs):
        if self._mlflow is None:
            return {}
        found = dict(self._mlflow.get_run(self.id).data.metrics)
        return {name: found[name]} if name in found else ({} if name else found)

    def __repr__(self):
        return (f"Run(Experiment: {self.experiment.name},\nId: {self.id},\nType: {self.type},"
                "\nStatus: Running)")

    __str__ = __repr__

    @property
    def properties(self):
        return self.get_properties()

    @property
    def type(self):
        """Azure's run type, by what the runtime tagged: a pipeline's step, else a script run."""
        return "azureml.StepRun" if "mlops.step" in self.get_tags() else "azureml.scriptrun"

    def get_status(self):
        return "Running"


def patch(module):
    """get_context(): the real one, or the local run where that is the offline fallback."""
    real = module.Run.get_context.__func__

    def identify(self, run_id):
        """What the offline run's constructor sets, without Run's (which needs a workspace)."""
        self._run_id = self._identity = run_id
        self._logger = module.module_logger.getChild(run_id)

    # a Run too: Azure's own packages (AutoML's runners) assert the context is one
    local = type("LocalRun", (Forwarding, module._OfflineRun, module.Run),
                 {"_identify": identify})

    def get_context(cls, allow_offline=True, used_for_context_manager=False, **kwargs):
        run = real(cls, allow_offline, used_for_context_manager, **kwargs)
        job_run = os.environ.get("MLFLOW_RUN_ID")
        if type(run) is module._OfflineRun and job_run:
            return local(job_run)
        return run

    module.Run.get_context = classmethod(get_context)


def patch_model(module):
    """Model.get_model_path: where AZUREML_MODEL_DIR does not answer (as azureml-core reads it
    first), the asset map's `azureml:<name>[:<version>]`, before the workspace is asked."""
    real = module.Model.get_model_path

    def get_model_path(model_name, version=None, _workspace=None):
        local = stand_in(model_name, version) if not os.environ.get("AZUREML_MODEL_DIR") else None
        return local if local else real(model_name, version, _workspace)

    module.Model.get_model_path = staticmethod(get_model_path)


PATCHES = {TARGET: patch, MODEL: patch_model}


class PatchingLoader:
    """A loader (the import system's protocol: create_module, exec_module) that patches the
    module it loads. Neither class derives from importlib.abc, whose import pulls in
    importlib.resources, pathlib and tempfile: a tenth of a second at every job's start."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        with contextlib.suppress(AttributeError):  # another azureml-core layout: as it is
            PATCHES[module.__name__](module)


class Finder:
    """A meta path finder (find_spec) for the azureml-core modules it patches alone."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in PATCHES:
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
