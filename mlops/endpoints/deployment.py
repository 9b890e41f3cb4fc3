"""An online or batch deployment spec as the local endpoint (serve.py) and batch runner
(batch.py) run it: its kind, model, code and environment, checked as Azure checks them.

A deployment with `code_configuration` runs its own scoring script in its own `environment:`.
One without is Azure's no-code deployment, allowed for MLflow models only: Azure generates the
scoring script (mlops/endpoints/nocode/: online, a server over mlflow.pyfunc; batch, the MLflow
batch driver) and the environment from the model's own conda.yaml, on an image that has the
inference server and MLflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlops.checks.overrides import apply_sets, parse_sets
from mlops.checks.validation import check
from mlops.endpoints.models import ModelSource, model_source
from mlops.environments.envspec import EnvironmentRef, EnvMap, require_environment
from mlops.errors import LocalRunError
from mlops.runtime import code_path
from mlops.specs import DEPLOYMENT_TYPES, Spec, SpecData, an, load_spec
from mlops.workspace.references import submission, submitted_name

NOCODE = Path(__file__).with_name("nocode")
NOCODE_SCRIPTS = {"online-deployment": "mlflow_score.py", "batch-deployment": "mlflow_batch.py"}
# The inference server every online container starts, which it checks the environment installs
# (mlops/environments/startup.py): a deployment with its own scoring script and environment
# lists it, as Azure requires; a no-code MLflow deployment's image brings it and MLflow (the
# mlflow-py*-inference images: Azure adds them to the model's environment).
SERVER_PACKAGES = ("azureml-inference-server-http",)
MLFLOW_PACKAGES = ("mlflow",)


@dataclass(kw_only=True)
class Deployment:
    spec: Spec
    model: ModelSource
    code: Path  # the folder Azure uploads (code_configuration.code)
    scoring_script: str  # relative to `code`
    environment: EnvironmentRef  # as the spec (or the no-code rule) names it, with the image's
    nocode: bool = False

    @property
    def name(self) -> str:
        return str(self.spec.data.get("name") or self.spec.path.stem)


def image_packages(role: str) -> tuple[str, ...]:
    """What a no-code deployment's image adds when the model's environment lacks it."""
    return (SERVER_PACKAGES if role == "online-deployment" else ()) + MLFLOW_PACKAGES


def server_check(role: str) -> tuple[str, ...]:
    """What the container checks the environment installs before it starts (online only)."""
    return SERVER_PACKAGES if role == "online-deployment" else ()


def load(path: str | Path, role: str, model: str | None = None,
         asset_file: Path | None = None, sets: list[str] | None = None) -> Deployment:
    """`role`: online- or batch-deployment, `sets` its --set. Errors say what Azure refuses."""
    spec = _loaded(path, role, sets)
    table, default = DEPLOYMENT_TYPES[role]
    declared = spec.declared  # what its $schema names, if it names a kind Azure has
    if declared and declared not in {*table.values(), spec.kind, "batchDeployment"}:
        raise LocalRunError(f"{path}: its $schema names {an(declared)}, not "
                            f"{an(role.replace('-', ' '))}")
    runnable = {kind: name for kind, name in table.items() if kind != "pipeline"}
    if spec.kind not in {*runnable.values(), "batchDeployment"}:  # the flat layout runs too
        kind = spec.data.get("type") or default
        if kind == "pipeline":
            raise LocalRunError(f"{path}: a deployment of type pipeline runs a pipeline "
                                "component, not a model, so this model runner does not run it; "
                                "it runs as its batch endpoint's job, as on Azure: `azml "
                                "batch-deployment create -f <it> -e <endpoint>`, then `azml "
                                "batch-endpoint invoke -n <endpoint> -d <name> --file "
                                "<inputs.yml>` (mlops/endpoints/pipeline_deployment.py)")
        raise LocalRunError(f"{path}: a deployment of type {kind} does not run locally (a "
                            f"local {role.replace('-', ' ')} is of type "
                            f"{' or '.join(runnable)})")
    errors = [str(f) for f in check(spec, for_run=True) if f.is_error]
    if errors:
        raise LocalRunError("\n".join(errors) + "\nAzure would refuse this deployment")
    require_named_environment(spec, role)
    source = model_source(spec.data.get("model"), spec.path.parent, str(spec.path), override=model,
                          asset_file=asset_file)
    config = spec.data.get("code_configuration") or {}
    return _with_code(spec, source, config, role) if config else _no_code(spec, source, role)


def require_named_environment(spec: Spec, role: str) -> None:
    """A workspace environment name (`azureml:<name>:<version>`, `@latest`) nothing here knows
    is refused before the model is looked up: az ml's upload_dependencies resolves a
    deployment's code, then its environment, then its model (azure-ai-ml,
    _utils/_endpoint_utils.py), and Azure refuses the deployment whose environment the
    workspace lacks; it does not run in .venv."""
    value = spec.data.get("environment")
    if submitted_name(value) is not None:
        require_environment(value, spec.path.parent, EnvMap(), f"{spec.path}: environment",
                            by=submission(role))


def _with_code(spec: Spec, source: ModelSource, config: SpecData, role: str) -> Deployment:
    code = code_path(config.get("code", "."), spec.path.parent,
                     f"{spec.path}: code_configuration.code")
    return Deployment(spec=spec, model=source, code=code,
                      scoring_script=str(config["scoring_script"]),
                      environment=EnvironmentRef(value=spec.data.get("environment"),
                                                 base=spec.path.parent,
                                                 requires=server_check(role)))


def _no_code(spec: Spec, source: ModelSource, role: str) -> Deployment:
    """A deployment without code_configuration: Azure's no-code MLflow deployment."""
    if not source.mlflow:
        raise LocalRunError(f"{spec.path}: no code_configuration, and {source.path} is not an "
                            "MLflow model (no MLmodel file): Azure deploys only MLflow models "
                            "without code. Add code_configuration (code, scoring_script) and an "
                            "environment")
    adds = image_packages(role)
    environment = EnvironmentRef(value=spec.data.get("environment"), base=spec.path.parent,
                                 adds=adds)
    if environment.value is None:
        environment = mlflow_environment(source.path, adds)
    return Deployment(spec=spec, model=source, code=NOCODE, scoring_script=NOCODE_SCRIPTS[role],
                      environment=environment, nocode=True)


def _loaded(path: str | Path, role: str, sets: list[str] | None) -> Spec:
    spec = load_spec(path, role)
    if sets:
        spec.data = apply_sets(spec.data, parse_sets(sets, spec.path), spec.path)
    return spec


def mlflow_environment(model: Path, adds: tuple[str, ...]) -> EnvironmentRef:
    """The model's own conda.yaml, as Azure builds a no-code deployment's environment."""
    conda = model / "conda.yaml"
    return EnvironmentRef(value={"conda_file": conda.name} if conda.is_file() else None, base=model,
                          adds=adds)
