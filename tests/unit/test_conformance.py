"""The conformance harness (scripts/conformance.py, scripts/corpus/): its manifest's rules, its
stand-in data, its verdicts and its matrix; and that docs/conformance.md is the matrix of the
committed manifest and results."""

from __future__ import annotations

import csv
import textwrap

import pytest
import yaml
from corpus import manifest, matrix, runner, sources, standins
from corpus.manifest import ManifestError
from corpus.verdict import Outcome, Verdict, classify, error_line, got, python_seen

from mlops.specs import ROOT

SHA = "0123456789abcdef0123456789abcdef01234567"


def write(tmp_path, cases, defaults=None):
    path = tmp_path / "corpus.yml"
    path.write_text(yaml.safe_dump({"defaults": defaults or {}, "cases": cases}))
    return path


def entry(**changes):
    base = {"id": "repo/job", "repo": "someone/repo", "commit": SHA, "path": "jobs/job.yml",
            "kind": "command", "python": "3.8",
            "expect": {"outcome": "completes", "reason": "it trains"}}
    return {**base, **changes}


def test_a_manifest_loads_with_its_defaults(tmp_path):
    corpus = manifest.load(write(tmp_path, [entry(), entry(id="repo/online", kind="online",
                                                           request="r.json")],
                                 defaults={"timeout": 600}))
    assert [c.id for c in corpus.cases] == ["repo/job", "repo/online"]
    assert corpus.cases[0].timeout == 600 and corpus.cases[1].request == "r.json"


@pytest.mark.parametrize(("change", "says"), [
    ({"colour": "red"}, "unknown key"),
    ({"commit": "abc123"}, "commit"),
    ({"repo": "Azure/azureml-examples"}, "excluded"),
    ({"path": "../outside.yml"}, "inside the repository"),
    ({"path": "/etc/passwd"}, "inside the repository"),
    ({"kind": "notebook"}, "kind"),
    ({"kind": "online"}, "request"),
    ({"kind": "batch"}, "input"),
    ({"request": "r.json"}, "only for online"),
    ({"expect": {"outcome": "fails", "reason": "x"}}, "match"),
    ({"expect": {"outcome": "fails", "reason": "x", "match": "("}}, "regular expression"),
    ({"expect": {"outcome": "works", "reason": "x"}}, "outcome"),
    ({"expect": {"outcome": "completes"}}, "reason"),
    ({"timeout": 0}, "timeout"),
    ({"setup": [{"workspace": "w.yml"}]}, "setup: 'workspace'"),
    ({"setup": ["../x.yml"]}, "inside the repository"),
    ({"python": "2.7.18"}, "python"),
    ({"after": ["repo/later"]}, "earlier case"),
    ({"standins": {"azureml:x": {"csv": {"columns": {"a": "complex"}}}}}, "columns.a"),
    ({"standins": {"azureml:x": {"repo": "../../etc"}}}, "inside the repository"),
    ({"standins": {"azureml:x": {"csv": {}, "text": "x"}}}, "one generator"),
])
def test_a_wrong_entry_is_refused_by_name(tmp_path, change, says):
    with pytest.raises(ManifestError, match=says):
        manifest.load(write(tmp_path, [entry(**change)]))


def test_ids_are_unique_and_after_stays_in_one_repository_and_commit(tmp_path):
    with pytest.raises(ManifestError, match="twice"):
        manifest.load(write(tmp_path, [entry(), entry()]))
    other = entry(id="other/job", repo="someone/else")
    with pytest.raises(ManifestError, match="another repository"):
        manifest.load(write(tmp_path, [other, entry(after=["other/job"])]))


def test_select_takes_prefixes_and_what_they_run_after_and_groups_follow_after(tmp_path):
    cases = [entry(id="a/train"), entry(id="a/online", kind="online", request="r.json",
                                        after=["a/train"]),
             entry(id="a/batch", kind="batch", input="x.csv", after=["a/online"]),
             entry(id="b/job", repo="someone/b")]
    corpus = manifest.load(write(tmp_path, cases))
    assert [c.id for c in corpus.select(["a/batch"])] == ["a/train", "a/online", "a/batch"]
    assert [c.id for c in corpus.select(["b/"])] == ["b/job"]
    assert [[c.id for c in g] for g in manifest.groups(corpus.cases)] == [
        ["a/train", "a/online", "a/batch"], ["b/job"]]
    with pytest.raises(ManifestError, match="no case"):
        corpus.select(["c/"])


