"""The local endpoint's rules without a server: Azure's traffic and mirror rules, keys and
tokens, which endpoint a deployment goes to, and the front's routing, auth, limits and answers."""

from __future__ import annotations

import errno
import json
import os
import random
import resource
import signal
import socket
import stat
from pathlib import Path

import pytest

from mlops.endpoints import front_wire as wire
from mlops.endpoints import local_endpoint, online
from mlops.endpoints.deployment import load
from mlops.endpoints.endpoint_state import AuthMode, DamagedState, EndpointState, Slot, Token
from mlops.endpoints.front_rules import Router
from mlops.endpoints.traffic import NewTraffic, add_deployment, parse, set_mirror, set_traffic
from mlops.errors import LocalRunError, machine_fault
from mlops.specs import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "endpoint"


def slot(name: str, **rules) -> Slot:
    base = {"max_body": 100, "timeout_ms": 1000, "max_pending": 2}
    return Slot(name=name, port=1, pid=1, folder="/nowhere", spec="", model="", environment="",
                **{**base, **rules})


def endpoint(*names: str, **traffic: int) -> EndpointState:
    state = EndpointState(name="e", deployments={n: slot(n) for n in names})
    state.traffic = dict(traffic)
    state.ensure_credentials()
    return state


# ---- traffic and mirror traffic ----

def test_weights_are_read_as_the_cli_writes_them():
    assert parse("blue=90 green=10", "traffic") == {"blue": 90, "green": 10}
    assert parse("blue=90,green=10", "traffic") == {"blue": 90, "green": 10}
    for bad in ("blue", "blue=ninety", "blue=101", "=5", "blue=-1"):
        with pytest.raises(LocalRunError, match="<deployment>=<whole percentage"):
            parse(bad, "traffic")


def test_traffic_adds_up_to_100_or_0_over_deployments_the_endpoint_has():
    state = endpoint("blue", "green", blue=100, green=0)
    set_traffic(state, {"blue": 90, "green": 10})
    assert state.traffic == {"blue": 90, "green": 10}
    set_traffic(state, {"green": 100})  # the one not named gets 0
    assert state.traffic == {"blue": 0, "green": 100}
    set_traffic(state, {})
    assert state.traffic == {"blue": 0, "green": 0}
    with pytest.raises(LocalRunError, match="adds up to 110"):
        set_traffic(state, {"blue": 90, "green": 20})
    with pytest.raises(LocalRunError, match="has no deployment purple"):
        set_traffic(state, {"purple": 100})


def test_mirror_traffic_goes_to_one_deployment_at_most_half_never_a_live_one():
    state = endpoint("blue", "green", "red", blue=100, green=0, red=0)
    set_mirror(state, {"green": 50})
    assert state.mirror_traffic == {"green": 50}
    with pytest.raises(LocalRunError, match="at most 50"):
        set_mirror(state, {"green": 51})
    with pytest.raises(LocalRunError, match="one deployment at most"):
        set_mirror(state, {"green": 10, "red": 10})
    with pytest.raises(LocalRunError, match="takes 100 % of live traffic"):
        set_mirror(state, {"blue": 10})
    with pytest.raises(LocalRunError, match="live or mirrored traffic, not both"):
        set_traffic(state, {"blue": 50, "green": 50})
    set_mirror(state, {"green": 0})
    assert state.mirror_traffic == {}


def test_a_new_deployment_gets_all_traffic_only_as_asked():
    state = endpoint("blue")
    assert "blue=100" in add_deployment(state, "blue", NewTraffic.AUTO)
    state.deployments["green"] = slot("green")
    assert "green=0" in add_deployment(state, "green", NewTraffic.AUTO)
    assert state.traffic == {"blue": 100, "green": 0}
    assert "green=100 (--all-traffic)" in add_deployment(state, "green", NewTraffic.ALL)
    assert state.traffic == {"blue": 0, "green": 100}
    alone = endpoint("blue")
    assert "404" in add_deployment(alone, "blue", NewTraffic.NONE)
    assert alone.traffic == {"blue": 0}


# ---- keys, tokens and the state file ----

def test_the_state_file_is_the_users_alone_and_reads_back(tmp_path):
    state = endpoint("blue", blue=100)
    state.write(tmp_path)
    assert stat.S_IMODE((tmp_path / "endpoint.json").stat().st_mode) == 0o600
    assert EndpointState.read(tmp_path) == state
    assert EndpointState.read(tmp_path / "none") is None


