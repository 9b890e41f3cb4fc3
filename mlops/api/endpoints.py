"""Online endpoints and deployments as `az ml online-endpoint` / `online-deployment` know them.

An endpoint is created first (`create -f endpoint.yml`): its spec is recorded in its folder
(`<runs>/endpoints/<name>/created.yml`, with the port its front will listen on) and nothing
starts. A deployment is created into an existing endpoint, as on Azure (its server starts, the
endpoint's front with it; 0 % traffic unless `--all-traffic`). What each verb prints is
azure-ai-ml's own entity of the spec (the `_to_dict()` the az ml extension prints) with what the
service fills in: provisioning state, scoring URI, traffic.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from mlops.api.views import GROUP, resource_id
from mlops.checks.overrides import apply_sets, parse_sets
from mlops.endpoints import endpoint_actions as actions
from mlops.endpoints import online
from mlops.endpoints.endpoint_state import EndpointState
from mlops.endpoints.endpoint_stop import stop
from mlops.endpoints.local_endpoint import (
    ENDPOINTS,
    checked_name,
    endpoint_folder,
    endpoint_lock,
    live_state,
    retire,
)
from mlops.errors import LocalRunError, MachineError, NotFound
from mlops.runtime import DebugRequest, free_port
from mlops.specs import load_spec

CREATED = "created.yml"  # the endpoint spec as created, and its port
View = dict[str, object]


def _created(name: str) -> Path:
    path = endpoint_folder(name) / CREATED
    if not path.is_file():
        raise NotFound(f"online endpoint {name!r} was not found here: azml online-endpoint "
                       "create -f <endpoint spec> creates it")
    return path


@dataclass(frozen=True)
class Created:
    """An endpoint as created: its spec, the port its front listens on, its auth (local:
    "none" serves without one, as `az ml ... --local`)."""

    spec: dict[str, object]
    port: int
    auth: str = ""


def _record(name: str) -> Created:
    data = yaml.safe_load(_created(name).read_text(encoding="utf-8")) or {}
    return Created(data["spec"], int(data["port"]), str(data.get("auth") or ""))


SCHEMAS = "https://azuremlschemas.azureedge.net/latest/"


def create_endpoint(spec: Path | None, *, name: str | None = None, port: int | None = None,
                    auth: str = "", sets: tuple[str, ...] = ()) -> View:
    """`az ml online-endpoint create -f [--set k=v]` (or `--name` alone: azure-ai-ml's
    defaults, a managed endpoint with key auth): recorded; an existing endpoint's spec is
    updated (its port and running deployments are kept), as create_or_update does. Local
    only: `port` (else a free one), `auth` "none"."""
    if spec is None and not name:
        raise LocalRunError("online-endpoint create: give --file <endpoint spec> or --name")
    where = spec if spec is not None else Path(f"online-endpoint {name}")
    overrides = parse_sets(list(sets), where)
    data = apply_sets(dict(load_spec(spec).data) if spec is not None else {}, overrides, where)
    endpoint = checked_name(str(name or data.get("name") or ""), "endpoint")
    data["name"] = endpoint
    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)
    from azure.ai.ml import load_online_endpoint

    try:
        loaded = load_online_endpoint(source=spec,
                                      params_override=[*overrides, {"name": endpoint}])
    except Exception as err:  # noqa: BLE001 - azure-ai-ml's refusal, in its words
        raise LocalRunError(f"{spec or 'online-endpoint create'}: {err}") from None
    if not data.get("$schema"):  # optional in a spec: the kind azure-ai-ml loaded it as
        kind = type(loaded).__name__  # ManagedOnlineEndpoint or KubernetesOnlineEndpoint
        data["$schema"] = f"{SCHEMAS}{kind[0].lower()}{kind[1:]}.schema.json"
    folder = endpoint_folder(endpoint)
    with endpoint_lock(folder, "online-endpoint create"):
        state = live_state(folder)
        if state is not None and state.front_pid:
            port = state.port  # it serves there: kept
        elif port is None:
            port = _record(endpoint).port if (folder / CREATED).is_file() else free_port()
        source = str(spec.resolve()) if spec is not None else ""
        (folder / CREATED).write_text(yaml.safe_dump({"spec": data, "port": port, "auth": auth,
                                                      "source": source}))
    return endpoint_view(endpoint)


def endpoint_view(name: str) -> View:
    """The endpoint as `az ml online-endpoint show` prints it."""
    from azure.ai.ml import load_online_endpoint

    created = _record(name)
    data, port = created.spec, created.port
    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)
    entity = load_online_endpoint(source=_spec_file(name, data), params_override=[])
    state = live_state(endpoint_folder(name))
    entity.traffic = dict(state.traffic) if state else {}
    entity.mirror_traffic = dict(state.mirror_traffic) if state else {}
    view = entity._to_dict()  # noqa: SLF001 - what az ml prints
    view.update(id=resource_id("onlineEndpoints", name), provisioning_state="Succeeded",
                scoring_uri=f"http://127.0.0.1:{port}/score",
                openapi_uri=f"http://127.0.0.1:{port}/swagger.json", resourceGroup=GROUP)
    view.setdefault("auth_mode", str(data.get("auth_mode") or "key"))
    return view


def _spec_file(name: str, data: dict[str, object]) -> Path:
    """The recorded spec as a file azure-ai-ml loads (beside the record)."""
    path = endpoint_folder(name) / "endpoint.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def endpoints() -> list[View]:
    """`az ml online-endpoint list`: every endpoint created here."""
    found = sorted(ENDPOINTS.glob(f"*/{CREATED}")) if ENDPOINTS.is_dir() else []
    return [endpoint_view(path.parent.name) for path in found]


def delete_endpoint(name: str) -> None:
    """`az ml online-endpoint delete`: every deployment stopped, the endpoint forgotten (its run
    folders kept, with their logs)."""
    created = _created(name)
    with contextlib.redirect_stdout(sys.stderr):
        stop(name)
    created.unlink(missing_ok=True)


@dataclass(frozen=True, kw_only=True)
class DeploymentRequest:
    """`az ml online-deployment create -f <spec> [--endpoint-name] [--all-traffic]`, and what a
    local run adds: the traffic rule (`auto`: all of it when no deployment takes any yet, what
    make serve-local asks), a model folder to serve instead of the spec's, a debugger."""

    spec: Path | None  # None: update the running deployment --name from what it was made of
    endpoint: str | None = None
    traffic: str = "0"  # "1": --all-traffic; "auto"
    model: str | None = None
    debug: DebugRequest | None = None
    name: str | None = None  # --name: over the spec's
    sets: tuple[str, ...] = ()  # --set KEY=VALUE, applied before --name and --endpoint-name


