"""An online endpoint's traffic and mirror traffic, with the rules Azure's docs give for them:

- traffic: a whole percentage for each deployment of the endpoint; together 100 (or 0: then
  only requests that name a deployment with the azureml-model-deployment header are served);
- mirror_traffic: copies of live requests to one deployment at most, at most 50 %, and never to
  a deployment that takes live traffic (a deployment takes live or mirrored traffic, not both);
  requests that name a deployment by header are not mirrored.

Written as the CLI takes them: `blue=90 green=10` (commas work too). A deployment the new
traffic does not name gets 0.
"""

from __future__ import annotations

from enum import StrEnum

from mlops.endpoints.endpoint_state import EndpointState
from mlops.errors import LocalRunError

MAX_MIRROR = 50


def parse(text: str, what: str) -> dict[str, int]:
    """`blue=90 green=10` as {"blue": 90, "green": 10}."""
    weights: dict[str, int] = {}
    for part in text.replace(",", " ").split():
        name, sep, value = part.partition("=")
        try:
            percent = int(value)
        except ValueError:
            percent = -1
        if not sep or not name or not 0 <= percent <= 100:
            raise LocalRunError(f"{what}: {part!r} is not <deployment>=<whole percentage 0-100> "
                                f"(as `--{what.replace('_', '-')} \"blue=90 green=10\"`)")
        weights[name] = percent
    return weights


def _unknown(state: EndpointState, weights: dict[str, int], what: str) -> None:
    missing = sorted(set(weights) - set(state.deployments))
    if missing:
        have = ", ".join(sorted(state.deployments)) or "none yet"
        raise LocalRunError(f"{what}: endpoint {state.name} has no deployment "
                            f"{', '.join(missing)} (its deployments: {have}); Azure refuses "
                            "traffic for a deployment the endpoint does not have")


def set_traffic(state: EndpointState, weights: dict[str, int]) -> None:
    _unknown(state, weights, "traffic")
    total = sum(weights.values())
    if total not in (0, 100):
        raise LocalRunError(f"traffic: {weights} adds up to {total}; an endpoint's traffic "
                            "adds up to 100 (or 0), as Azure requires")
    clash = sorted(n for n, p in weights.items() if p and state.mirror_traffic.get(n))
    if clash:
        raise LocalRunError(f"traffic: {', '.join(clash)} receives mirrored traffic; a "
                            "deployment takes live or mirrored traffic, not both (set its "
                            "mirror traffic to 0 first)")
    state.traffic = {name: weights.get(name, 0) for name in state.deployments}


def set_mirror(state: EndpointState, weights: dict[str, int]) -> None:
    _unknown(state, weights, "mirror_traffic")
    mirrored = {n: p for n, p in weights.items() if p}
    if len(mirrored) > 1:
        raise LocalRunError(f"mirror_traffic: {mirrored} mirrors to {len(mirrored)} "
                            "deployments; an endpoint mirrors to one deployment at most")
    for name, percent in mirrored.items():
        if percent > MAX_MIRROR:
            raise LocalRunError(f"mirror_traffic: {name}={percent}; an endpoint mirrors at most "
                                f"{MAX_MIRROR} % of its traffic")
        if state.traffic.get(name):
            raise LocalRunError(f"mirror_traffic: {name} takes {state.traffic[name]} % of live "
                                "traffic; a deployment takes live or mirrored traffic, not both")
    state.mirror_traffic = mirrored


class NewTraffic(StrEnum):
    """What a new deployment gets (ALL_TRAFFIC=): all of it (`--all-traffic`), none (Azure's
    default without the flag), or AUTO: all of it when no deployment takes live traffic yet (as
    the repository's deploy-blue creates the first one), else none."""

    ALL = "1"
    NONE = "0"
    AUTO = "auto"


def add_deployment(state: EndpointState, name: str, choice: NewTraffic) -> str:
    """Set a new (or updated) deployment's traffic; what was decided, for the log."""
    others_live = any(state.traffic.get(n) for n in state.deployments if n != name)
    if choice == NewTraffic.ALL or (choice == NewTraffic.AUTO and not others_live):
        state.mirror_traffic.pop(name, None)
        state.traffic = {n: 100 if n == name else 0 for n in state.deployments}
        reason = ("--all-traffic" if choice == NewTraffic.ALL else
                  "no deployment took live traffic: as --all-traffic, ALL_TRAFFIC=0 to keep 0")
        return f"traffic: {name}=100 ({reason})"
    state.traffic = {n: state.traffic.get(n, 0) for n in state.deployments}
    if not others_live and not state.traffic[name]:
        return (f"traffic: {name}=0 (ALL_TRAFFIC=0); requests are answered 404 until a "
                "deployment takes traffic (make shift-local) or name it by header")
    return (f"traffic: {name}={state.traffic[name]} (a new deployment takes no traffic until "
            "it is given some: make shift-local; call it directly: make invoke-green-local)")


def describe(state: EndpointState) -> str:
    live = " ".join(f"{n}={p}" for n, p in state.traffic.items()) or "none"
    mirror = " ".join(f"{n}={p}" for n, p in state.mirror_traffic.items()) or "none"
    return f"traffic {live}; mirror {mirror}"