def test_a_state_the_disk_refuses_leaves_the_old_one_and_a_one_line_error(tmp_path):
    """A full disk or a protected endpoint.json (chattr +i: EPERM, even for root) is the
    machine's fault, said in one line naming endpoint.json; no half-written copy is left."""
    state = EndpointState(name="e", port=5001)
    state.write(tmp_path)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it: EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, limit[1]))
    try:
        with pytest.raises(OSError) as raised:
            EndpointState(name="e", port=5002).write(tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, previous)
    assert raised.value.errno == errno.EFBIG
    assert raised.value.filename == str(tmp_path / "endpoint.json")
    assert os.listdir(tmp_path) == ["endpoint.json"] and EndpointState.read(tmp_path).port == 5001
    protected = OSError(errno.EPERM, os.strerror(errno.EPERM), str(tmp_path / "endpoint.json"))
    assert str(machine_fault(protected)).startswith(f"{tmp_path / 'endpoint.json'}: ")
    assert "chattr -i" in str(machine_fault(protected))
    assert machine_fault(PermissionError(errno.EPERM, "kill")) is None  # a process's, not a file's


def test_both_keys_open_a_key_endpoint_and_nothing_else_does():
    state = endpoint("blue")
    assert state.accepts(state.keys["primaryKey"]) and state.accepts(state.keys["secondaryKey"])
    assert not state.accepts("") and not state.accepts(state.keys["primaryKey"] + "x")
    assert not state.accepts(state.tokens[-1].accessToken)  # a token is not a key
    assert not state.accepts("\xe9t\xe9")  # no key or token is anything but ASCII


def test_a_token_opens_a_token_endpoint_until_it_expires():
    state = endpoint("blue")
    state.auth_mode = AuthMode.AML_TOKEN
    state.tokens = [Token.issue(now=1000.0, ttl=100)]
    token = state.tokens[0].accessToken
    assert state.accepts(token, now=1050) and not state.accepts(token, now=1101)
    assert not state.accepts(state.keys["primaryKey"], now=1050)
    state.ensure_credentials(now=1060)  # past refresh-after (half the life): a new one
    assert len(state.tokens) == 2 and state.credential() != token
    assert state.accepts(token, now=1070)  # the old one still works until it expires
    keys = dict(state.keys)
    state.ensure_credentials(now=2000)
    assert state.keys == keys and len(state.tokens) == 1  # keys stay; expired tokens go


# ---- which endpoint ----

def request(deployment: Path, **kw) -> online.ServeRequest:
    return online.ServeRequest(deployment=deployment, **kw)


def test_the_endpoint_spec_beside_the_deployment_names_it_and_its_auth():
    spec = local_endpoint.endpoint_spec(request(FIXTURE / "blue.yml"),
                                        load(FIXTURE / "blue.yml", "online-deployment"))
    assert (spec.name, spec.auth_mode, spec.path) == ("rollout-local", AuthMode.KEY,
                                                      FIXTURE / "endpoint.yml")
    none = local_endpoint.endpoint_spec(request(FIXTURE / "blue.yml", auth="none"),
                                        load(FIXTURE / "blue.yml", "online-deployment"))
    assert none.auth_mode == AuthMode.NONE


def test_without_an_endpoint_spec_the_endpoint_is_its_name_with_key_auth(tmp_path):
    (tmp_path / "d.yml").write_text((FIXTURE / "blue.yml").read_text().replace(
        "path: model/", f"path: {FIXTURE / 'model'}").replace(
        "code: scoring/", f"code: {FIXTURE / 'scoring'}").replace(
        "conda_file: conda.yml", f"conda_file: {FIXTURE / 'conda.yml'}"))
    deployment = load(tmp_path / "d.yml", "online-deployment")
    spec = local_endpoint.endpoint_spec(request(tmp_path / "d.yml"), deployment)
    assert (spec.name, spec.auth_mode, spec.path) == ("rollout-local", AuthMode.KEY, None)
    (tmp_path / "bad.yml").write_text("$schema: https://azuremlschemas.azureedge.net/latest/"
                                      "managedOnlineEndpoint.schema.json\nname: rollout-local\n"
                                      "auth_mode: password\n")
    with pytest.raises(LocalRunError, match="auth_mode 'password'"):
        local_endpoint.endpoint_spec(request(tmp_path / "d.yml"), deployment)


def test_names_follow_azures_rule():
    assert local_endpoint.checked_name("blue-2", "deployment") == "blue-2"
    for bad in ("b", "2blue", "blue_2", "../x", "a" * 33, "blue-"):
        with pytest.raises(LocalRunError, match="start with a letter"):
            local_endpoint.checked_name(bad, "deployment")


# ---- the front ----

def router(tmp_path: Path, state: EndpointState) -> Router:
    state.write(tmp_path)
    return Router.open(tmp_path)


