"""A run folder is one run's alone, its record is read or refused clearly, and a snapshot never
copies the machine or loops."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from mlops.errors import LocalRunError
from mlops.runtime import job, snapshot


def test_a_second_run_into_a_locked_folder_is_refused_and_touches_nothing(tmp_path):
    folder = tmp_path / "run"
    with job.locked(folder):
        (folder / "log.txt").write_text("the first run's")
        with pytest.raises(LocalRunError, match=rf"{folder} is in use by a local run \(pid "
                                                rf"{os.getpid()}\)"), job.locked(folder):
            pass
        assert (folder / "log.txt").read_text() == "the first run's"
    with job.locked(folder):  # free again once the first let go
        pass


def test_a_full_disk_taking_a_run_folder_or_an_endpoint_names_the_lock_file(tmp_path, monkeypatch):
    import errno

    from mlops.errors import MachineError, machine_faults_raised

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(job.os, "pwrite", full)

    def take() -> None:
        with job.locked(tmp_path / "run"):
            pass

    with pytest.raises(MachineError, match=rf"^{tmp_path / 'run' / '.lock'}: No space left"):
        machine_faults_raised(take)

    from mlops.endpoints.local_endpoint import endpoint_lock

    def take_endpoint() -> None:  # online-endpoint create said "a file: No space left"
        with endpoint_lock(tmp_path / "ep", "online-endpoint create"):
            pass

    with pytest.raises(MachineError, match=rf"^{tmp_path / 'ep' / '.lock'}: No space left"):
        machine_faults_raised(take_endpoint)


def test_a_truncated_run_record_is_a_clear_error(tmp_path):
    (tmp_path / "run.json").write_text('{"kind": "command')
    with pytest.raises(LocalRunError, match=r"run.json is damaged: use a new --run-dir"):
        job.read_record(tmp_path)
    assert job.read_record(tmp_path / "none") is None


@pytest.mark.parametrize("where", ["/", "home"])
def test_code_that_is_the_root_or_the_home_folder_is_refused(where):
    code = Path.home() if where == "home" else Path("/")
    with pytest.raises(LocalRunError, match="Azure would upload all of it"):
        snapshot.check_folder(code)


@pytest.mark.parametrize("target", ["..", ".", "../.."])
def test_a_link_to_a_folder_that_holds_it_is_refused_by_name(tmp_path, target):
    code = tmp_path / "code" / "pkg"
    code.mkdir(parents=True)
    (code / "main.py").write_text("print('hi')\n")
    (code / "up").symlink_to(target)
    with pytest.raises(LocalRunError, match=rf"{code / 'up'} links to .* a folder it is in: "
                                            "az ml's upload would follow it into itself"):
        snapshot.take(code.parent if target == "../.." else code, tmp_path / "wd")


@pytest.mark.parametrize(("kind", "said"), [
    ("fifo", "is a named pipe .* would wait on it forever"),
    ("socket", "is a socket: az ml's upload cannot open it"),
    ("dangling", "is a link to .*gone, which does not exist"),
    ("loop", "is a link that loops")])
def test_what_az_mls_upload_could_not_take_is_refused_by_name(tmp_path, kind, said):
    import os
    import socket

    code = tmp_path / "code"
    code.mkdir()
    (code / "main.py").write_text("print('hi')\n")
    entry = code / "entry"
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(entry))
        server.close()
    elif kind == "dangling":
        entry.symlink_to(tmp_path / "gone")
    else:
        entry.symlink_to(code / "back")
        (code / "back").symlink_to(entry)
    with pytest.raises(LocalRunError, match=f"code: {code}/(entry|back) {said}.*amlignore"):
        snapshot.take(code, tmp_path / "wd")
    (code / ".amlignore").write_text("entry\nback\n")
    assert snapshot.take(code, tmp_path / "wd") == 2  # main.py and .amlignore


def test_a_link_elsewhere_is_copied(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "util.py").write_text("X = 1\n")
    code = tmp_path / "code"
    code.mkdir()
    (code / "main.py").write_text("print('hi')\n")
    (code / "shared").symlink_to(tmp_path / "shared")
    assert snapshot.take(code, tmp_path / "wd") == 2
    assert (tmp_path / "wd" / "shared" / "util.py").read_text() == "X = 1\n"


def test_a_read_only_checkout_s_snapshot_is_writable_by_its_job_and_keeps_other_bits(tmp_path):
    """A job writes anywhere in its copy, as in the one Azure downloads (a checkout's 0444
    file was copied 0444: the job's own write to it failed locally, as a user, not on Azure)."""
    code = tmp_path / "src"
    (code / "sub").mkdir(parents=True)
    (code / "sub" / "data.txt").write_text("x")
    (code / "run.sh").write_text("echo hi\n")
    os.chmod(code / "sub" / "data.txt", 0o444)
    os.chmod(code / "run.sh", 0o555)
    assert snapshot.take(code, tmp_path / "wd") == 2
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / "wd").rglob("*.*")}
    assert modes == {"data.txt": "0o644", "run.sh": "0o755"}
    assert oct((code / "sub" / "data.txt").stat().st_mode & 0o777) == "0o444"  # untouched


