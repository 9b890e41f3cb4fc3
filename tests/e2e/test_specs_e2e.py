"""Every repo spec passes all three validation layers; every invalid spec is rejected clearly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mlops.checks.validation import KINDS
from mlops.specs import ROOT


def test_committed_schemas_match_the_pinned_sdk(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_schemas.py"), "--out",
                    str(tmp_path)], check=True, capture_output=True)
    for kind in KINDS:
        fresh = json.loads((tmp_path / f"{kind}.schema.json").read_text())
        committed = json.loads((ROOT / "mlops" / "schemas" / f"{kind}.schema.json").read_text())
        assert fresh == committed, f"mlops/schemas/{kind}.schema.json is stale: run make schemas"


@pytest.mark.proof
def test_conda_env_is_generated_from_pyproject():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "sync_env.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
