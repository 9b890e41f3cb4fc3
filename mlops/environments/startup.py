"""What an image checks in the environment before it starts a task's process.

Azure's inference containers (azureml-assets: assets/training/model_management/environments/
mlflow-model-inference/context/runit/gunicorn/run, the service every online deployment's
container runs) stop a deployment whose environment lacks the inference server:

    if [[ -z "$(pip show azureml-inference-server-http 2>/dev/null)" ]]; then
        ... "A required package azureml-inference-server-http is missing. Please install
        azureml-inference-server-http before trying again"; exit 100

`pip show` answers from the environment's own packages (a conda file's environment is the one
on PATH), so what counts here is the closure of what the environment itself installs, not what
.venv below a layer happens to hold. It is checked only where the runtime knows the whole
package set Azure builds (EnvPlan.complete: a conda file's, a curated environment's from the
generated catalogue); a stand-in it knows only in part (.venv for an unknown name, a hand-written
map entry, a Docker build) is not judged.
"""

from __future__ import annotations

from mlops.environments.layers import Stack, closure
from mlops.environments.requirements import canonical
from mlops.errors import LocalRunError


def absent(stack: Stack, lines: list[str], required: tuple[str, ...]) -> list[str]:
    """What of `required` the environment's requirements do not install (directly or through
    another package's requirements), looked up in the environment's own layers and, over .venv,
    in .venv as its layers see it."""
    if not required:
        return []
    held = closure(lines, [str(site) for site in stack.sites()])
    return [name for name in required if canonical(name) not in held]


def refuse_absent(label: str, names: list[str]) -> None:
    """Azure's container stops before the server starts: the deployment fails there too."""
    if not names:
        return
    name = names[0]
    raise LocalRunError(
        f"{label} does not install {name}, and Azure's inference container checks for it "
        f"before it starts the server: \"A required package {name} is missing. Please install "
        f"{name} before trying again\" (the container exits 100, so the deployment fails on "
        f"Azure too). Add {name} (or azureml-defaults, which requires it) to the environment's "
        "pip dependencies")
