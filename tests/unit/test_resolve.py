"""An environment for another Python: its closure resolved for that Python, then moved here as
one set (mlops/environments/resolve.py, closures.py). uv itself is stood in for here; the
real resolutions run in tests/e2e/test_local_envs.py and the heavy closure fixtures."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mlops.environments import closures, resolve, steps
from mlops.environments.resolve import Locked
from mlops.errors import LocalRunError, MachineError

PYLOCK = '''lock-version = "1.0"
created-by = "uv"

[[packages]]
name = "NumPy"
version = "1.21.6"
wheels = [{ url = "https://x/numpy-1.21.6-cp37-cp37m-manylinux_2_12_x86_64.whl" }]

[[packages]]
name = "json-logging-py"
version = "0.2"
sdist = { url = "https://x/json-logging-py-0.2.tar.gz" }

[[packages]]
name = "typing_extensions"
version = "4.7.1"
marker = "python_full_version < '3.8'"
wheels = [{ url = "https://x/typing_extensions-4.7.1-py3-none-any.whl" }]
'''


def test_a_lock_says_which_packages_ship_compiled_wheels(tmp_path):
    (tmp_path / "pylock.toml").write_text(PYLOCK)
    found = resolve._locked(tmp_path / "pylock.toml")
    assert found == {"numpy": Locked("1.21.6", True),
                     "json-logging-py": Locked("0.2", False),
                     "typing-extensions": Locked("4.7.1", False, "python_full_version < '3.8'")}


def test_the_move_asks_for_lower_bounds_lowest_first_compiled_ones_as_wheels(monkeypatch):
    asked = {}

    def compile_set(lines, python, only_binary, lowest=False, options=()):
        asked.update(lines=lines, only_binary=only_binary, lowest=lowest)
        return {"numpy": Locked("1.23.2", True), "pandas": Locked("1.5.0", True),
                "six": Locked("1.17.0", False)}

    monkeypatch.setattr(resolve, "compile_set", compile_set)
    monkeypatch.setattr(resolve, "venv_version", lambda name: {"torch": "2.14.1"}.get(name))
    target = {"numpy": Locked("1.21.2", True), "pandas": Locked("1.3.5", True),
              "six": Locked("1.17.0", False), "torch": Locked("1.13.0", True),
              "nvidia-cublas-cu11": Locked("11.10.3.66", True),
              "importlib-metadata": Locked("6.7.0", False, "python_version < '3.8'")}
    moved = resolve.move_here(target)
    assert asked["lowest"] and asked["lines"] == [
        "importlib-metadata>=6.7.0 ; python_version < '3.8'", "numpy>=1.21.2",
        "pandas>=1.3.5", "six>=1.17.0"]  # the GPU stack is .venv's, never moved
    assert asked["only_binary"] == {"numpy", "pandas", "torch", "nvidia-cublas-cu11"}
    assert moved.lines == ["numpy 1.21.2 -> 1.23.2", "pandas 1.3.5 -> 1.5.0",
                           "torch 1.13.0 -> 2.14.1 (.venv's build stands in)"]


def test_an_sdist_whose_metadata_fails_to_build_is_retried_as_wheels_only(monkeypatch):
    calls = []

    def run(argv, **kwargs):
        calls.append(argv)
        if len(calls) == 1:
            return subprocess.CompletedProcess(argv, 1, "", "× Failed to build `pyarrow==3.0.0`")
        Path(argv[argv.index("-o") + 1]).write_text(PYLOCK)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(resolve.subprocess, "run", run)
    monkeypatch.setattr(resolve, "uv_binary", lambda: "uv")
    found = resolve.compile_set(["azureml-defaults==1.38.0"], ["--python-version", "3.7"], set())
    assert "numpy" in found
    assert "--only-binary" not in calls[0] and calls[1][-2:] == ["--only-binary", "pyarrow"]


def test_no_set_for_the_environments_python_is_the_one_failure_said_to_be_azures_too(
        monkeypatch):
    def no_set(lines, version):
        raise resolve.NoSet("Because there is no version of nope==9 ...")

    monkeypatch.setattr(resolve, "target_set", no_set)
    with pytest.raises(LocalRunError, match="Python 3.7, so Azure's image build for that "
                                            "Python fails too"):
        closures._resolved(["nope==9"], "3.7", "env", ())

    monkeypatch.setattr(resolve, "target_set", lambda lines, version: {"x": Locked("1", True)})

    def nothing_here(target, no_build=frozenset()):
        raise resolve.NoSet("no wheels")

    monkeypatch.setattr(resolve, "move_here", nothing_here)
    with pytest.raises(LocalRunError, match="no set of releases that installs on this "
                                            "machine's Python") as refused:
        closures._resolved(["x==1"], "3.7", "env", ())
    assert "fails too" not in str(refused.value)


def test_the_images_own_packages_give_way_to_the_environments_pins(monkeypatch):
    asked = []

    def target_set(lines, version):
        asked.append(lines)
        if "azureml-inference-server-http==1.4.1" in lines:
            raise resolve.NoSet("azureml-defaults==1.38.0 needs ~=0.4.1")
        return {}

    monkeypatch.setattr(resolve, "target_set", target_set)
    closures._target(["azureml-defaults==1.38.0"], "3.7",
                         ("azureml-inference-server-http==1.4.1",))
    assert asked[-1] == ["azureml-defaults==1.38.0", "azureml-inference-server-http"]


def test_venv_is_hidden_only_where_its_regular_package_would_win_over_a_namespace(
        tmp_path, monkeypatch):
    layer = tmp_path / "layer"
    site = layer / "lib" / closures.PY / "site-packages"
    venv = tmp_path / "venv"
    for folder, init in [(site / "azure/monitor/opentelemetry/exporter", True),
                         (venv / "azure/monitor/opentelemetry", True),
                         (site / "opentelemetry/sdk", True), (venv / "opentelemetry/proto", True),
                         (site / "numpy", True), (venv / "numpy", True)]:
        folder.mkdir(parents=True, exist_ok=True)
        if init:
            (folder / "__init__.py").write_text("")
    monkeypatch.setattr(closures, "BASE_SITE", venv)
    # azure/monitor/opentelemetry is a regular package in .venv, a namespace in the layer:
    # .venv's would win, so .venv's azure/ is hidden; opentelemetry/ merges; numpy is the layer's
    assert closures._shadowed(layer) == {"azure"}


def test_what_the_closure_shares_with_venv_under_a_hidden_entry_goes_into_the_layer():
    """azure/ of .venv hidden: the closure's azure-core, at .venv's very version, must come from
    the layer, or the hidden entry takes it away."""
    from pathlib import PurePosixPath
    from types import SimpleNamespace

    dists = [SimpleNamespace(metadata={"Name": "azure_core"},
                             files=[PurePosixPath("azure/core/__init__.py")]),
             SimpleNamespace(metadata={"Name": "six"}, files=[PurePosixPath("six.py")])]
    assert closures._under(frozenset({"azure"}), {"azure-core", "six"}, dists) == {"azure-core"}


PKG_RESOURCES = """  × Failed to build `scikit-learn==0.20.0`
  ├─▶ The build backend returned an error
      File "<string>", line 36, in <module>
      ModuleNotFoundError: No module named 'pkg_resources'
