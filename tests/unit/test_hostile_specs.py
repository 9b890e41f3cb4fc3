"""Specs an unfriendly user writes: read with bounded memory and time, refused at their line,
never a traceback (mlops/yaml_limits.py), and a key given twice named with both its lines."""

from __future__ import annotations

import tracemalloc

import pytest

from mlops.checks.validation import check
from mlops.errors import LocalRunError
from mlops.specs import SpecError, load_spec, read_yaml

HEAD = ("$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json\n"
        "type: command\ncommand: echo hi\n")


def bomb(levels: int = 9, width: int = 9) -> str:
    """The billion laughs: `width` ** `levels` values in under a kilobyte."""
    lines = ["a0: &a0 [" + ",".join(['"lol"'] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]"
              for i in range(1, levels + 1)]
    return HEAD + "\n".join(lines) + "\n"


def bounded(read, *args) -> float:
    """Peak Python memory (MB) of `read(*args)` (its time: the note's figures, not a test)."""
    tracemalloc.start()
    try:
        read(*args)
    except LocalRunError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return peak


def test_an_alias_bomb_is_refused_at_its_line_before_it_expands(tmp_path):
    spec = tmp_path / "bomb.yml"
    spec.write_text(bomb())
    assert len(spec.read_bytes()) < 1024
    with pytest.raises(SpecError, match=r"bomb.yml:\d+: refused: it expands to more than "
                                        r"1,000,000 values through its aliases") as refused:
        load_spec(spec, role="job")
    assert refused.value.finding.line > 4
    assert bounded(load_spec, spec, "job") < 200


def test_a_value_nested_twenty_thousand_deep_is_refused_without_a_recursion_error(tmp_path):
    spec = tmp_path / "deep.yml"
    spec.write_text(HEAD + "x: " + "[" * 20_000 + "]" * 20_000 + "\n")
    with pytest.raises(SpecError, match=r"deep.yml:4: refused: it nests more than 256 levels"):
        load_spec(spec)
    assert bounded(load_spec, spec) < 200


def test_every_yaml_the_runtime_reads_is_bounded_a_conda_file_too():
    with pytest.raises(LocalRunError, match="expands to more than"):
        read_yaml(bomb())


def test_a_spec_of_a_quarter_megabyte_loads_within_the_limits(tmp_path):
    """Limits that refuse a bomb still take a large honest spec: 12,000 inputs, a quarter of a
    megabyte (read under tracemalloc, which slows every allocation: a megabyte took 6 s)."""
    spec = tmp_path / "big.yml"
    inputs = "".join(f"  input_{n:05d}: {n}\n" for n in range(12_000))
    spec.write_text(HEAD + "inputs:\n" + inputs)
    assert 0.2e6 < spec.stat().st_size < 0.3e6
    found = []  # one parse: measured, then checked
    assert bounded(lambda: found.append(load_spec(spec, role="job"))) < 200
    loaded = found[0]
    assert len(loaded.data["inputs"]) == 12_000 and loaded.line("inputs.input_11999") == 12_004


def test_aliases_share_their_lines_and_are_walked_once(tmp_path):
    spec = tmp_path / "aliases.yml"
    spec.write_text(HEAD + "base: &base\n  cores: 2\nother: *base\n")
    loaded = load_spec(spec)
    assert loaded.data["other"] == {"cores": 2}
    assert loaded.line("base.cores") == 5 and loaded.line("other") == 6


def test_a_key_given_twice_is_a_warning_with_both_lines(tmp_path):
    spec = tmp_path / "twice.yml"
    spec.write_text(HEAD + "code: .\ncommand: echo two\n")
    loaded = load_spec(spec, role="job")
    assert loaded.data["command"] == "echo two"  # what azure-ai-ml loads too
    (finding,) = [f for f in check(loaded) if "given twice" in f.problem]
    assert not finding.is_error and finding.key == "command" and finding.line == 5
    assert "(lines 3 and 5)" in str(finding) and ": warning: " in str(finding)


@pytest.mark.parametrize("shape", ["mapping", "list of mappings"])
def test_a_spec_that_writes_too_many_values_is_told_that_not_about_aliases(tmp_path,
                                                                         monkeypatch, shape):
    """750,000 values (1.5 million keys and scalars), at a thousandth of the scale."""
    from mlops import yaml_limits

    monkeypatch.setattr(yaml_limits, "MAX_VALUES", 1_000)
    spec = tmp_path / "big.yml"
    rows = [f"  K{n}: v{n}" for n in range(750)] if shape == "mapping" else \
        [f"  - {{a: {n}}}" for n in range(750)]
    spec.write_text(HEAD + "environment_variables:\n" + "\n".join(rows) + "\n")
    with pytest.raises(SpecError, match=r"big.yml:\d+: refused: it holds more than 1,000 values "
                                        r"\(every key, list item and scalar counts\)") as refused:
        load_spec(spec)
    assert "alias" not in str(refused.value)
    spec.write_text(HEAD + "environment_variables:\n" + "\n".join(rows[:300]) + "\n")
    assert len(load_spec(spec).data["environment_variables"]) == 300  # under it: through