def test_the_committed_manifest_is_valid_and_other_peoples():
    corpus = manifest.load(ROOT / "conformance" / "corpus.yml")
    assert corpus.cases
    assert not {c.repo.lower() for c in corpus.cases} & manifest.EXCLUDED_REPOS


def test_the_matrix_page_is_current():
    corpus = manifest.load(ROOT / "conformance" / "corpus.yml")
    results = matrix.load(ROOT / "conformance" / "results.json")
    assert set(results) <= {c.id for c in corpus.cases}, "results of cases no longer listed"
    page = (ROOT / "docs" / "conformance.md").read_text()
    assert page == matrix.render(corpus, results), "run: python scripts/conformance.py " \
                                                   "--render-only"


def table_standin(tmp_path, options):
    standin = standins.parse_one("azureml:t", {"csv": options}, "test")
    roots = standins.Roots(repo=tmp_path / "repo", state=tmp_path / "state")
    return standins.generate(standin, tmp_path / "out", roots)


def test_a_column_range_stands_for_each_numbered_column_of_its_kind(tmp_path):
    """col_[0-783]: the 784 pixel columns of a flattened 28x28 image, one manifest line."""
    path = table_standin(tmp_path, {"rows": 3, "columns": {"col_[0-783]": "float:0-1",
                                                           "label": "category:0.0|1.0"}})
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == [f"col_{i}" for i in range(784)] + ["label"]
    assert all(0 <= float(r["col_783"]) <= 1 for r in rows)
    with pytest.raises(standins.StandinError, match="columns: 1 to 10000"):
        standins.parse_one("azureml:t", {"csv": {"columns": {"c[0-10000]": "int"}}}, "t")


def test_a_csv_stand_in_is_deterministic_typed_and_holds_every_label(tmp_path):
    columns = {"age": "int:18-90", "income": "float", "churn": "binary",
               "city": "category:north|south|east", "day": "date", "id": "id"}
    path = table_standin(tmp_path, {"rows": 20, "columns": columns})
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 20 and list(rows[0]) == list(columns)
    assert {r["churn"] for r in rows} == {"0", "1"}
    assert {r["city"] for r in rows} == {"north", "south", "east"}
    assert all(18 <= int(r["age"]) <= 90 for r in rows)
    again = table_standin(tmp_path / "again", {"rows": 20, "columns": columns})
    assert again.read_text() == path.read_text()


def test_a_parquet_stand_in_is_typed_with_dates_as_timestamps(tmp_path):
    import pyarrow.parquet as pq

    standin = standins.parse_one("azureml:t", {"parquet": {
        "rows": 6, "name": "taxi.parquet", "folder": True,
        "columns": {"when": "date", "n": "int:1-5", "x": "float", "kind": "category:a|b"}}}, "t")
    roots = standins.Roots(repo=tmp_path / "repo", state=tmp_path / "state")
    folder = standins.generate(standin, tmp_path / "out", roots)
    table = pq.read_table(folder / "taxi.parquet")
    assert table.num_rows == 6 and table.schema.metadata is None
    assert [str(t) for t in table.schema.types] == ["timestamp[us]", "int64", "double", "string"]


def test_stand_ins_of_every_shape_and_their_map(tmp_path):
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "x.csv").write_text("a\n1\n")
    (tmp_path / "state" / "runs" / "r" / "wd" / "outputs").mkdir(parents=True)
    (tmp_path / "state" / "runs" / "r" / "wd" / "outputs" / "model.pkl").write_text("m")
    roots = standins.Roots(repo=repo, state=tmp_path / "state")
    found = {ref: standins.generate(standins.parse_one(ref, spec, "t"), tmp_path / str(i), roots)
             for i, (ref, spec) in enumerate({
                 "azureml:a": {"repo": "data/x.csv"},
                 "azureml:m": {"state": "runs/*/wd/outputs/model.pkl"},
                 "azureml:t": {"mltable": {"rows": 3, "columns": {"a": "int"}}},
                 "azureml:f": {"csv": {"rows": 3, "columns": {"a": "int"}, "folder": True}},
                 "azureml:i": {"images": {"classes": ["cat", "dog"], "per_class": 2}},
                 "azureml:d": {"folder": {"files": {"n.txt": {"text": "hi"}}}},
                 "azureml://datastores/x/paths/y/": {"shared": "y"}}.items())}
    assert found["azureml:a"] == (repo / "data" / "x.csv").resolve()
    assert found["azureml:m"].read_text() == "m"
    assert "read_delimited" in (found["azureml:t"] / "MLTable").read_text()
    assert (found["azureml:f"] / "data.csv").is_file()
    assert len(list(found["azureml:i"].glob("*/*.png"))) == 4
    assert (found["azureml:d"] / "n.txt").read_text() == "hi"
    assert found["azureml://datastores/x/paths/y/"] == tmp_path / "shared" / "y"
    mapped = yaml.safe_load(standins.write_map(found, tmp_path / "map.yml").read_text())
    assert mapped == {k: str(v) for k, v in found.items()}


