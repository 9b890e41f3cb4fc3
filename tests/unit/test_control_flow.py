"""Control-flow nodes planned without running anything (orchestrators/control_flow.py, graph.py,
loops.py): what azure-ai-ml refuses, the order the nodes run in, which steps an if_else skips,
what a condition and a primitive output mean."""

from pathlib import Path

import pytest

from mlops.errors import LocalRunError
from mlops.orchestrators import control_flow as cf
from mlops.orchestrators.graph import Scope, bind, build_nodes
from mlops.orchestrators.loops import parts, skip_reason
from mlops.runtime.uris import AssetMap
from mlops.specs import read_yaml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "control_flow"


def nodes_of(name: str, tmp_path: Path):
    data = read_yaml((FIXTURES / name).read_text())
    return build_nodes(data["jobs"], FIXTURES, AssetMap(tmp_path / "none.yml"), name)


def scope(tmp_path: Path) -> Scope:
    return Scope(inputs={}, outputs={}, folder=tmp_path, run_id="r", experiment="e",
                 assets=AssetMap(tmp_path / "none.yml"), base=FIXTURES)


def test_if_else_blocks_run_after_it_and_are_gated(tmp_path):
    nodes = nodes_of("if-else.yml", tmp_path)
    order = [n.name for n in nodes]
    assert order.index("check") < order.index("branch") < min(order.index("big"),
                                                               order.index("small"))
    by_name = {n.name: n for n in nodes}
    assert by_name["big"].gate == ("branch", True) and by_name["small"].gate == ("branch", False)
    here = scope(tmp_path)
    here.chosen["branch"] = True
    assert skip_reason(by_name["big"], here) is None
    assert "false block of branch, whose condition was True" in skip_reason(by_name["small"],
                                                                              here)
    assert skip_reason(by_name["big"], scope(tmp_path)) == "its if_else branch did not run"


@pytest.mark.parametrize(("raw", "message"), [
    ({"condition": True}, "cannot be empty at the same time"),
    ({"condition": True, "true_block": "${{parent.jobs.a}}",
      "false_block": ["${{parent.jobs.a}}"]}, "cannot contain same nodes"),
    ({"condition": True, "true_block": "a"}, "invalid binding expression: a"),
    ({"condition": "yes", "true_block": "${{parent.jobs.a}}"}, "condition.*invalid binding"),
])
def test_if_else_is_refused_as_azure_ai_ml_refuses_it(raw, message):
    with pytest.raises(LocalRunError, match=message):
        cf.blocks(raw, "job.yml: jobs.c")


def test_a_loop_body_runs_only_inside_its_loop(tmp_path):
    nodes = nodes_of("do-while.yml", tmp_path)
    assert [n.name for n in nodes] == ["loop", "report"]  # report reads the body: after the loop
    loop = nodes[0]
    assert loop.body.name == "counter" and loop.body.owner == "loop"
    assert parts(loop) == [f"iteration:{n}" for n in range(5)]
    spec = cf.do_while(loop.raw, {"counter": loop.body.ports}, loop.where)
    assert spec.mapping == {"count_out": ["count"], "log": ["history"]}
    assert (spec.condition, spec.max_iterations) == ("again", 5)


def test_parallel_for_items_and_its_readers(tmp_path):
    nodes = nodes_of("parallel-for.yml", tmp_path)
    assert [n.name for n in nodes] == ["each", "gather"]
    assert parts(nodes[0]) == ["item:0", "item:1", "item:2"]


def ports() -> dict[str, cf.Ports]:
    return {"b": cf.Ports(inputs={"n": {"type": "integer"}, "d": {"type": "uri_folder"}},
                          outputs={"n_out": {"type": "integer"}, "flag": {"type": "boolean"},
                                   "folder": {"type": "uri_folder"}})}


@pytest.mark.parametrize(("changes", "message"), [
    ({"limits": {"max_iteration_count": 0}}, "from 1 to 1000"),
    ({"limits": {"max_iteration_count": 1001}}, "from 1 to 1000"),
    ({"limits": {}}, "max_iteration_count: None"),
    ({"mapping": {"nothing": "n"}}, "output of mapping nothing does not exist"),
    ({"mapping": {"n_out": "nothing"}}, "input of mapping nothing does not exist"),
    ({"mapping": {"folder": "n"}}, "Non-primitive type output cannot be connected"),
    ({"mapping": {"n_out": "n", "flag": "${{parent.jobs.b.inputs.n}}"}}, "linked to multiple"),
    ({"condition": "folder"}, "is not a control output"),
    ({"condition": "${{parent.jobs.other.outputs.flag}}"}, "only accepts outputs of the body"),
])
def test_do_while_is_refused_as_azure_ai_ml_refuses_it(changes, message):
    raw = {"body": "${{parent.jobs.b}}", "mapping": {"n_out": "n"}, "condition": "flag",
           "limits": {"max_iteration_count": 3}, **changes}
    with pytest.raises(LocalRunError, match=message):
        cf.do_while(raw, ports(), "job.yml: jobs.loop")