def test_an_alias_bomb_is_told_how_little_it_writes():
    with pytest.raises(LocalRunError, match=r"through its aliases \(\*name\), from \d\d it "
                                            r"writes itself"):
        read_yaml(bomb())


def test_a_spec_that_is_not_utf8_is_named_at_its_line(tmp_path):
    spec = tmp_path / "latin.yml"
    spec.write_bytes(HEAD.encode() + b"description: caf\xe9\n")
    with pytest.raises(SpecError, match=r"latin.yml:4: not UTF-8 text \(byte 0xe9 at column "
                                        r"17\); az ml reads specs as UTF-8"):
        load_spec(spec)


def test_a_pipe_given_as_a_spec_is_refused_not_waited_on(tmp_path):
    import os

    os.mkfifo(tmp_path / "job.yml")
    with pytest.raises(SpecError, match="job.yml: not a regular file"):
        load_spec(tmp_path / "job.yml")
    (tmp_path / "jobs").mkdir()  # `-f jobs/`: said as what it is
    with pytest.raises(SpecError, match="jobs: a folder: az ml reads a spec from a YAML file"):
        load_spec(tmp_path / "jobs")


def test_a_spec_larger_than_the_reader_takes_is_refused_before_it_is_read(tmp_path,
                                                                           monkeypatch):
    from mlops import yaml_limits

    monkeypatch.setattr(yaml_limits, "MAX_CHARS", 100)
    spec = tmp_path / "huge.yml"
    spec.write_text(HEAD + "description: " + "x" * 200 + "\n")
    with pytest.raises(SpecError, match="huge.yml: refused: it is 0 MiB, more than the 0 MiB"):
        load_spec(spec)


def test_a_link_that_leads_back_to_itself_is_the_inputs_error_wherever_it_is_met(tmp_path,
                                                                                 capsys):
    """A loop of links named as code: is refused at its line (azure-ai-ml's loader stops at it
    too); met anywhere else (-f, --run-dir, an input's path) it is exit 2 naming the link,
    whether pathlib (RuntimeError) or the system (ELOOP) found it: never a traceback."""
    from mlops import exit_code
    from mlops.checks import lint

    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    spec = tmp_path / "job.yml"
    spec.write_text(HEAD + "code: a\n")
    found = lint.check_code(load_spec(spec), "code", "a")
    assert [(f.line, f.key) for f in found] == [(4, "code")]
    assert "leads back to itself" in found[0].problem
    assert exit_code(lambda: (tmp_path / "a").resolve()) == 2
    assert exit_code(lambda: (tmp_path / "a").read_text()) == 2
    said = capsys.readouterr().err.splitlines()
    assert said == [f"error: {tmp_path / 'a'}: a symbolic link that leads back to itself (a loop "
                    "of links); point it at a real file or folder, or remove it"] * 2



@pytest.mark.parametrize(("body", "key", "line"), [
    ("type: command\ncommand: echo\noutputs:\n  ..:\n    type: uri_folder\n", "outputs...", 4),
    ("type: command\ncommand: echo\ninputs:\n  x/y: 1\n", "inputs.x/y", 4),
    ("type: command\ncommand: echo\ninputs:\n  \u00e9t\u00e9: 1\n", "inputs.\u00e9t\u00e9", 4),
    ("type: pipeline\njobs: {}\ninputs:\n  a.b: 1\n  c-d: 2\n", "inputs.c-d", 5),
    ("type: sweep\ntrial: {}\nsearch_space:\n  lr rate: {type: choice, values: [1]}\n",
     "search_space.lr rate", 4),
])
def test_a_name_az_ml_job_create_refuses_is_refused_at_its_line(tmp_path, body, key, line):
    """azure-ai-ml's _validate() passes these names; its REST conversion, which az ml job create
    runs before it sends the job, refuses them: so are they here, by azure-ai-ml's own rule (a
    pipeline's own inputs may be dotted)."""
    from mlops.checks import io_names

    spec = tmp_path / "job.yml"
    spec.write_text(body)
    found = io_names.refused(load_spec(spec))
    assert [(f.key, f.line) for f in found] == [(key, line)]
    assert "must be composed letters, numbers, and underscore" in found[0].problem
    spec.write_text(body.replace(key.split(".", 1)[1], "ok_1"))
    assert io_names.refused(load_spec(spec)) == []