def test_a_stand_in_that_is_not_there_is_named(tmp_path):
    roots = standins.Roots(repo=tmp_path, state=tmp_path / "state")
    for spec in ({"repo": "missing.csv"}, {"state": "**/model.pkl"}):
        with pytest.raises(standins.StandinError, match="azureml:gone"):
            standins.generate(standins.parse_one("azureml:gone", spec, "t"), tmp_path / "o",
                              roots)


def case(outcome="completes", match=""):
    return manifest.parse_case(entry(expect={"outcome": outcome, "reason": "because",
                                             "match": match}), "test")


@pytest.mark.parametrize(("expected", "match", "outcome", "verdict"), [
    ("completes", "", Outcome(code=0), Verdict.PASSED),
    ("completes", "", Outcome(code=1, output="ValueError: bad"), Verdict.DEFECT),
    ("fails", "NotFound", Outcome(code=1, output="x\nNotFound: y"), Verdict.AZURE),
    ("fails", "NotFound", Outcome(code=1, output="KeyError: z"), Verdict.DEFECT),
    ("fails", "NotFound", Outcome(code=0), Verdict.DEFECT),
    ("needs-service", "Key Vault", Outcome(code=2, output="error: needs a Key Vault"),
     Verdict.REFUSED),
    ("needs-service", "Key Vault", Outcome(code=2, output="error: other"), Verdict.DEFECT),
    ("fails", "NotFound", Outcome(code=None, stopped="timeout", output="NotFound"),
     Verdict.DEFECT),
    ("completes", "", Outcome(blocked_by="repo/train"), Verdict.DEFECT),
    ("fails", "x", Outcome(blocked_by="repo/train", blocked_as_azure=True), Verdict.AZURE),
    ("fails", "x", Outcome(blocked_by="repo/train"), Verdict.DEFECT),
    ("completes", "", Outcome(not_run="too heavy"), Verdict.NOT_RUN),
    # a scorer that catches its own exception answers 200: the answer must hold what Azure's does
    ("completes", "result", Outcome(code=0, output='"{\\"result\\": [4.5]}"'),
     Verdict.PASSED),
    ("completes", "result", Outcome(code=0, output='"{\\"error\\": \\"BOM\\"}"'),
     Verdict.DEFECT),
])
def test_classification(expected, match, outcome, verdict):
    assert classify(case(expected, match), outcome)[0] is verdict


def test_the_reason_of_a_failure_is_its_telling_line():
    output = textwrap.dedent("""\
        [prep] Traceback (most recent call last):
        [prep]   File "prep.py", line 20, in <module>
        [prep] ModuleNotFoundError: No module named 'pkg_resources'
        step prep failed (exit 1)
          | ModuleNotFoundError: No module named 'pkg_resources'
        pipeline: Failed (exit 1)
        """)
    assert error_line(output) == "ModuleNotFoundError: No module named 'pkg_resources'"
    assert error_line("error: inputs.x: no stand-in\n") == "error: inputs.x: no stand-in"
    assert error_line("") == "(no output)"
    assert error_line("no trial logged the metric 'x'\nsummary: /r/s.json\n"
                      "sweep: Failed (exit 1; log /r/log.txt)\n  outputs: /r/o\n"
                      "  MLflow run: 12ab\n") == "no trial logged the metric 'x'"
    assert len(error_line("ValueError: " + "x" * 1000)) == 240
    assert got(Outcome(code=2, step="start")) == "failed (start, exit 2)"
    assert got(Outcome(code=None, stopped="timeout", seconds=61)) == "timed out (61 s)"