def create_deployment(request: DeploymentRequest) -> View:
    """`az ml online-deployment create|update -f [--set k=v] [--name] [--endpoint-name]`, as the
    ml extension loads it (--set, then --name, then --endpoint-name over the spec): into an
    endpoint that exists (else Azure's not-found); its server started, then its view. No
    spec: az's generic update of a running deployment, --set over the spec and sets it was
    made of."""
    spec, before = (request.spec, ()) if request.spec is not None else _made_of(request)
    sets = [*before, *request.sets, *([f"name={request.name}"] if request.name else []),
            *([f"endpoint_name={request.endpoint}"] if request.endpoint else [])]
    data = apply_sets(load_spec(spec).data, parse_sets(sets, spec), spec)
    name = str(data.get("endpoint_name") or "")
    if not name:
        raise LocalRunError(f"{spec}: no endpoint_name: give --endpoint-name")
    created = _record(name)
    serve = online.ServeRequest(deployment=spec, port=created.port, auth=created.auth,
                                endpoint=_spec_file(name, created.spec),
                                all_traffic=request.traffic, model=request.model,
                                debug=request.debug, sets=tuple(sets))
    with contextlib.redirect_stdout(sys.stderr):  # its progress: stdout is the JSON's
        code = actions.start(serve)
    if code != 0:
        raise MachineError(f"deployment {data.get('name')} of {name} did not start (its log is "
                           "named above); azml online-deployment get-logs shows it")
    return deployment_view(name, str(data.get("name")))


