"""The Makefile renders the right az ml command lines (make -n: nothing runs, no Azure needed)."""

from __future__ import annotations

import re
import subprocess

import pytest

from mlops.specs import ROOT

WS = ["SUBSCRIPTION=sub-id", "GROUP=rg", "WORKSPACE=ws"]
WS_ARGS = "--subscription 'sub-id' --resource-group 'rg' --workspace-name 'ws'"  # quoted: q


def make_n(*args: str) -> str:
    result = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.proof
@pytest.mark.parametrize(("target", "expected"), [
    ("train", "az ml job create --file jobs/train.yml --set experiment_name='fowl-classifier'"),
    ("train-distributed", "az ml job create --file jobs/train-distributed.yml"),
    ("sweep", "az ml job create --file jobs/sweep.yml"),
    ("pipeline", "az ml job create --file jobs/pipeline.yml"),
    ("compute", "az ml compute create --file assets/compute-gpu.yml --set name=gpu-cluster "
                "tier=dedicated"),
    ("environment", "az ml environment create --file environments/image-classifier.yml"),
    ("data", "az ml data create --file assets/data-fowl.yml"),
])
def test_az_targets_render_their_command_with_workspace_args(target, expected):
    out = make_n(target, *WS)
    assert "scripts/az_guard.sh" in out, "every az target runs the guard first"
    line = next(line for line in out.splitlines() if expected.split(" --")[0] in line)
    assert expected in line and WS_ARGS in line


@pytest.mark.proof
def test_job_targets_wait_and_report_the_studio_url():
    out = make_n("train", *WS)
    assert "|| exit 3" in out and 'scripts/az_wait.sh "$name"' in out


@pytest.mark.proof
@pytest.mark.parametrize(("target", "expected"), [
    ("stream", "az ml job stream --name 'job-1'"),
    ("download", "az ml job download --name 'job-1' --all --download-path 'downloads'/'job-1'"),
    ("register", "az ml model create --name 'fowl-classifier' --type custom_model --path "
                 "azureml://jobs/$job/outputs/model"),
])
def test_job_name_targets(target, expected):
    out = make_n(target, "AZ_JOB=job-1", *WS)
    assert expected in out