def test_a_code_folder_past_the_bound_is_refused_before_copying(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot, "MAX_FILES", 3)
    code = tmp_path / "code"
    code.mkdir()
    for n in range(5):
        (code / f"f{n}.py").write_text("")
    with pytest.raises(LocalRunError, match=r"holds 5 files.*at most 3 files.*\.amlignore"):
        snapshot.take(code, tmp_path / "wd")
    assert not any((tmp_path / "wd").glob("*.py"))


def test_one_setting_moves_everything_a_run_writes_out_of_the_checkout(tmp_path, monkeypatch):
    """MLOPS_STATE_DIR: run folders, the MLflow store and the caches (a read-only checkout);
    without it, caches still never go into the sources."""
    from mlops.environments.layers import cache_dir
    from mlops.project import cache_root, forget, project, state_dir, tracking_uri
    from mlops.specs import ROOT

    for name in ("MLOPS_CACHE_DIR", "LOCAL_ENVS_DIR", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "mlops-local"
    assert ROOT not in cache_dir().parents
    monkeypatch.setenv("MLOPS_STATE_DIR", str(tmp_path / "state"))
    forget()
    try:
        assert state_dir() == tmp_path / "state"
        assert project().runs_dir == tmp_path / "state" / "runs"
        assert tracking_uri() == f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}"
        assert cache_dir() == tmp_path / "state" / "cache" / "envs"
    finally:
        monkeypatch.delenv("MLOPS_STATE_DIR")
        forget()


def test_additional_includes_are_merged_into_the_snapshot_as_az_ml_uploads_them(tmp_path,
                                                                              monkeypatch):
    """Each include at the code's root under its own name; `<folder>.zip` that does not exist
    is `<folder>` zipped (azure-ai-ml's AdditionalIncludes); a missing one is refused."""
    import tempfile
    import zipfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    code, shared, lib = tmp_path / "src", tmp_path / "common" / "shared", tmp_path / "lib"
    for folder in (code, shared, lib):
        folder.mkdir(parents=True)
    (code / "main.py").write_text("from shared import x\n")
    (shared / "x.py").write_text("x = 1\n")
    (lib / "data.txt").write_text("d")
    (tmp_path / "notes.txt").write_text("n")
    wd = tmp_path / "wd"
    includes = [shared, tmp_path / "notes.txt", tmp_path / "lib.zip"]
    assert snapshot.take(code, wd, includes=includes) == 4
    assert (wd / "shared" / "x.py").read_text() == "x = 1\n" and (wd / "notes.txt").is_file()
    assert "lib/data.txt" in zipfile.ZipFile(wd / "lib.zip").namelist()
    assert (wd / "outputs").is_dir() and not list((tmp_path / "tmp").iterdir())  # cleaned up
    with pytest.raises(LocalRunError, match="gone does not exist"):
        snapshot.take(code, wd, includes=[tmp_path / "gone"])