def _made_of(request: DeploymentRequest) -> tuple[Path, tuple[str, ...]]:
    if not request.name or not request.endpoint:
        raise LocalRunError("online-deployment update without --file: give --name and "
                            "--endpoint-name (the deployment to update)")
    slot = _state(request.endpoint).deployments.get(request.name)
    if slot is None:
        raise NotFound(f"deployment {request.name!r} is not running in online endpoint "
                       f"{request.endpoint}")
    return Path(slot.spec), tuple(slot.sets)


def _state(endpoint: str) -> EndpointState:
    _created(endpoint)
    state = live_state(endpoint_folder(endpoint))
    if state is None:
        raise NotFound(f"online endpoint {endpoint} has no deployment running")
    return state


def deployment_view(endpoint: str, name: str) -> View:
    """The deployment as `az ml online-deployment show` prints it."""
    from azure.ai.ml import load_online_deployment

    slot = _state(endpoint).deployments.get(name)
    if slot is None:
        raise NotFound(f"deployment {name!r} is not running in online endpoint {endpoint}")
    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)
    try:
        overrides = [*parse_sets(slot.sets, Path(slot.spec)), {"name": name},
                     {"endpoint_name": endpoint}]
        view = load_online_deployment(source=slot.spec,
                                      params_override=overrides)._to_dict()  # noqa: SLF001
    except Exception:  # noqa: BLE001 - the spec moved since: what the slot records
        view = {"name": name, "endpoint_name": endpoint, "model": slot.model}
    view.update(id=resource_id(f"onlineEndpoints/{endpoint}/deployments", name),
                provisioning_state="Succeeded", resourceGroup=GROUP)
    return view


def deployments(endpoint: str) -> list[View]:
    return [deployment_view(endpoint, n) for n in sorted(_state(endpoint).deployments)]


def deployment_logs(endpoint: str, name: str, lines: int | None) -> str:
    """`az ml online-deployment get-logs`: the server's log, its last `lines` lines."""
    slot = _state(endpoint).deployments.get(name)
    if slot is None:
        raise NotFound(f"deployment {name!r} is not running in online endpoint {endpoint}")
    text = slot.log.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:] if lines else text)


def delete_deployment(endpoint: str, name: str) -> None:
    """`az ml online-deployment delete`: its server stopped (what it holds answered first),
    and its traffic and mirror traffic taken out of the endpoint."""
    folder = endpoint_folder(endpoint)
    with endpoint_lock(folder, f"online-deployment delete {name}"):
        state = _state(endpoint)
        slot = state.deployments.pop(name, None)
        if slot is None:
            raise NotFound(f"deployment {name!r} is not running in online endpoint {endpoint}")
        state.traffic.pop(name, None)
        state.mirror_traffic.pop(name, None)
        state.write(folder)
        retire(slot)


def update_endpoint(name: str, sets: tuple[str, ...]) -> View:
    """`az ml online-endpoint update -n N --set k=v`: az's generic update, over the endpoint
    as recorded."""
    created = _record(name)
    return create_endpoint(_spec_file(name, created.spec), name=name, auth=created.auth,
                           sets=sets)


def update_traffic(endpoint: str, *, traffic: str | None, mirror: str | None) -> View:
    _created(endpoint)
    actions.updated(endpoint, traffic=traffic, mirror=mirror)
    return endpoint_view(endpoint)


def invoke(endpoint: str, request: Path, deployment: str | None) -> str:
    """`az ml online-endpoint invoke`: the answer's text (az prints it as a JSON string)."""
    _created(endpoint)
    return actions.post(actions.request_body(request), name=endpoint,
                        deployment=deployment).body.decode(errors="replace")


def regenerate_keys(endpoint: str, key_type: str) -> None:
    _created(endpoint)
    actions.regenerate_key(endpoint, key_type)


def credentials(endpoint: str) -> dict[str, object]:
    _created(endpoint)
    return json.loads(json.dumps(actions.credential_record(endpoint)))