def test_the_python_a_run_used_is_read_from_its_log():
    assert python_seen("x: cached layer ready (40 package(s) on Python 3.8.18; /c)") == "3.8"
    assert python_seen("x: resolving 3 requirement(s) for Python 3.11, as") == "3.11"
    assert python_seen("nothing") == ""


def result(case_id, verdict="passed", kind="command", python="3.8"):
    return matrix.Result(id=case_id, repo="someone/repo", commit=SHA, path="a|b.yml", kind=kind,
                         python=python, expected="completes", got="completed", verdict=verdict,
                         reason="it | trains", seconds=1.0, date="2026-01-01")


def test_the_matrix_has_a_row_per_case_and_its_totals(tmp_path):
    corpus = manifest.load(write(tmp_path, [
        entry(), entry(id="repo/b"), entry(id="repo/c", expect={"outcome": "skip",
                                                                "reason": "a GPU"})]))
    results = {"repo/job": result("repo/job"), "repo/b": result("repo/b", "project defect")}
    page = matrix.render(corpus, results)
    assert "| repo/job | someone/repo@0123456 | jobs/job.yml | command | 3.8 | completes | " \
           "completed | passed | it \\| trains |" in page
    assert "| repo/c | someone/repo@0123456 | jobs/job.yml | command | 3.8 | skip | not run " \
           "yet |" in page
    assert "specs: 3 (2 runnable), repositories: 1" in page
    assert "passed 1, project defect 1" in page and ": 50%" in page
    matrix.save(results, corpus, tmp_path / "results.json")
    assert matrix.load(tmp_path / "results.json") == results
    (tmp_path / "bad.json").write_text("{")
    assert matrix.load(tmp_path / "bad.json") == {}


def test_the_runner_speaks_azml_for_jobs_assets_and_endpoints(tmp_path):
    place = runner.Place(root=tmp_path, cwd=tmp_path, asset_map=tmp_path / "m.yml", env={},
                         log=tmp_path / "log")
    (tmp_path / "d.yml").write_text("endpoint_name: my-ep\nmodel: azureml:m:1\n")
    online = manifest.parse_case(entry(kind="online", request="r.json", path="d.yml"), "t")
    commands = runner.online_commands(online, place, 5005, "r.json")
    assert commands.create[1:] == ["online-endpoint", "create", "-n", "my-ep", "--port", "5005",
                                   "-o", "none"]  # no endpoint spec beside it: by name
    assert commands.deploy[1:] == ["online-deployment", "create", "-f", "d.yml", "-e", "my-ep",
                                   "--all-traffic", "-o", "none"]
    assert commands.invoke[1:] == ["online-endpoint", "invoke", "-n", "my-ep", "-r", "r.json"]
    assert commands.delete[1:] == ["online-endpoint", "delete", "-n", "my-ep", "--yes"]
    schema = "$schema: https://azuremlschemas.azureedge.net/latest/managedOnlineEndpoint." \
        "schema.json\n"
    (tmp_path / "other.yml").write_text(schema + "name: not-it\n")
    (tmp_path / "endpoint.yml").write_text(schema + "name: my-ep\nauth_mode: key\n")
    assert runner.online_commands(online, place, 5005, "r.json").create[3:5] == \
        ["-f", "endpoint.yml"]  # the one its endpoint_name names
    (tmp_path / "b.yml").write_text("endpoint_name: my-batch\n")
    (tmp_path / "batch-endpoint.yml").write_text("$schema: https://azuremlschemas.azureedge.net/"
                                                 "latest/batchEndpoint.schema.json\nname: x\n")
    batch = manifest.parse_case(entry(kind="batch", input="in", path="b.yml",
                                      input_type="mltable"), "t")
    commands = runner.batch_commands(batch, place, "in")
    assert commands.create[1:] == ["batch-endpoint", "create", "-f", "batch-endpoint.yml", "-n",
                                   "my-batch", "-o", "none"]  # the only one beside it
    assert commands.deploy[1:] == ["batch-deployment", "create", "-f", "b.yml", "-e", "my-batch",
                                   "--set-default", "-o", "none"]
    assert commands.invoke[1:] == ["batch-endpoint", "invoke", "-n", "my-batch", "--input", "in",
                                   "--input-type", "mltable", "--stream"]
    assert commands.delete[1:] == ["batch-endpoint", "delete", "-n", "my-batch", "--yes"]
    filled = manifest.parse_case(entry(kind="online", request="r.json", path="d.yml",
                                       sets=["instance_type=Standard_F2s_v2"]), "t")
    assert runner.online_commands(filled, place, 5005, "r.json").deploy[5:9] == \
        ["-e", "my-ep", "--set", "instance_type=Standard_F2s_v2"]  # a template's placeholders
    job = manifest.parse_case(entry(sets=["inputs.epochs=1"]), "t")
    assert runner.job_command(job, place)[1:] == ["job", "run", "-f", "jobs/job.yml", "--set",
                                                  "inputs.epochs=1"]
    assert runner.job_command(job, place)[0].endswith("azml")
    (tmp_path / "env.yml").write_text("$schema: https://azuremlschemas.azureedge.net/latest/"
                                      "environment.schema.json\nname: e\n")
    (tmp_path / "component.yml").write_text("$schema: https://azuremlschemas.azureedge.net/"
                                            "latest/commandComponent.schema.json\n")
    (tmp_path / "dataset.yml").write_text("$schema: https://azuremlschemas.azureedge.net/"
                                          "latest/asset.schema.json\n")
    made = manifest.parse_case(entry(setup=["env.yml", "component.yml",
                                            {"model": "dataset.yml"}]), "t")
    assert made.setup == ("env.yml", "component.yml", "model:dataset.yml")
    assert [runner.setup_command(s, place)[1:3] for s in made.setup] == [
        ["environment", "create"], ["component", "create"], ["model", "create"]]
    settings = runner.write_settings(place).read_text()
    assert f'asset_map = "{tmp_path / "m.yml"}"' in settings


