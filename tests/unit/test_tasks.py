"""What a spec asks for becomes locally: the pure builders under every local run
(mlops/runtime/tasks.py), and notes on what this machine does not start."""

import re

import pytest

from mlops.checks.overrides import apply_sets, parse_sets
from mlops.errors import LocalRunError
from mlops.orchestrators.jobs import services_note
from mlops.runtime.tasks import TaskSource, command_task, time_limit
from mlops.runtime.uris import AssetMap


@pytest.mark.parametrize("value", ["soon", "PT1H", "0", "-5"])
def test_a_limits_timeout_that_is_not_a_positive_number_of_seconds_is_refused(value):
    with pytest.raises(LocalRunError, match=r"^job\.limits\.timeout: .*seconds"):
        time_limit({"limits": {"timeout": value}}, "job")


def test_limits_timeout_is_seconds_and_no_limit_when_unset(tmp_path):
    assert time_limit({"limits": {"timeout": 7200}}, "job") == 7200.0
    assert time_limit({"limits": {"timeout": "90"}}, "job") == 90.0
    assert time_limit({"limits": {}}, "job") == time_limit({"limits": None}, "job") == 0.0
    data = {"command": "true", "limits": {"timeout": 5}}
    task = command_task(TaskSource(definition=data, base=tmp_path, folder=tmp_path / "run",
                                   assets=None, where="job", name="job", experiment="Default"))
    assert task.timeout == 5.0


def test_interactive_services_are_named_in_a_note_with_where_to_look_instead(tmp_path):
    services = {"services": {"code": {"type": "vs_code"},
                             "board": {"type": "tensor_board", "log_dir": "outputs/tb"}}}
    note = services_note(services, tmp_path / "wd")
    assert note.startswith("note: services code (vs_code), board (tensor_board) are Azure's")
    assert f"open {tmp_path / 'wd'}" in note
    assert note.endswith(f"tensorboard --logdir {tmp_path / 'wd/outputs/tb'}")
    assert services_note({"command": "true"}, tmp_path) == ""


@pytest.mark.parametrize(("key", "spec", "bare", "kind", "what"), [
    ("jobs.a.inputs.raw", {"jobs": {"a": {"inputs": {"raw": {"type": "uri_folder",
                                                           "path": "azureml:raw@latest"}}}}},
     False, "data", "local path"),
    ("jobs.a.inputs.raw", {"jobs": {"a": {"inputs": {"raw": "azureml:raw@latest"}}}},
     True, "data", "local path"),
    ("jobs.a.component", {"jobs": {"a": {"component": "azureml:train@latest"}}},
     True, "component", "local component .yml"),
])
def test_the_override_an_unmapped_reference_suggests_is_one_set_takes(tmp_path, key, spec, bare,
                                                                      kind, what):
    (tmp_path / "map.yml").write_text("{}\n")
    reference = "azureml:train@latest" if key.endswith("component") else "azureml:raw@latest"
    with pytest.raises(LocalRunError) as refused:
        AssetMap(tmp_path / "map.yml").local_path(reference, f"spec.yml: {key}", tmp_path,
                                                  bare=bare, kind=kind)
    suggested = re.search(r"--set (\S+)=<(.+)>$", str(refused.value))
    assert suggested.group(2) == what
    data = apply_sets(spec, parse_sets([f"{suggested.group(1)}=here"], tmp_path), tmp_path)
    node = data["jobs"]["a"]
    value = node["component"] if "component" in node else node["inputs"]["raw"]
    assert value == "here" or value["path"] == "here"


PACKAGE_FRAME = '  File "/env/lib/python3.11/site-packages/cloudpickle/main.py", line 172, in f'