"""


def test_a_build_that_needs_pkg_resources_runs_again_with_the_setuptools_of_its_era(
        monkeypatch):
    """setuptools 82 dropped pkg_resources: a legacy setup.py's build is given setuptools<82 as
    a build constraint (what the environment installs is unchanged)."""
    calls = []

    def run(argv, **kwargs):
        calls.append(argv)
        if "--build-constraints" in argv:
            constraints = Path(argv[argv.index("--build-constraints") + 1]).read_text()
            calls.append(constraints)
            return subprocess.CompletedProcess(argv, 0, "", "")
        return subprocess.CompletedProcess(argv, 1, "", PKG_RESOURCES)

    monkeypatch.setattr(resolve.subprocess, "run", run)
    assert resolve.run_uv(["uv", "pip", "install", "x==1"]).returncode == 0
    assert calls[0] == ["uv", "pip", "install", "x==1"]
    assert calls[1][:4] == calls[0] and calls[2].strip() == "setuptools<82"


def test_a_failed_build_names_its_package_and_version():
    failed = resolve.build_failure(PKG_RESOURCES)
    assert (failed.name, failed.version) == ("scikit-learn", "0.20.0")
    assert "pkg_resources" in str(failed)
    assert resolve.build_failure("error: no solution found") is None


def test_a_package_that_does_not_build_here_is_moved_to_a_wheel_else_named(monkeypatch, tmp_path):
    """The first failed build takes the package as wheels only (a release with a wheel for this
    Python); if it fails again, the error names it, its version and the fix."""
    moves = []
    monkeypatch.setattr(closures, "target_for", lambda *a: {"pyarrow": Locked("9.0.0", False)})

    def move(target, no_build=frozenset()):
        moves.append(no_build)
        version = "10.0.1" if "pyarrow" in no_build else "9.0.0"
        return resolve.Moved(target, {"pyarrow": Locked(version, True)})

    monkeypatch.setattr(resolve, "move_here", move)

    def install(folder, moved, label):
        if moved.here["pyarrow"].version == "9.0.0":
            raise resolve.BuildFailed("pyarrow", "9.0.0", "No module named 'pkg_resources'")
        return {"pyarrow": "10.0.1"}

    monkeypatch.setattr(closures, "_install", install)
    monkeypatch.setattr(closures, "_shadowed", lambda folder: frozenset())
    monkeypatch.setattr(closures, "make_venv", lambda folder, lower: folder)
    built = closures._built(tmp_path / "layer", ["pyarrow==9.0.0"], python="3.11", label="env",
                            adds=())
    assert built.installed == {"pyarrow": "10.0.1"} and moves == [frozenset(),
                                                                  frozenset({"pyarrow"})]

    def never(folder, moved, label):
        raise resolve.BuildFailed("pyarrow", moved.here["pyarrow"].version, "cmake failed")

    monkeypatch.setattr(closures, "_install", never)
    with pytest.raises(MachineError, match=r"pyarrow 10.0.1 failed to build(.|\n)*Fix: pin a "
                                            "release of pyarrow that publishes a wheel"):
        closures._built(tmp_path / "layer", ["pyarrow==9.0.0"], python="3.11", label="env", adds=())


UNWRITABLE_CACHE = """error: Failed to initialize cache at `/home/ana/.cache/uv`
  Caused by: failed to create directory `/home/ana/.cache/uv`: Read-only file system (os error 30)
