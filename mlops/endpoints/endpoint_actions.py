"""What `make serve-local` and its twins do to a local endpoint (local_endpoint.py): start a
deployment in it, stop it, set its traffic and mirror traffic, show it and its credentials, and
invoke it with its key. Each is the local twin of an `az ml online-endpoint` or
`online-deployment` command, and says so where they differ.
"""

from __future__ import annotations

import contextlib
import copy
import json
import secrets
import sys
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from mlops.endpoints import online
from mlops.endpoints.endpoint_state import AuthMode, EndpointState, Slot
from mlops.endpoints.endpoint_stop import START, chosen, stop_orphans
from mlops.endpoints.local_endpoint import (
    checked_name,
    endpoint_folder,
    endpoint_lock,
    endpoint_spec,
    ensure_front,
    live_state,
    next_folder,
    open_state,
    prune,
    retire,
)
from mlops.endpoints.traffic import (
    NewTraffic,
    add_deployment,
    describe,
    parse,
    set_mirror,
    set_traffic,
)
from mlops.errors import LocalError, LocalRunError
from mlops.runtime import interruptible, safe_root, signals_held, stop_service

AUTH_NOTES = {AuthMode.NONE: "auth: none (AUTH=none, as `az ml ... --local`, which has no auth; "
                             "on Azure this endpoint needs its key or token)",
              AuthMode.AAD_TOKEN: "auth: aad_token, simulated: a token issued here stands in for "
                                  "a Microsoft Entra token (azml online-endpoint get-credentials "
                                  "-n {name})"}


def start(request: online.ServeRequest) -> int:
    """Add the deployment to its endpoint, or replace it there; 0 once it serves, 1 when its
    server failed (the log's tail shown). SIGTERM, SIGINT or SIGHUP at any step stop what
    this start started and leave endpoint.json as it was."""
    with interruptible():
        try:
            return _start(request)
        except KeyboardInterrupt as err:
            print(f"\nserve-local: stopped by {err or 'SIGINT'}; what this start started was "
                  "stopped", file=sys.stderr)
            raise


def _start(request: online.ServeRequest) -> int:
    deployment = online.load_deployment(request)
    spec = endpoint_spec(request, deployment)
    name = checked_name(deployment.name, "deployment")
    folder = endpoint_folder(spec.name)
    with endpoint_lock(folder, f"serve-local {name}"):
        stop_orphans(folder)
        state = open_state(folder, spec, request.port)
        plan = online.prepare(request, deployment, folder=next_folder(safe_root(folder), name))
        print("\n".join(plan.about), flush=True)
        try:
            slot = online.launch_server(plan)
        except online.ServerFailed as err:
            tail = (plan.task.folder / "log.txt").read_text(errors="replace").splitlines()[-25:]
            print(f"error: {err}\n" + "\n".join(f"  | {line}" for line in tail),
                  file=sys.stderr)
            return 1
        replaced = state.deployments.get(name)
        decided = _enter(state, slot, folder, NewTraffic(request.all_traffic))
        if replaced is not None:
            print(f"replacing deployment {name}'s previous server (pid {replaced.pid}) once it "
                  "has answered what it holds", flush=True)
            with signals_held():
                retire(replaced)
                prune(folder, name, keep=Path(replaced.folder))
    auth = AUTH_NOTES.get(state.auth_mode, f"auth: {state.auth_mode.value} (azml "
                          "online-endpoint get-credentials -n {name})").format(name=spec.name)
    print(f"environment: {slot.environment}\n{decided}\n{auth}"
          f"\nserving {name} in endpoint {spec.name} on http://127.0.0.1:{state.port}/score "
          f"(log {slot.log.resolve()}; stop: azml online-endpoint delete -n {spec.name})")
    return 0