@pytest.mark.parametrize(("tail", "expected"), [
    (["Traceback (most recent call last):", '  File "/run/wd/score.py", line 3, in <module>',
      PACKAGE_FRAME, "TypeError: code() argument 13 must be str, not int"], True),
    ([f"[process 1] {PACKAGE_FRAME}", "[process 1] ModuleNotFoundError: No module named 'x.y'"],
     True),
    ([PACKAGE_FRAME, "_pickle.UnpicklingError: invalid load key"], True),
    (['  File "/repo/.cache/envs/view-11de2d003932a7c4/yaml/reader.py", line 178, in f',
      "AttributeError: 'int' object has no attribute 'read'"], True),  # .venv's, via a view
    # the job's own code raised last, or an error no other Python explains
    ([PACKAGE_FRAME, '  File "/run/wd/train.py", line 9, in main', "TypeError: bad"], False),
    ([PACKAGE_FRAME, "FileNotFoundError: [Errno 2] No such file or directory: 'x.csv'"], False),
    ([PACKAGE_FRAME, "ImportError: x", "During handling of the above exception, another "
      "exception occurred:", PACKAGE_FRAME, "KeyError: 'y'"], False),  # the last one counts
    (["TypeError: printed by the job, no traceback"], False),
])
def test_a_version_error_is_one_raised_inside_an_installed_package(tail, expected):
    from mlops.runtime.failures import version_error

    assert version_error(tail) is expected


@pytest.mark.parametrize(("tail", "expected"), [
    (["bash: line 1: Rscript: command not found"], True),
    (["sh: 1: julia: not found", ""], True),
    (["Rscript: command not found", "job: Failed (exit 127)", "  outputs: /x"], True),
    (["ModuleNotFoundError: No module named 'x'"], False),
    (["bash: line 1: Rscript: command not found", "a", "b", "c"], False),  # not where it ended
    (["print('the page was not found')"], False),
])
def test_a_missing_command_is_a_shells_last_words(tail, expected):
    from mlops.runtime.failures import missing_command

    assert missing_command(tail) is expected


def test_a_job_on_an_undefined_image_that_misses_a_command_gets_the_images_note(tmp_path):
    from mlops.environments.activation import Environments
    from mlops.environments.envspec import EnvironmentRef
    from mlops.runtime.failures import explain

    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(
        "FROM rocker/tidyverse:latest\nRUN R -e \"install.packages('x')\"\n")
    envs = Environments()
    envs.layers(EnvironmentRef(value={"build": {"path": "ctx"}}, base=tmp_path), "job")
    notes = explain(envs, "job", ["bash: line 1: Rscript: command not found"])
    assert len(notes) == 1 and "'image:rocker/tidyverse: [" in notes[0]
    assert "what it imports or runs" in notes[0]
    assert explain(envs, "job", ["ValueError: bad input"]) == []


def test_an_environment_for_another_python_moved_here_leaves_a_caveat_for_its_failures(
        tmp_path, monkeypatch, capsys):
    """No interpreter of Python 3.9 to be had: the closure, resolved for 3.9, is moved to this
    Python, one line says so and how to get one, and a failure carries the caveat."""
    import importlib.metadata

    from mlops.environments import activation
    from mlops.environments.envspec import EnvironmentRef

    asked = []  # the closure for Python 3.9 is resolved (tests/e2e); here: nothing to install
    monkeypatch.setattr(activation, "find", lambda minor: None)
    monkeypatch.setattr(activation, "build_closure_layer",
                        lambda lines, python, label, adds: asked.append((python, lines))
                        or tmp_path)
    pin = "\n".join(f"  - {name}=={importlib.metadata.version(name)}"
                    for name in ("pyyaml", "setuptools", "wheel"))
    (tmp_path / "conda.yml").write_text(f"dependencies:\n- python=3.9\n- pip\n- pip:\n{pin}\n")
    envs = activation.Environments()
    stack = envs.layers(EnvironmentRef(value={"conda_file": "conda.yml"}, base=tmp_path), "job")
    assert stack.layers == [tmp_path] and not stack.own
    assert asked and asked[0][0] == "3.9" and "pip" in asked[0][1]
    assert "is built for Python 3.9 on Azure and ran on 3." in envs.caveat("job")
    err = capsys.readouterr().err
    assert "no interpreter of Python 3.9 is on this machine" in err
    assert "uv python install 3.9" in err and "MLOPS_PYTHON_3_9=" in err
    (tmp_path / "conda.yml").write_text(f"dependencies:\n- pip\n- pip:\n{pin}\n")
    envs.layers(EnvironmentRef(value={"conda_file": "conda.yml"}, base=tmp_path), "same-python")
    assert envs.caveat("same-python") == ""