"""


def test_an_unwritable_uv_cache_is_named_as_such_never_as_azures_failure(monkeypatch):
    """A read-only HOME stops uv before it resolves anything: the reason is this machine's
    cache folder, and nothing may say Azure's build would fail."""
    def run(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 2, "", UNWRITABLE_CACHE)

    monkeypatch.setattr(resolve.subprocess, "run", run)
    monkeypatch.setattr(resolve, "uv_binary", lambda: "uv")
    with pytest.raises(resolve.UvFailed) as failed:
        resolve.compile_set(["six==1.17.0"], ["--python-version", "3.8"], set())
    message = str(failed.value)
    assert "uv's cache folder /home/ana/.cache/uv cannot be written (Read-only file system)" \
        in message and "set UV_CACHE_DIR" in message
    assert "fails too" not in message and not isinstance(failed.value, resolve.NoSet)


def test_only_a_resolution_that_ran_and_found_no_set_is_said_to_fail_on_azure(monkeypatch):
    def run(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 1, "", "  × No solution found when resolving "
                                           "dependencies:\n  ╰─▶ Because nope==9 ...")

    monkeypatch.setattr(resolve.subprocess, "run", run)
    monkeypatch.setattr(resolve, "uv_binary", lambda: "uv")
    with pytest.raises(resolve.NoSet, match="No solution found"):
        resolve.compile_set(["nope==9"], ["--python-version", "3.8"], set())


def test_uv_and_build_failures_are_the_machines_exit_1_with_what_to_do(capsys):
    """uv that cannot run, and a source build that fails here, are the machine's: exit 1 (the
    input's errors exit 2), the message saying what to do."""
    from mlops import exit_code

    def failing(error):
        def call():
            raise error
        return call

    assert exit_code(failing(resolve.uv_failure(UNWRITABLE_CACHE, "resolving"))) == 1
    assert "UV_CACHE_DIR" in capsys.readouterr().err
    assert exit_code(failing(resolve.BuildFailed("pyarrow", "9.0.0", "cmake failed"))) == 1
    assert exit_code(failing(resolve.NoSet("numpy==1 and numpy==2"))) == 2