def _enter(state: EndpointState, slot: Slot, folder: Path, choice: NewTraffic) -> str:
    """Put the new server into the endpoint (its front started if it is not running) and
    record it; on any failure or signal, stop what this start started and put endpoint.json
    back as it was. What was decided about its traffic, for the log."""
    before = copy.deepcopy(state)
    try:
        with signals_held():
            state.deployments[slot.name] = slot
            decided = add_deployment(state, slot.name, choice)
            state.write(folder)  # the front starts from it
        ensure_front(state, folder)
        with signals_held():
            state.write(folder)
        return decided
    except BaseException:  # a full disk, a front that did not start, a signal
        with signals_held():
            retire(slot)
            if state.front_pid and not before.front_pid:
                stop_service(state.front_pid, folder / "front")
            with contextlib.suppress(OSError):
                before.write(folder)
        raise


def running_state(folder: Path) -> EndpointState:
    """The endpoint as it runs. Azure's endpoint is always up in front of its deployments:
    where the front is gone (killed) and a deployment's server still runs, it starts again."""
    state = live_state(folder)
    if state is not None and not state.front_pid and state.deployments:
        with endpoint_lock(folder, "starting its front again"):
            state = live_state(folder)  # (another command may have started it meanwhile)
            if state is not None and not state.front_pid and state.deployments:
                print(f"note: endpoint {folder.name}'s front was gone (killed?); its "
                      f"deployments run: started it again on port {state.port}",
                      file=sys.stderr, flush=True)
                ensure_front(state, folder)
                state.write(folder)
    if state is None or not state.front_pid:
        raise LocalRunError(f"local endpoint {folder.name} is not running: {START}")
    return state


def update(name: str | None, *, traffic: str | None, mirror: str | None) -> int:
    """`az ml online-endpoint update --traffic ... --mirror-traffic ...`, locally."""
    state = updated(name, traffic=traffic, mirror=mirror)
    print(f"endpoint {state.name}: {describe(state)}")
    return 0


def updated(name: str | None, *, traffic: str | None, mirror: str | None) -> EndpointState:
    """The endpoint with its traffic and mirror traffic set (None: left as they are)."""
    folder = chosen(name)
    with endpoint_lock(folder, "traffic update"):
        state = running_state(folder)
        if mirror is not None:
            new_mirror = parse(mirror, "mirror_traffic")
            state.mirror_traffic = {}
        if traffic is not None:
            set_traffic(state, parse(traffic, "traffic"))
        if mirror is not None:
            set_mirror(state, new_mirror)
        state.write(folder)
    return state


def credentials(name: str | None) -> int:
    """`az ml online-endpoint get-credentials`, printed as JSON."""
    print(json.dumps(credential_record(name), indent=2))
    return 0


def credential_record(name: str | None) -> dict[str, object]:
    """The keys, or a token (a new one once the last is past its refresh time), with the same
    JSON fields as `az ml online-endpoint get-credentials`."""
    folder = chosen(name)
    with endpoint_lock(folder, "get-credentials"):
        state = running_state(folder)
        if state.auth_mode == AuthMode.NONE:
            raise LocalRunError(f"endpoint {state.name} runs with AUTH=none: it takes no key")
        state.ensure_credentials()
        state.write(folder)
    return dict(state.keys) if state.auth_mode == AuthMode.KEY else asdict(state.tokens[-1])


def regenerate_key(name: str | None, key_type: str) -> None:
    """`az ml online-endpoint regenerate-keys`: a new primary (or secondary) key, effective at
    once (the front reads endpoint.json again when it changes); the other key still opens it.
    azure-ai-ml's refusals, in its words: a type other than primary or secondary, an endpoint
    that does not use keys."""
    if key_type.lower() not in ("primary", "secondary"):
        raise LocalRunError("Key type must be 'primary' or 'secondary'.")
    folder = chosen(name)
    with endpoint_lock(folder, "regenerate-keys"):
        state = running_state(folder)
        if state.auth_mode != AuthMode.KEY:
            raise LocalRunError(f"Endpoint '{state.name}' does not use keys for authentication.")
        state.ensure_credentials()
        state.keys[f"{key_type.lower()}Key"] = secrets.token_urlsafe(24)
        state.write(folder)