def _fake_builds(tmp_path, monkeypatch, absent=("libjpeg-turbo", "nosuchpkg", "pytorch-cuda")):
    """build_closure_layer as uv answers for names the package registry has no project of."""
    from mlops.environments import activation
    from mlops.errors import LocalRunError

    built = []

    def build(lines, python, label, adds):
        built.append(list(lines))
        for name in absent:
            if any(line.startswith(name) for line in lines):
                raise LocalRunError(f"environment x: no set of releases satisfies ...:\n  cause: "
                                    f"Because {name} was not found in the package registry "
                                    f"and you require {name}, we can conclude ...")
        return tmp_path

    monkeypatch.setattr(activation, "build_closure_layer", build)
    monkeypatch.setattr(activation, "layer_record", lambda layer: {})
    return built


def test_a_conda_package_pypi_has_no_project_of_is_left_out_not_called_unbuildable(
        tmp_path, monkeypatch, capsys):
    """`- libjpeg-turbo` in a conda file: conda installs it on Azure's image; uv finds no such
    project, which is no reason to say Azure's build fails too. A pip line that names no
    project still fails, as Azure's pip fails."""
    from mlops.environments import activation
    from mlops.environments.envspec import EnvironmentRef
    from mlops.errors import LocalRunError

    built = _fake_builds(tmp_path, monkeypatch)
    (tmp_path / "conda.yml").write_text("dependencies:\n- python=3.11\n- libjpeg-turbo\n- pip\n"
                                        "- pip:\n  - pyjokes==0.6.0\n")
    envs = activation.Environments()
    envs.layers(EnvironmentRef(value={"conda_file": "conda.yml"}, base=tmp_path), "job")
    assert any("libjpeg-turbo" in line for line in built[0]) and \
        not any("libjpeg-turbo" in line for line in built[-1])
    assert "conda package 'libjpeg-turbo' has no PyPI project; conda installs it on Azure's" \
        in capsys.readouterr().err
    (tmp_path / "conda.yml").write_text("dependencies:\n- python=3.11\n- pip\n"
                                        "- pip:\n  - nosuchpkg==1.0\n")
    with pytest.raises(LocalRunError, match="nosuchpkg was not found"):
        activation.Environments().layers(EnvironmentRef(value={"conda_file": "conda.yml"},
                                                        base=tmp_path), "job")


def test_pytorchs_cuda_and_cpu_selectors_are_left_out_saying_what_conda_installs(
        tmp_path, monkeypatch, capsys):
    """pytorch-cuda, cpuonly, cudatoolkit in a conda file are conda's alone: left out as read,
    the note saying what conda installs instead; in a curated image's catalogue line (where
    the conda origin is not kept: Azure built that image, so a line PyPI lacks was conda's)
    the resolver's answer leaves it out the same way."""
    from mlops.environments import activation
    from mlops.environments.envspec import EnvironmentRef, EnvMap

    built = _fake_builds(tmp_path, monkeypatch)
    (tmp_path / "conda.yml").write_text("dependencies:\n- python=3.11\n- pytorch=1.13.1\n"
                                        "- pytorch-cuda=11.7\n- nvidia::cudatoolkit=11.7\n"
                                        "- cpuonly\n- pip\n")
    conda = EnvironmentRef(value={"conda_file": "conda.yml"}, base=tmp_path)
    activation.Environments().layers(conda, "a")
    err = capsys.readouterr().err
    assert not any(name in line for line in built[0]
                   for name in ("pytorch-cuda", "cudatoolkit", "cpuonly"))
    assert "conda package 'pytorch-cuda=11.7' has no PyPI equivalent; conda installs it on " \
        "Azure's image (the CUDA runtime libraries of PyTorch's CUDA build" in err
    assert "'cpuonly' has no PyPI equivalent; conda installs it on Azure's image (the " \
        "selector of PyTorch's CPU-only build)" in err
    (tmp_path / "curated.yml").write_text(
        "azureml://registries/azureml/environments/evals:\n  python: '3.11'\n"
        "  pip: [torch, pytorch-cuda==11.7.*, pyjokes==0.6.0]\n")
    built.clear()
    envs = activation.Environments()
    envs.env_map = EnvMap(tmp_path / "none.yml", tmp_path / "curated.yml")
    envs.layers(EnvironmentRef(value="azureml://registries/azureml/environments/evals/labels/latest",
                               base=tmp_path), "b")
    assert "pytorch-cuda==11.7.*" in built[0] and "pytorch-cuda==11.7.*" not in built[-1]
    assert "conda package 'pytorch-cuda==11.7.*' has no PyPI project; conda installs it on " \
        "Azure's image (the CUDA" in capsys.readouterr().err