def test_a_curated_images_build_day_reaches_uv_as_an_option_not_a_requirement(monkeypatch):
    """`--exclude-newer <time>` (mlops/environments/curated.py): what PyPI held when Azure
    built the image, for what its definition leaves unpinned."""
    seen = []

    def run(argv, **kwargs):
        seen.append((argv, Path(argv[3]).read_text()))
        Path(argv[argv.index("-o") + 1]).write_text(PYLOCK)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(resolve.subprocess, "run", run)
    monkeypatch.setattr(resolve, "uv_binary", lambda: "uv")
    resolve.compile_set(["azureml-mlflow==1.59.0.post1", "--exclude-newer 2025-04-04T09:32:33Z"],
                        ["--python-version", "3.10"], set())
    argv, source = seen[0]
    assert argv[-2:] == ["--exclude-newer", "2025-04-04T09:32:33Z"]
    assert source == "azureml-mlflow==1.59.0.post1\n"


def test_an_image_of_a_known_day_builds_its_sdists_with_that_days_build_tools(monkeypatch,
                                                                                tmp_path):
    """A curated or registry image was built on a known day: its own-Python environment
    installs with `--exclude-newer <that day>`, so an sdist (pycocotools 2.0.6) builds with the
    Cython and numpy PyPI held then, as Azure's build did; an environment of no known day is
    built with today's, as Azure builds it today."""
    from mlops.environments import own_python
    from mlops.environments.interpreters import HERE

    installs = []

    def run(argv):
        if argv[1:3] == ["pip", "install"]:
            installs.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(resolve, "run_uv", run)
    monkeypatch.setattr(resolve, "uv_binary", lambda: "uv")
    monkeypatch.setattr(own_python, "target_for",
                        lambda *a: {"pycocotools": Locked("2.0.6", True)})
    monkeypatch.setattr(own_python.abi, "built_for_numpy_1", lambda *a: [])
    day = "--exclude-newer 2024-04-30T09:25:39Z"
    own_python._paired(tmp_path / "a", ["pycocotools", day], version="3.8.18", python=HERE,
                       label="x", adds=())
    own_python._paired(tmp_path / "b", ["pycocotools==2.0.6"], version="3.8.18", python=HERE,
                       label="x", adds=())
    dated, today = installs
    assert dated[dated.index("--exclude-newer") + 1] == "2024-04-30T09:25:39Z"
    assert "pycocotools==2.0.6" in dated and "--exclude-newer" not in today


# Installs in turn (a Dockerfile's RUN lines, steps.py): each resolved over what the installs
# before it left, a --no-deps one alone.
STEP, NO_DEPS = steps.STEP, f"{steps.STEP} --no-deps"


def test_a_key_keeps_the_order_of_the_installs_and_nothing_else():
    a = [STEP, "x==1", "y==2", NO_DEPS, "z==3"]
    assert steps.key_lines(["b", "a"]) == ["b", "a"]  # no installs: the lines as before
    assert sorted(steps.key_lines(a)) == sorted(steps.key_lines([STEP, "y==2", "x==1", NO_DEPS,
                                                                 "z==3"]))
    assert closures.closure_key(a, "3.11") != \
        closures.closure_key([NO_DEPS, "z==3", STEP, "x==1", "y==2"], "3.11")
    assert steps.into_first(a, ["pip"]) == ["pip", *a]
    assert steps.constrained(["numpy", STEP, "x"], "numpy<2") == [
        "numpy", "numpy<2", STEP, f"{steps.CONSTRAINT} numpy<2", "x"]


def fake_uv(monkeypatch, answers):
    """compile_set answering each call from `answers` (its first words -> a set), recording
    the lines, options and preferences it was asked with."""
    asked = []

    def compile_set(lines, python, only_binary, lowest=False, options=(), prefer=None):
        asked.append({"lines": lines, "options": options, "prefer": dict(prefer or {}),
                      "lowest": lowest})
        answer = answers[lines[0]]
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(resolve, "compile_set", compile_set)
    return asked


def test_each_install_is_resolved_over_what_the_installs_before_it_left(monkeypatch):
    asked = fake_uv(monkeypatch, {
        "pip": {"pip": Locked("24.0", False), "requests": Locked("2.27.1", False)},
        "domonic==0.9.10": {"domonic": Locked("0.9.10", False)},
        "requests>=2.32.4": {"requests": Locked("2.32.4", False),
                             "urllib3": Locked("2.2.0", False)},
        "pip>=25": {"pip": Locked("25.1", False)}})
    lines = ["pip", "requests", "--exclude-newer 2025-01-01T00:00:00Z", NO_DEPS,
             "domonic==0.9.10", STEP, "requests>=2.32.4", f"{STEP} --upgrade --pre", "pip>=25"]
    target = resolve.target_set(lines, "3.10")
    assert target == {"pip": Locked("25.1", False), "domonic": Locked("0.9.10", False),
                      "requests": Locked("2.32.4", False), "urllib3": Locked("2.2.0", False)}
    assert [set(call["prefer"]) for call in asked] == [
        set(), {"pip", "requests"}, {"pip", "requests", "domonic"},
        {"pip", "requests", "domonic", "urllib3"}]
    assert all("--exclude-newer 2025-01-01T00:00:00Z" in call["lines"] for call in asked)
    assert asked[1]["options"] == ("--no-deps",) and asked[2]["options"] == ()
    assert asked[3]["options"] == ("--prerelease", "allow", "--upgrade-package", "pip")