def test_an_endpoint_spec_without_schema_is_found_by_its_name(tmp_path):
    """az ml online-endpoint create -f reads a spec with no $schema line: the one beside the
    deployment whose name is its endpoint_name is the user's; a deployment beside it is not."""
    place = runner.Place(root=tmp_path, cwd=tmp_path, asset_map=tmp_path / "m.yml", env={},
                         log=tmp_path / "log")
    (tmp_path / "deployment.yml").write_text("name: blue\nendpoint_name: my-ep\n")
    (tmp_path / "green.yml").write_text("name: my-ep\nendpoint_name: my-ep\n")
    online = manifest.parse_case(entry(kind="online", request="r.json",
                                       path="deployment.yml"), "t")
    assert "-f" not in runner.online_commands(online, place, 5005, "r.json").create
    (tmp_path / "endpoint.yml").write_text("name: my-ep\nauth_mode: key\ntraffic: 100\n")
    (tmp_path / "other.yml").write_text("name: someone-else\nauth_mode: key\n")
    assert runner.online_commands(online, place, 5005, "r.json").create[3:5] == \
        ["-f", "endpoint.yml"]


def test_a_mirror_is_found_in_each_of_its_layouts(tmp_path):
    for layout in ("o+n/repo/.git", "o+n/repo", "o+n", "o/n.git", "o/n"):
        git_dir = tmp_path / layout.replace("/", "_") / layout
        (git_dir / "objects").mkdir(parents=True)
        (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
        assert sources.mirrored(tmp_path / layout.replace("/", "_"), "o/n") == git_dir
    assert sources.mirrored(tmp_path, "o/missing") is None


def test_a_failure_that_names_a_file_the_mirror_lacks_is_not_run():
    from corpus.cases import lacked

    failed = Outcome(code=1, output="FileNotFoundError: data/passenger-data.csv")
    assert "the mirror lacks data/passenger-data.csv" in lacked(failed, ["data/passenger-data.csv",
                                                                       "media/x.gif"]).not_run
    assert lacked(failed, ["media/x.gif"]) == failed
    assert lacked(Outcome(code=0), ["data/passenger-data.csv"]).not_run == ""


def test_a_case_after_one_that_did_not_complete_is_blocked_or_not_run():
    from corpus.cases import blocked

    online = manifest.parse_case(entry(id="a/online", kind="online", request="r.json",
                                       after=["a/train"]), "t")
    assert blocked(online, {"a/train": Outcome(code=0)}, {}) is None
    failed = blocked(online, {"a/train": Outcome(code=1)}, {"a/train": True})
    assert failed.blocked_by == "a/train" and failed.blocked_as_azure
    lacking = blocked(online, {"a/train": Outcome(not_run="the mirror lacks x.csv")}, {})
    assert lacking.not_run == "a/train did not run here: the mirror lacks x.csv"