def head(*lines: str) -> dict[bytes, bytes]:
    """A request's fields as the front reads them (lower-case names)."""
    return {name.strip().lower().encode(): value.strip().encode()
            for name, _, value in (line.partition(":") for line in lines)}


def refusal(call) -> tuple[int, str]:
    with pytest.raises(wire.Refused) as refused:
        call()
    return refused.value.status, refused.value.message


def test_the_front_answers_401_as_azure_does(tmp_path):
    state = endpoint("blue", blue=100)
    front = router(tmp_path, state)
    assert refusal(lambda: front.authorize(head())) == (401, "key_auth_bad_header_forbidden")
    assert refusal(lambda: front.authorize(head("Authorization: Basic abc")))[0] == 401
    assert refusal(lambda: front.authorize(head("Authorization: Bearer nope"))) == (
        401, "key_auth_access_denied")
    assert refusal(lambda: front.authorize({b"authorization": b"Bearer \xe9t\xe9"})) == (
        401, "key_auth_access_denied")  # latin-1 text: a wrong key, not a dropped connection
    key = state.keys["secondaryKey"].encode()
    assert refusal(lambda: front.authorize({b"authorization": b"Bearer " + key + b"\xa0"})) == (
        401, "key_auth_access_denied")  # a no-break space is no HTTP space: part of the token
    front.authorize(head(f"Authorization: Bearer {state.keys['secondaryKey']}"))


def test_the_front_routes_by_header_then_by_weight_and_mirrors_only_drawn_requests(tmp_path):
    state = endpoint("blue", "green", blue=90, green=10)
    state.mirror_traffic = {"green": 0}
    front = router(tmp_path, state)
    assert front.route(head("azureml-model-deployment: green")).slot.name == "green"
    assert refusal(lambda: front.route(head("azureml-model-deployment: red")))[0] == 404
    random.seed(7)
    drawn = [front.route(head()).slot.name for _ in range(2000)]
    assert 0.87 < drawn.count("blue") / 2000 < 0.93
    set_traffic(state, {"blue": 100})
    set_mirror(state, {"green": 50})
    state.write(tmp_path)
    routes = [front.route(head()) for _ in range(400)]
    assert {r.slot.name for r in routes} == {"blue"}
    assert 150 < sum(r.mirror is not None for r in routes) < 250
    assert front.route(head("azureml-model-deployment: blue")).mirror is None
    set_mirror(state, {})
    set_traffic(state, {})
    state.write(tmp_path)
    status, message = refusal(lambda: front.route(head()))
    assert status == 404 and "valid deployment with positive weight" in message


def test_the_front_takes_at_most_max_pending_requests_per_deployment(tmp_path):
    front = router(tmp_path, endpoint("blue", blue=100))
    blue = front.state.deployments["blue"]
    with front.admitted(blue), front.admitted(blue):
        assert refusal(lambda: front.admitted(blue).__enter__())[0] == 429
    with front.admitted(blue):
        pass


@pytest.mark.parametrize("damage", [
    lambda path: path.write_text('{"name": "x", "auth_mo'),
    lambda path: path.mkdir(),  # a folder
    lambda path: path.symlink_to(path.name),  # a link to itself (ELOOP)
    lambda path: socket.socket(socket.AF_UNIX).bind(str(path)),  # a socket (ENXIO)
    lambda path: os.mkfifo(path),
])
def test_a_damaged_state_file_is_named_not_a_traceback(tmp_path, monkeypatch, damage):
    """Whatever stands at endpoint.json, it is damaged state (stop-local then finds the servers
    from the run folders), not an OSError's traceback at every verb."""
    monkeypatch.setattr(local_endpoint, "ENDPOINTS", tmp_path)
    (tmp_path / "e2e-endpoint").mkdir()
    damage(tmp_path / "e2e-endpoint" / "endpoint.json")
    with pytest.raises(LocalRunError, match="endpoint.json is damaged"):
        local_endpoint.live_state(tmp_path / "e2e-endpoint")


@pytest.mark.parametrize("damage", [
    lambda d: d["deployments"]["blue"].update(port="5001"),  # a string where a number goes
    lambda d: d.update(traffic=["blue"]),
    lambda d: d.update(auth_mode="password"),
    lambda d: d["deployments"]["blue"].update(max_pending=True),
    lambda d: d.update(tokens=[{"accessToken": 1}]),
    lambda d: d.update(port=70000),
    lambda d: d.pop("name"),
    lambda d: d.update(deployments=None),
])
def test_the_front_keeps_the_last_good_state_and_says_so_once(tmp_path, damage, capsys):
    state = endpoint("blue", blue=100)
    front = router(tmp_path, state)
    data = json.loads((tmp_path / "endpoint.json").read_text())
    damage(data)
    (tmp_path / "endpoint.json").write_text(json.dumps(data))
    with pytest.raises(DamagedState):
        EndpointState.read(tmp_path)
    for _ in range(3):
        assert front.current() == state
        assert front.route(head()).slot.name == "blue"
    assert capsys.readouterr().err.count("keeping the last good state") == 1
    (tmp_path / "endpoint.json").unlink()
    assert front.current() == state
    state.write(tmp_path)  # good again: read again
    assert front.current() == state