@pytest.mark.proof
def test_job_name_targets_say_what_is_missing():
    result = subprocess.run(["make", "-n", "stream"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode != 0 and "set AZ_JOB=<job name>" in result.stderr


@pytest.mark.proof
def test_low_priority_option():
    assert "tier=low_priority" in make_n("compute", "GPU_TIER=low_priority")


@pytest.mark.proof
def test_guard_fails_fast_without_az(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}  # no az here, as on this machine and in CI
    result = subprocess.run(["bash", "scripts/az_guard.sh", "2.38.0"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 4
    assert result.stderr.count("\n") == 1 and "az extension add --name ml" in result.stderr


@pytest.mark.proof
def test_every_public_target_is_documented_and_help_is_default():
    help_text = make_n()  # default goal
    out = subprocess.run(["make"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "train-local" in out and "validate" in out and help_text
    makefile = (ROOT / "Makefile").read_text()
    targets = re.findall(r"^([a-zA-Z][\w-]*):(?!=)", makefile, flags=re.MULTILINE)
    undocumented = [t for t in targets if t not in out and t != "az-guard"]
    assert not undocumented, f"targets without ## help: {undocumented}"


@pytest.mark.proof
def test_help_lists_the_local_loop_first_then_azure_then_development():
    out = subprocess.run(["make", "--no-print-directory"], cwd=ROOT, capture_output=True,
                         text=True).stdout  # no "Entering directory" lines under make test
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    *lines, legend = out.rstrip("\n").splitlines()
    headings = [line for line in lines if line and not line.startswith(" ")]
    assert headings == ["Local", "Azure jobs", "Azure endpoints", "Development"]
    assert legend.startswith("$ starts billable Azure compute")
    bodies = re.split(r"^(?:Local|Azure jobs|Azure endpoints|Development)$", out,
                      flags=re.MULTILINE)[1:]
    sections = dict(zip(headings, bodies, strict=True))
    assert "train-local " in sections["Local"] and "serve-local " in sections["Local"]
    assert re.search(r"\btrain\s", sections["Azure jobs"]) and "deploy-blue" in \
        sections["Azure endpoints"] and "setup " in sections["Development"]
    assert out.count("serve-local ") == 1
    billed = {m.group(1) for m in re.finditer(r"^  ([\w-]+) +\$ ", out, flags=re.MULTILINE)}
    assert {"train", "sweep", "pipeline", "deploy-blue", "deploy-green", "batch-invoke"} <= billed
    assert not billed & set(re.findall(r"^  ([\w-]+) ", sections["Local"] +
                                       sections["Development"], flags=re.MULTILINE))


@pytest.mark.proof
def test_register_gates_the_model_on_the_pipelines_bar_before_creating_it():
    """The train workflow registers through make register: only a model whose logged
    best_val_acc reaches jobs/pipeline.yml's min_val_acc, as the pipeline's register step."""
    import yaml

    out = make_n("register", "AZ_JOB=job-1", *WS)
    gate, create = out.index("scripts/gate_model.py"), out.index("az ml model create")
    assert gate < create and "|| exit 1" in out[gate:create]
    pipeline = yaml.safe_load((ROOT / "jobs" / "pipeline.yml").read_text())
    assert f"--min {pipeline['inputs']['min_val_acc']}" in out


HOSTILE = "/tmp/my data ü/x;y 'z'.zip"


def argv_of(*args: str, tmp_path, last: bool = False) -> list[str]:
    """What a local target's program gets, word by word: $(PY) and $(AZML) print their argv
    instead (the first program's, or with `last` the last one's)."""
    import json

    printer = tmp_path / "argv.py"
    printer.write_text("import json, sys\nprint('ARGV ' + json.dumps(sys.argv[1:]))\n")
    result = subprocess.run(["make", "-s", *args, f"PY=python3 {printer}",
                             f"AZML=python3 {printer}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("ARGV ")]
    return json.loads(lines[-1 if last else 0][5:])


@pytest.mark.proof
@pytest.mark.parametrize("target", ["train-local", "local", "pipeline-local"])
def test_every_value_reaches_the_program_as_one_argument_whatever_it_holds(target, tmp_path):
    """Spaces, quotes, `;` and non-ASCII letters in DATA, RUN_DIR, JOB, SET and the numbers:
    one argument each, never run by the shell."""
    argv = argv_of(target, f"DATA={HOSTILE}", "RUN_DIR=/tmp/run dir ü", "EPOCHS=2; echo x",
                   "JOB=jobs/my job.yml", "SET=inputs.title='a b;c' inputs.n=1",
                   "FROM=outer/my step;x", "EXPLAIN=1", tmp_path=tmp_path)
    assert "--run-dir" in argv and argv[argv.index("--run-dir") + 1] == "/tmp/run dir ü"
    assert argv[argv.index("--sets") + 1] == "inputs.title='a b;c' inputs.n=1"
    assert argv[:3] == ["job", "run", "-f"]
    assert argv[argv.index("--from") + 1] == "outer/my step;x" and "--explain" in argv
    if target == "local":
        assert argv[3] == "jobs/my job.yml"
    else:
        assert f"inputs.data.path={HOSTILE}" in argv and "inputs.data.type=uri_file" in argv
        assert "inputs.epochs=2; echo x" in argv


@pytest.mark.proof
def test_a_relative_data_path_is_the_checkouts_and_a_folder_is_a_uri_folder(tmp_path):
    argv = argv_of("train-local", "DATA=some data/folder", tmp_path=tmp_path)
    assert f"inputs.data.path={ROOT}/some data/folder" in argv
    assert "inputs.data.type=uri_folder" in argv


@pytest.mark.proof
def test_the_endpoint_and_batch_targets_quote_their_paths_too(tmp_path):
    endpoint = argv_of("serve-local", "DEPLOYMENT=endpoints/my blue.yml", tmp_path=tmp_path)
    assert endpoint[:4] == ["online-endpoint", "create", "-f", "endpoints/endpoint.yml"]
    serve = argv_of("serve-local", "DEPLOYMENT=endpoints/my blue.yml", "MODEL_DIR=/m d/ü",
                    tmp_path=tmp_path, last=True)
    assert serve[serve.index("-f") + 1] == "endpoints/my blue.yml"
    assert serve[serve.index("--model") + 1] == "/m d/ü"
    batch = argv_of("batch-local", f"INPUT={HOSTILE}", "MODEL_DIR=/m d/ü", tmp_path=tmp_path,
                    last=True)
    assert batch[:2] == ["batch-endpoint", "invoke"] and "--stream" in batch
    assert batch[batch.index("--input") + 1] == HOSTILE
    created = argv_of("batch-local", f"INPUT={HOSTILE}", "MODEL_DIR=/m d/ü", tmp_path=tmp_path)
    assert created[:2] == ["batch-endpoint", "create"]
    invoke = argv_of("invoke-local", "REQUEST=my request.json", tmp_path=tmp_path)
    assert invoke[invoke.index("-r") + 1] == "my request.json"


@pytest.mark.proof
def test_the_workspace_targets_quote_their_values_too(tmp_path):
    create = argv_of("asset-create-local", f"SPEC={HOSTILE}", "KIND=data", "VERSION=2; x",
                     tmp_path=tmp_path)
    assert create[create.index("-f") + 1] == HOSTILE and "2; x" in create
    model = argv_of("model-create-local", "MODEL_DIR=/m d/ü", "MODEL_NAME=my model",
                    tmp_path=tmp_path)
    assert model[model.index("--path") + 1] == "/m d/ü"
    assert model[model.index("--name") + 1] == "my model"
    show = argv_of("asset-show-local", "KIND=model", "NAME=a b", "VERSION=1", tmp_path=tmp_path)
    assert show[-4:] == ["model", "a b", "--version", "1"]