def test_a_step_with_no_solution_is_named_and_stays_the_one_failure_said_to_be_azures(
        monkeypatch):
    fake_uv(monkeypatch, {"a": {"a": Locked("1", False)},
                          "b==1": resolve.NoSet("No solution found when resolving")})
    with pytest.raises(resolve.NoSet, match=r"install 2 \(pip install b==1\) has no solution"):
        resolve.target_set([STEP, "a", STEP, "b==1"], "3.11")


def test_a_staged_set_is_moved_here_install_by_install_no_deps_ones_alone(monkeypatch):
    asked = fake_uv(monkeypatch, {
        "domonic>=0.9.10": {"domonic": Locked("0.9.10", False)},
        "requests>=2.32.4": {"requests": Locked("2.32.4", False)}})
    monkeypatch.setattr(resolve, "venv_version", lambda name: None)
    staged = resolve.Staged([resolve.StepSet({"domonic": Locked("0.9.10", False)}, True),
                             resolve.StepSet({"requests": Locked("2.32.4", False)})])
    moved = resolve.move_here(staged)
    assert [(call["lines"], call["options"]) for call in asked] == [
        (["domonic>=0.9.10"], ("--no-deps",)),
        (["requests>=2.32.4"], ())]  # the second resolves nothing the first put there
    assert set(moved.here) == {"domonic", "requests"} and moved.lines == []


FULL_DISK = (
    "error: Failed to install: pyarrow-14.0.2-cp310-cp310-manylinux_2_28_x86_64.whl "
    "(pyarrow==14.0.2)\n"
    "  Caused by: Failed to copy to `/cache/envs/py3.10-a9/lib/python3.10/site-packages/"
    "pyarrow/libarrow.so.1400`\n"
    "  Caused by: failed to copy file from /home/ana/.cache/uv/archive-v0/yx/pyarrow/"
    "libarrow.so.1400 to /cache/envs/py3.10-a9/lib/python3.10/site-packages/pyarrow/"
    ".tmpElJjhw: No space left on device (os error 28)\n")


def test_a_full_disk_is_named_where_uv_was_writing_not_blamed_on_its_cache_folder():
    """uv copying a wheel into a layer found the disk full: the message says the disk is full
    at the layer's file (not 'uv's cache folder ... cannot be written') and names both caches
    to move; a full disk under uv's own cache reads the same."""
    message = str(resolve.uv_failure(FULL_DISK, "environment env: installing its packages"))
    assert message.startswith("environment env: installing its packages: the disk is full "
                              "(writing /cache/envs/py3.10-a9/lib/python3.10/site-packages/"
                              "pyarrow/.tmpElJjhw: No space left on device)")
    assert "MLOPS_CACHE_DIR" in message and "UV_CACHE_DIR" in message
    assert "uv's cache folder" not in message
    spaced = str(resolve.uv_failure(FULL_DISK.replace("/cache/", "/my cache/"), "installing"))
    assert "(writing /my cache/envs/py3.10-a9/lib/python3.10/site-packages/pyarrow/.tmpElJjhw: " \
           "No space left on device)" in spaced  # was cut at the space: "/my"
    bare = resolve.uv_failure("error: No space left on device (os error 28)\n", "resolving")
    assert "the disk is full (writing a file: No space left on device)" in str(bare)
    assert isinstance(bare, MachineError)


def test_a_message_names_an_environment_once():
    """A label that says it is an environment is not prefixed again ("environment the
    environment of cli/tc.yml" was said); a name or a file is."""
    from mlops.environments.resolve import environment_named

    assert environment_named("the environment of cli/tc.yml") == "the environment of cli/tc.yml"
    assert environment_named("azureml:sk@latest") == "environment azureml:sk@latest"
