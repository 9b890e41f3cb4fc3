"""The shipped code on a full disk: a model file is written whole or not at all, the OSError
under a library's own error is what the job reports, and an entry point says so in one line
(exit 1), not with a traceback (image_classifier.model_files.replacing, exit_with); the local
runtime collecting a job says each refusal once (mlops/runtime/engine.collect)."""

from __future__ import annotations

import errno
import gc
import os
import resource
import signal

import pytest
from support import lazy

from image_classifier import exit_with
from image_classifier.model_files import replacing

torch = lazy("torch")
checkpoint = lazy("image_classifier.checkpoint")


@pytest.fixture(autouse=True)
def _unfrozen():
    yield
    gc.unfreeze()  # exit_with freezes what is alive, as a process about to end does


def test_a_file_too_large_for_the_disk_leaves_the_old_one_and_names_the_real_fault(tmp_path):
    path = tmp_path / "best.pt"
    path.write_bytes(b"the earlier checkpoint")
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it: EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, limit[1]))
    try:  # torch's writer reports the failed write as "unexpected pos" (a RuntimeError)
        with pytest.raises(OSError) as raised:
            checkpoint.atomic_save({"w": torch.zeros(1 << 20)}, path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, previous)
    assert raised.value.errno == errno.EFBIG and raised.value.filename == str(path)
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert path.read_bytes() == b"the earlier checkpoint"
    assert os.listdir(tmp_path) == ["best.pt"]  # no temporary file left


def test_a_block_that_fails_for_its_own_reason_keeps_its_error(tmp_path):
    with pytest.raises(ValueError, match="parity"), replacing(tmp_path / "model.onnx") as tmp:
        tmp.write_bytes(b"half")
        raise ValueError("parity")
    assert os.listdir(tmp_path) == []
    with replacing(tmp_path / "model.onnx") as tmp:
        tmp.write_bytes(b"whole")
    assert (tmp_path / "model.onnx").read_bytes() == b"whole"
    assert oct((tmp_path / "model.onnx").stat().st_mode & 0o777) != oct(0o600)


@pytest.mark.parametrize(("code", "exit_status"), [(errno.ENOSPC, 1), (errno.EROFS, 1)])
def test_an_entry_point_says_the_machine_s_fault_in_one_line(capsys, code, exit_status):
    def main() -> int:
        raise OSError(code, os.strerror(code), "/outputs/model.pt")

    with pytest.raises(SystemExit) as ended:
        exit_with(main)
    assert ended.value.code == exit_status
    err = capsys.readouterr().err
    assert err.startswith(f"error: /outputs/model.pt: {os.strerror(code)}; ")
    assert "Traceback" not in err


def test_any_other_os_error_keeps_its_traceback():
    def main() -> int:
        raise OSError(errno.EIO, "I/O error")

    with pytest.raises(OSError):
        exit_with(main)


def test_collecting_says_a_log_the_disk_refused_once_and_keeps_it_among_the_faults(tmp_path,
                                                                                   capsys):
    """The launcher said the log's full disk when it happened; collecting keeps it among the
    run's faults without saying it again, and says its own."""
    from types import SimpleNamespace

    from mlops.runtime.engine import collect

    log = tmp_path / "log.txt"
    full = OSError(errno.ENOSPC, "No space left on device")

    def refused(*args):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "artifacts"))

    running = SimpleNamespace(
        launch=SimpleNamespace(log=log, log_error=full), outputs={}, run_id="r",
        task=SimpleNamespace(folder=tmp_path, workdir=tmp_path / "wd", command="true",
                             name="job"))
    faults = collect(running, SimpleNamespace(tracking=SimpleNamespace(log_artifacts=refused)))
    assert faults == [f"{log}: No space left on device", "collecting outputs and artifacts: No "
                      f"space left on device ({tmp_path / 'artifacts'})"]
    assert capsys.readouterr().err == f"warning: job: {faults[1]}\n"
