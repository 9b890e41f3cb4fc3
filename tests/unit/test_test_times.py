"""scripts/test_times.py: the per-test cost lines summed by module, cut lines left out."""

from __future__ import annotations

import sys

from support import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import test_times  # noqa: E402


def test_costs_are_summed_by_module_and_a_cut_line_is_left_out(tmp_path):
    times = tmp_path / "times.tsv"
    times.write_text("tests/e2e/test_a.py::one\t2.5\t3.0\n"
                     "tests/e2e/test_a.py::two\t1.5\t1.0\n"
                     "tests/unit/test_b.py::x\t0.2\t0.3\n"
                     "tests/unit/test_b.py::cut\t0.")
    costs = test_times.read(times)
    assert len(costs) == 3
    assert test_times.by_module(costs)[0] == ("tests/e2e/test_a.py", 2, 4.0, 4.0)
    assert test_times.report(costs, 1).splitlines()[0] == \
        "3 tests, 4 CPU s, 4 wall s summed over workers"