def test_do_while_takes_ports_by_name_or_binding():
    raw = {"body": "${{parent.jobs.b}}", "limits": {"max_iteration_count": 2},
           "mapping": {"${{parent.jobs.b.outputs.n_out}}": ["${{parent.jobs.b.inputs.n}}"],
                       "folder": "d"},
           "condition": "${{parent.jobs.b.outputs.flag}}"}
    spec = cf.do_while(raw, ports(), "x")
    assert spec.mapping == {"n_out": ["n"], "folder": ["d"]} and spec.condition == "flag"


def test_parallel_for_items_as_azure_ai_ml_reads_them():
    inputs = {"name": {}, "times": {}}
    assert cf.items_of([{"name": "a"}, {"name": "b"}], "x", inputs) == \
        [("0", {"name": "a"}), ("1", {"name": "b"})]
    assert cf.items_of('{"one": {"name": "a"}}', "x", inputs) == [("one", {"name": "a"})]
    for items, message in (([], "empty"), ([{"name": "a"}, {"times": 1}], "same keys"),
                           ([1], "list/dict of dict"), ("{bad", "neither a valid JSON"),
                           ([{"colour": "red"}], "does not take")):
        with pytest.raises(LocalRunError, match=message):
            cf.items_of(items, "x", inputs)


def test_a_condition_is_a_boolean_as_azure_writes_one(tmp_path):
    assert cf.truth(True, "x") is True and cf.truth("False", "x") is False
    assert cf.truth(" true\n", "x") is True
    with pytest.raises(LocalRunError, match="not a boolean"):
        cf.truth("1", "x")


def test_a_primitive_output_is_read_where_mldesigner_writes_it(tmp_path):
    folder = tmp_path / "flag"
    folder.mkdir()
    (folder / "output").write_text("True\n")
    assert cf.primitive_value(folder, "flag") == "True"
    assert cf.primitive_value(folder, "flag", {"flag": False}) == "False"  # the run property
    (tmp_path / "count").write_text("3")
    assert cf.primitive_value(tmp_path / "count", "count") == "3"
    with pytest.raises(LocalRunError, match="nothing written"):
        cf.primitive_value(tmp_path / "missing", "m")


def test_a_loop_body_cannot_be_another_loops(tmp_path):
    jobs = {"b": {"type": "command", "command": "echo"},
            "one": {"type": "do_while", "body": "${{parent.jobs.b}}",
                    "limits": {"max_iteration_count": 1}},
            "two": {"type": "parallel_for", "body": "${{parent.jobs.b}}", "items": [{}]}}
    with pytest.raises(LocalRunError, match="cannot be promoted as another loop"):
        build_nodes(jobs, tmp_path, AssetMap(tmp_path / "none.yml"), "job.yml")


def test_debug_names_each_run_of_a_body_by_its_path(tmp_path):
    from mlops.orchestrators.pipeline import addresses

    assets = AssetMap(tmp_path / "none.yml")
    found = addresses(nodes_of("do-while.yml", tmp_path), assets)
    assert ("loop", "iteration:0", "counter") in found and ("report",) in found
    assert ("loop", "iteration:5", "counter") not in found and ("counter",) not in found
    assert set(addresses(nodes_of("if-else.yml", tmp_path), assets)) == \
        {("check",), ("big",), ("small",)}  # the if_else itself starts no process
    assert ("each", "item:2", "greeter") in addresses(nodes_of("parallel-for.yml", tmp_path),
                                                      assets)


def test_an_unregistered_asset_names_azmls_verb_for_it_in_any_repository(tmp_path, repo):
    """The user's repository has azml, not this template's make targets."""
    from mlops.errors import LocalRunError

    with pytest.raises(LocalRunError, match=r"azml model create -f <its YAML>"):
        AssetMap(tmp_path / "none.yml").local_path("azureml:clf:3", "job.yml: model", tmp_path,
                                                   kind="model", bare=True)


def test_a_node_binding_keeps_its_own_mode_over_the_output_it_reads(tmp_path):
    here = scope(tmp_path)
    here.steps["prep"] = {"table": ("mltable", tmp_path / "table")}
    binding = {"type": "mltable", "mode": "eval_mount",
               "path": "${{parent.jobs.prep.outputs.table}}"}
    value = bind(binding, {}, here, "jobs.score.inputs.data")
    assert (value.path, value.type, value.mode) == (tmp_path / "table", "mltable", "eval_mount")
    plain = bind({"path": "${{parent.jobs.prep.outputs.table}}"}, {}, here, "k")
    assert plain.mode is None and plain.type == "mltable"