def test_a_failed_call_to_azures_run_history_rest_is_named_with_its_reason():
    """responsible-AI's gather step PATCHes its run's properties to run history on the tracking
    URI's host; the local tracking server answers it, so a failure has a reason the log shows
    (an untrusted certificate, a server on plain HTTP, no host, nothing listening), and the
    note names the call and that reason in one line."""
    from mlops.runtime.failures import service_note

    url = ("/history/v1.0/subscriptions/None/resourceGroups/None/providers/Microsoft."
           "MachineLearningServices/workspaces/None/experimentids/1/runs/abc123")
    frames = ["Traceback (most recent call last):",
              '  File "rai_component_utilities.py", line 158, in add_properties_to_gather_run']
    cases = {"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed": "did not trust",
             "[SSL: WRONG_VERSION_NUMBER] wrong version number": "plain HTTP only",
             "[SSL] record layer failure (_ssl.c:1000)": "plain HTTP only",
             "Invalid URL 'https:///history': No host supplied": "has no host",
             "[Errno 111] Connection refused": "nothing answered",
             "(UserError) Run abc123 was not found": "answered it with the error above"}
    for error, reason in cases.items():
        tail = [*frames, "azure.core.exceptions.ServiceRequestError: HTTPSConnectionPool(host="
                f"'127.0.0.1', port=5000): Max retries exceeded with url: {url} ({error})"]
        note = service_note(tail)
        assert note.startswith(f"note: the job called Azure ML's run-history REST service ({url}"
                               " on the tracking URI's host"), note
        assert reason in note and "\n" not in note, (error, note)
    assert service_note(["ValueError: bad input"]) == ""


def test_a_token_azure_identity_could_not_get_is_named_as_azures_identity():
    """A step that authenticates with azure-identity (a blob upload, an MLClient) gets its token
    on Azure ML compute from the job's identity; here none answers, and the note says so in one
    line, naming the credential. A service's own 401 (no credential named) and other errors earn
    no such note."""
    from mlops.runtime.failures import credential_note

    frames = ["Traceback (most recent call last):",
              '  File "/env/site-packages/azure/identity/_credentials/chained.py", line 219']
    cases = {"azure.core.exceptions.ClientAuthenticationError: DefaultAzureCredential failed to "
             "retrieve a token from the included credentials.": "DefaultAzureCredential",
             "azure.identity._exceptions.CredentialUnavailableError: ManagedIdentityCredential "
             "authentication unavailable, no response from the IMDS endpoint.":
             "ManagedIdentityCredential"}
    for raised, credential in cases.items():
        tail = [*frames, raised, "\tEnvironmentCredential: EnvironmentCredential authentication "
                "unavailable. Environment variables are not fully configured."]
        note = credential_note(tail)
        assert note.startswith(f"note: the job asked Microsoft Entra ID for a token ({credential}"
                               ", azure-identity)"), note
        assert "needs Azure" in note and "AZURE_CLIENT_SECRET" in note and "\n" not in note
    refused = ("azure.core.exceptions.ClientAuthenticationError: (AuthenticationFailed) Server "
               "failed to authenticate the request")
    assert credential_note([*frames, refused]) == ""
    assert credential_note(["ValueError: bad input"]) == ""
    assert credential_note([]) == ""