def test_invoke_sends_the_request_files_json_re_encoded_as_az_ml_does(tmp_path, monkeypatch):
    """azure-ai-ml's invoke json.loads the request file's bytes and posts it as json=: a BOM
    or a file's own layout never reaches the scorer, JSON null is no body, and a file that is
    not JSON is refused before anything is sent."""
    from mlops.api import endpoints
    from mlops.endpoints import endpoint_actions as actions
    request = tmp_path / "sample request.json"
    request.write_bytes(b'\xef\xbb\xbf{"data":[3],\n  "b": "\xc3\xa9"}\n')
    assert actions.request_body(request) == json.dumps({"data": [3], "b": "\u00e9"}).encode()
    request.write_bytes('{"data": [1.0]}'.encode("utf-16"))
    assert actions.request_body(request) == b'{"data": [1.0]}'
    request.write_bytes(b"null")
    assert actions.request_body(request) == b""
    for bad in (b"", b"data=3", b"\xff\xfe\xfd"):
        request.write_bytes(bad)
        with pytest.raises(LocalRunError, match="not JSON"):
            actions.request_body(request)
    for unreadable in (tmp_path / "missing.json", tmp_path):  # absent, a folder: no traceback
        with pytest.raises(LocalRunError, match="cannot be read"):
            actions.request_body(unreadable)
    sent = []
    monkeypatch.setattr(endpoints, "_created", lambda name: None)
    monkeypatch.setattr(actions, "post", lambda body, **kw: sent.append(body) or
                        actions.Answer(b'"ok"', "blue"))
    request.write_bytes(b'\xef\xbb\xbf{"data": [3]}')
    assert endpoints.invoke("ep", request, None) == '"ok"'
    assert sent == [b'{"data": [3]}']


def test_an_endpoint_that_is_not_running_says_how_azml_starts_it(tmp_path):
    """Said to an azml user in any repository, not only this one's make target."""
    from mlops.endpoints.endpoint_actions import running_state

    with pytest.raises(LocalRunError, match=r"local endpoint gone is not running: start it with "
                       r"azml online-deployment create -f <deployment.yml> \(make serve-local"):
        running_state(tmp_path / "gone")


@pytest.mark.parametrize("written", ["Key", "KEY", "key", "AMLToken", "amlToken", "AML_TOKEN",
                                     "AadToken", "Aml_Token", "token"])
def test_auth_mode_is_read_as_azure_ai_mls_loader_reads_it(written):
    from azure.ai.ml._utils.utils import camel_to_snake

    azure = camel_to_snake(written)
    if azure in ("key", "aml_token", "aad_token"):
        assert AuthMode.of_spec(written) == AuthMode(azure)
    else:
        with pytest.raises(ValueError):
            AuthMode.of_spec(written)


def test_an_endpoint_spec_saying_auth_mode_key_capitalised_is_a_key_endpoint(tmp_path):
    (tmp_path / "endpoint.yml").write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/kubernetesOnlineEndpoint"
        ".schema.json\nname: rollout-local\nauth_mode: Key\n")
    (tmp_path / "d.yml").write_text((FIXTURE / "blue.yml").read_text().replace(
        "path: model/", f"path: {FIXTURE / 'model'}").replace(
        "code: scoring/", f"code: {FIXTURE / 'scoring'}").replace(
        "conda_file: conda.yml", f"conda_file: {FIXTURE / 'conda.yml'}"))
    spec = local_endpoint.endpoint_spec(request(tmp_path / "d.yml"),
                                        load(tmp_path / "d.yml", "online-deployment"))
    assert (spec.name, spec.auth_mode) == ("rollout-local", AuthMode.KEY)


def test_the_endpoint_lock_is_taken_again_at_once_by_the_process_that_holds_it(tmp_path):
    """A command that holds an endpoint's lock and starts its front again (running_state)
    takes it a second time: flock through a second descriptor would wait on itself."""
    import fcntl

    from mlops.endpoints.local_endpoint import endpoint_lock

    folder = tmp_path / "ep"
    with endpoint_lock(folder, "outer"), endpoint_lock(folder, "inner"):
        other = os.open(folder / ".lock", os.O_RDWR)
        try:  # another process's descriptor still finds it held
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    with endpoint_lock(folder, "again"):  # released once the outer one ended
        pass