def test_code_naming_one_file_is_checked_and_snapshotted_as_azure_uploads_it(tmp_path):
    """azure-ai-ml accepts `code: main.py` and uploads that file: the working directory holds
    it alone (with outputs/ and logs/)."""
    from mlops.checks.validation import check
    from mlops.specs import load_spec

    (tmp_path / "main.py").write_text("print('hi')\n")
    (tmp_path / "other.py").write_text("")
    spec = tmp_path / "job.yml"
    spec.write_text("$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json\n"
                    "code: main.py\ncommand: python main.py\n"
                    "environment: azureml:AzureML-sklearn-1.5@latest\ncompute: azureml:cpu\n")
    assert [str(f) for f in check(load_spec(spec, "job")) if f.is_error] == []
    assert snapshot.take((tmp_path / "main.py").resolve(), tmp_path / "wd") == 1
    assert sorted(p.name for p in (tmp_path / "wd").iterdir()) == ["logs", "main.py", "outputs"]
    spec.write_text(spec.read_text().replace("code: main.py", "code: gone.py"))
    errors = [str(f) for f in check(load_spec(spec, "job")) if f.is_error]
    assert any("code 'gone.py' does not exist" in e for e in errors), errors


def test_separate_mounts_an_output_on_an_inputs_folder_is_writable_a_mount_is_not_removable(
        tmp_path):
    """The innermost mount decides (an output written to the datastore folder an input reads
    is writable, the input's own path is not); a rw_mount output's root cannot be removed or
    moved (EBUSY), its contents can."""
    import errno

    from mlops.runtime import readonly_inputs

    data, out = str(tmp_path / "store/shared"), str(tmp_path / "store/shared/out")
    places = readonly_inputs.Places((data,), (out,), (out,))
    assert places.refused("open", f"{out}/count.txt", True) is None
    same = readonly_inputs.Places((data,), (data,), (data,))  # one datastore path for both
    assert same.refused("open", f"{data}/count.txt", True) is None
    assert places.refused("open", f"{data}/part.csv", True).errno == errno.EROFS
    assert places.refused("os.rmdir", out, True).errno == errno.EBUSY
    assert places.refused("os.rename", out, True).errno == errno.EBUSY
    assert places.refused("os.rename", f"{out}/a", False) is None  # a file in it moves
    assert places.refused("os.rmdir", f"{out}/sub", True) is None


def test_the_shell_meets_a_removed_mount_before_its_next_command():
    from mlops.runtime import launch, readonly_inputs

    env = {readonly_inputs.MOUNTED: "/r/out a:/r/b"}
    wrapped = launch.keeping_mounts("rm -rf /r/b; touch /r/b/x", env)
    assert wrapped.startswith("_mlops_mounts=('/r/out a' /r/b); trap ")
    assert wrapped.endswith(" DEBUG\nrm -rf /r/b; touch /r/b/x")
    assert launch.keeping_mounts("python x.py", {}) == "python x.py"


@pytest.mark.parametrize(("folder", "name"), [("x;y", "x_y"), ("my runs ü", "my_runs__"),
                                              ("run-3", "run-3"), (";;", "job")])
def test_a_run_folders_name_is_a_job_name_azure_takes(tmp_path, folder, name):
    """A run folder's name made a job name Azure takes (a batch job's, and an unnamed job's
    where azure-ai-ml's generator cannot be read); the folder is never refused for its name."""
    assert job.folder_job_name(tmp_path / folder) == name


def test_a_job_without_a_name_is_named_as_azure_ai_ml_names_it_and_keeps_it(tmp_path):
    """azure-ai-ml names a job without `name:` adjective_noun_<10 characters> before it is
    submitted (generate_defaults); a run resumed in its folder keeps the name run.json holds."""
    from types import SimpleNamespace

    from mlops.runtime.records import RunRecord

    unnamed = SimpleNamespace(data={})
    names = {job.job_name(unnamed, tmp_path / "new") for _ in range(5)}
    assert len(names) == 5 and all(re.fullmatch(r"[a-z]+_[a-z]+_[b-df-hj-np-tv-z0-9]{10}", n)
                                   for n in names)
    assert job.job_name(SimpleNamespace(data={"name": "given"}), tmp_path) == "given"
    RunRecord(kind="command", spec="job.yml", name="sincere_rose_3k1lcw5bmz").write(tmp_path)
    assert job.job_name(unnamed, tmp_path) == "sincere_rose_3k1lcw5bmz"


