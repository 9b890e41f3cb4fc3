"""The runtime's code that runs in an environment's own interpreter, imported and called, as the
runtime copies it, on real Python 3.6, 3.7, 3.8 and 3.12 interpreters (each skipped, with how to
get it, where this machine has none): a module that evaluates `dict[str, object]` at import dies
there with "'type' object is not subscriptable", as the no-code scorer did on 3.7.
tests/unit/test_injected_code.py checks the same files' grammar and annotations without a
process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from injected_code import as_copied, injected

from mlops.environments.interpreters import OLDEST, find, how_to_get

# what each module does once imported, in that interpreter (standard library only)
CALLS = {
    "mlflow_score.py": "print(json.dumps(m.batch_of_one([-1, 3])))",
    "inference_server.py": "print(json.dumps([m.gunicorn_args(2, True, ''), "
                           "m.release(type('P', (), {'__version__': '0.4.14'}))]))",
    "readonly_inputs.py": "m.install(); print(json.dumps('installed'))",
}
# what an environment brings that a bare interpreter lacks, for a module that imports it at the
# top: its import only needs the names to exist (the batch driver's pandas readers)
STUBS = {"mlflow_batch.py": {"pandas.py": "DataFrame = object\nread_csv = read_parquet = None\n"}}


def for_any_environment() -> list[Path]:
    return sorted(path for path, oldest in injected().items() if oldest == OLDEST)


@pytest.mark.proof
@pytest.mark.parametrize("minor", ["3.6", "3.7", "3.8", "3.12"])
def test_injected_modules_import_and_run_on_old_and_new_pythons(minor, tmp_path):
    python = find(minor)
    if python is None:
        pytest.skip(f"no Python {minor} on this machine: {how_to_get(minor)}")
    failures = {}
    for path in for_any_environment():
        folder = tmp_path / path.stem
        folder.mkdir()
        (folder / f"_mlops_{path.stem}.py").write_text(as_copied(path, python.info))
        for name, text in STUBS.get(path.name, {}).items():
            (folder / name).write_text(text)
        code = (f"import json, sys; sys.path.insert(0, {str(folder)!r}); "
                f"m = __import__('_mlops_{path.stem}'); " + CALLS.get(path.name, "print(1)"))
        done = subprocess.run([str(python.executable), "-I", "-c", code], capture_output=True,
                              text=True, timeout=60, cwd=tmp_path, check=False)
        if done.returncode != 0:
            failures[path.name] = done.stderr.strip().splitlines()[-1:]
        elif path.name == "mlflow_score.py":
            assert json.loads(done.stdout) == [1, 3]
    assert not failures, f"on Python {python.version}: {failures}"