def show(name: str | None) -> int:
    """`az ml online-endpoint show`, with each deployment's local server."""
    state = running_state(chosen(name))
    print(json.dumps({
        "name": state.name, "auth_mode": state.auth_mode.value,
        "scoring_uri": f"http://127.0.0.1:{state.port}/score", "provisioning_state": "Succeeded",
        "traffic": state.traffic, "mirror_traffic": state.mirror_traffic,
        "deployments": {n: {"spec": s.spec, "model": s.model, "pid": s.pid,
                            "log": str(s.log.resolve()), "request_timeout_ms": s.timeout_ms,
                            "max_body_bytes": s.max_body, "max_pending": s.max_pending}
                        for n, s in state.deployments.items()}}, indent=2))
    return 0


@dataclass(frozen=True)
class Answer:
    """What the endpoint answered an invoke: the body, and the deployment that answered."""

    body: bytes
    deployment: str


def invoke(request: Path, *, name: str | None = None, deployment: str | None = None) -> int:
    """POST the request file to the endpoint's /score with its key (or token), to the named
    deployment when one is given, as `az ml online-endpoint invoke` does; the answer printed."""
    answer = post(request_body(request), name=name, deployment=deployment)
    try:
        print(json.dumps(json.loads(answer.body), indent=2))
    except ValueError:
        print(answer.body.decode(errors="replace"))
    print(f"answered by deployment {answer.deployment}", file=sys.stderr)
    return 0


def request_body(request: Path) -> bytes:
    """What `az ml online-endpoint invoke --request-file` sends: azure-ai-ml reads the file with
    json.loads (a UTF-8 BOM or UTF-16 is fine) and posts it as `json=`, re-encoded by
    json.dumps, so the scorer sees that text, not the file's bytes; JSON `null` is no body at
    all. A file that is not JSON, or that cannot be read (missing, a folder), is refused before
    anything is sent, as az ml refuses it (azure-ai-ml opens it before any call)."""
    try:
        raw = request.read_bytes()
    except OSError as err:
        raise LocalRunError(f"--request-file {request}: cannot be read ({err.strerror}): "
                            "az ml online-endpoint invoke opens it before sending anything; "
                            "name a JSON file that exists (a relative path is from the folder "
                            "you run in)") from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise LocalRunError(f"{request}: not JSON ({err}): az ml online-endpoint invoke reads "
                            "the request file as JSON and sends it re-encoded; fix the file, "
                            "or send other bytes with curl") from None
    return b"" if data is None else json.dumps(data).encode()


def post(body: bytes, *, name: str | None, deployment: str | None) -> Answer:
    """The endpoint's answer to `body`; a refusal (4xx, 5xx) or no answer is an error naming
    the status and the deployment's reason."""
    folder = chosen(name)
    state = running_state(folder)
    if state.auth_mode not in (AuthMode.KEY, AuthMode.NONE):
        with endpoint_lock(folder, "invoke: token"):  # a fresh token once the last one ages
            state.ensure_credentials()
            state.write(folder)
    headers = {"Content-Type": "application/json"}
    if state.auth_mode != AuthMode.NONE:
        headers["Authorization"] = f"Bearer {state.credential()}"
    if deployment:
        headers["azureml-model-deployment"] = deployment
    call = urllib.request.Request(f"http://127.0.0.1:{state.port}/score", method="POST",
                                  data=body, headers=headers)
    try:
        with urllib.request.urlopen(call, timeout=120) as response:
            return Answer(response.read(), response.headers.get("azureml-model-deployment", "?"))
    except urllib.error.HTTPError as err:
        code = err.headers.get("ms-azureml-model-error-statuscode")
        said = (f" (the deployment answered {code} "
                f"{err.headers.get('ms-azureml-model-error-reason', '')})") if code else ""
        raise Refused(f"HTTP {err.code}: {err.read().decode(errors='replace')}{said}") from None
    except urllib.error.URLError as err:
        raise Refused(f"cannot reach 127.0.0.1:{state.port} ({err.reason})") from None


class Refused(LocalError):
    """The endpoint refused or did not answer a request (az exits 1)."""

    exit_code = 1