@pytest.mark.parametrize(("folder", "experiment"), [("my project.v2", "myproject"),
                                                    ("fowl", "fowl"), (" ", "Default")])
def test_the_default_experiment_is_the_folders_stem_without_spaces(tmp_path, monkeypatch,
                                                                    folder, experiment):
    """azure-ai-ml's default experiment: the submitting folder's stem, spaces removed, else
    `Default` (generate_defaults)."""
    from mlops.runtime.tasks import experiment_name

    (tmp_path / folder).mkdir(exist_ok=True)
    monkeypatch.chdir(tmp_path / folder)
    assert experiment_name({}) == experiment
    assert experiment_name({"experiment_name": "given"}) == "given"


@pytest.mark.parametrize(("content", "says"), [
    ("*.db\nmlruns/\n".encode("utf-16"), "UTF-16 text"),  # PowerShell's `echo x > .gitignore`
    (b"*.db\n\xff\xc3(\n", r"not UTF-8 \(byte 5\)"),
])
def test_an_ignore_file_azure_ai_ml_cannot_read_stops_the_snapshot_in_one_line(
        tmp_path, content, says):
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / ".gitignore").write_bytes(content)
    with pytest.raises(LocalRunError, match=rf"\.gitignore is {says}.*reads it as UTF-8"):
        snapshot.code_files(tmp_path)
    (tmp_path / ".amlignore").write_text("*.db\n")  # it takes precedence: the upload works
    assert sorted(rel for _, rel in snapshot.code_files(tmp_path)) == [
        ".amlignore", ".gitignore", "train.py"]


def test_a_run_folder_whose_lock_cannot_be_written_is_not_left_behind(tmp_path, monkeypatch):
    """A full disk refuses the lock's pid: the error stands, and the folder made for the run
    goes with it (an empty .lock was left, a folder no verb lists)."""
    import errno

    from mlops.runtime.run_setup import Identity, Setup, run_in_folder

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(job.os, "pwrite", full)
    folder = tmp_path / "runs" / "job-1"
    setup = Setup(folder=folder, identity=Identity(kind="commandJob", spec=tmp_path / "j.yml",
                                                   name="job-1", data={}))
    with pytest.raises(OSError) as raised:
        run_in_folder(setup, server=None, body=lambda rt: 0)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(folder / ".lock")
    assert not folder.exists() and (tmp_path / "runs").is_dir()
    folder.mkdir()  # a folder that was there before the run stays, whatever the run did
    with pytest.raises(OSError):
        run_in_folder(setup, server=None, body=lambda rt: 0)
    assert folder.is_dir()


def test_a_display_name_of_five_thousand_characters_makes_a_folder_the_disk_takes(tmp_path):
    """The run folder's stem is the display name's slug cut to SLUG_MAX, so the folder (with its
    time stamp) is a name the file system takes (was ENAMETOOLONG, a traceback)."""
    from mlops.specs import Spec

    spec = Spec(path=tmp_path / "job.yml", data={"type": "command", "display_name": "x y" * 2000})
    slug = job.Job(spec=spec, assets=None).slug
    assert slug.startswith("x-yx-y") and len(slug) <= job.SLUG_MAX
    assert len(f"{slug}-20261128-090752-99".encode()) <= 255


def test_a_signal_during_a_long_snapshot_stops_it_within_a_chunk(tmp_path, monkeypatch):
    """A Ctrl-C recorded while thousands of files are copied stops the copy at the next chunk
    (the copy ran to its end first: 9 s for 40,000 files)."""
    import signal

    from mlops.runtime import launch

    code = tmp_path / "code"
    code.mkdir()
    for n in range(3 * snapshot.CHUNK):
        (code / f"f{n}.py").write_text("")
    copied = []
    real = snapshot.copy_files

    def copying(files, target):
        copied.append(len(files))
        if len(copied) == 2:
            launch._pending.append(signal.SIGINT)  # as the handler records it
        return real(files, target)

    monkeypatch.setattr(snapshot, "copy_files", copying)
    try:
        with pytest.raises(launch.Interrupted):
            snapshot.take(code, tmp_path / "wd")
    finally:
        launch._pending.clear()
    assert copied == [snapshot.CHUNK, snapshot.CHUNK]


def test_debug_checks_a_sweep_of_a_billion_trials_without_listing_them():
    """DEBUG= against a sweep's trials: the one it names, else a few that the refusal lists
    (a list of 10^9 addresses took gigabytes before a trial started)."""
    from mlops.runtime import DebugRequest, trial_addresses

    wanted = DebugRequest.parse("outer/7").path
    assert trial_addresses(wanted, 10**9, ("outer",)) == [("outer", "trial:7")]
    assert trial_addresses(("trial:12",), 10**9) == [("trial:12",)]
    few = trial_addresses(("outer", "07"), 10**9, ("outer",))  # not a trial's name
    assert len(few) == 12 and few[-1] == ("outer", f"trial:{10**9 - 1}")
    assert trial_addresses((), 3) == [("trial:0",), ("trial:1",), ("trial:2",)]
    request = DebugRequest.parse("999999999")
    request.check(trial_addresses(request.path, 10**9))  # the last trial: found
    with pytest.raises(LocalRunError, match=r"names no task of this run; its tasks: trial:0, "):
        request.check(trial_addresses(request.path, 5))


def test_a_failure_while_a_stop_signal_waits_is_that_stop(tmp_path, monkeypatch):
    """The Ctrl-C that reached the terminal's whole group killed uv too, whose failure came
    before the runner's next safe point: the run is Canceled (exit 130), not 'uv failed'."""
    import signal
    from types import SimpleNamespace

    from mlops.errors import MachineError
    from mlops.runtime import launch
    from mlops.runtime.records import RunRecord
    from mlops.runtime.run_setup import Identity, recorded

    def uv_killed(rt) -> int:
        launch._pending.append(signal.SIGINT)  # what the handler records
        raise MachineError("installing its packages: uv failed (its words):")

    rt = SimpleNamespace(root=tmp_path)
    identity = Identity(kind="commandJob", spec=tmp_path / "j.yml", name="j", data={})
    monkeypatch.setattr(launch, "_pending", [])
    with pytest.raises(launch.Interrupted):
        recorded(identity, rt, uv_killed)
    ended = RunRecord.read(tmp_path)
    assert (str(ended.status), ended.exit_code) == ("Canceled", 130)
    with pytest.raises(MachineError):  # no signal waiting: the failure stands
        recorded(identity, rt, lambda rt: (_ for _ in ()).throw(MachineError("full")))
    assert str(RunRecord.read(tmp_path).status) == "Failed"


@pytest.mark.parametrize("given", ["team/exp", "../../exp", "v1.2", "-x", "x" * 257, "my exp",
                                   "exp\u2011a"])
def test_an_experiment_name_the_service_refuses_is_refused_naming_the_rule(given):
    """The service refuses at submission a name of other than letters, digits, '_' and '-'
    starting with a letter or digit, of more than 256 characters (a '/' from a branch name)."""
    from mlops.runtime.tasks import experiment_name
    from mlops.workspace.names import InvalidName

    with pytest.raises(InvalidName, match="experiment names are 1 to 256 ASCII letters"):
        experiment_name({"experiment_name": given})
    assert experiment_name({"experiment_name": "x" * 256}) == "x" * 256


def test_a_default_experiment_the_service_refuses_says_to_name_one(tmp_path, monkeypatch):
    """`proj.v1.2` makes experiment `proj.v1` (the stem), which the service refuses."""
    from mlops.runtime.tasks import experiment_name
    from mlops.workspace.names import InvalidName

    (tmp_path / "proj.v1.2").mkdir()
    monkeypatch.chdir(tmp_path / "proj.v1.2")
    with pytest.raises(InvalidName, match=r"'proj\.v1', which Azure refuses.*experiment_name:"):
        experiment_name({})
