"""Decisions of the blue/green rollout in .github/workflows/deploy.yml, testable offline.

    python scripts/rollout.py steps "10 50 100"        (prints the checked steps)
    make -s endpoint-show | python scripts/rollout.py idle --live blue --candidate green

`steps`: the candidate's traffic percentages, in order: whole numbers from 1 to 100, strictly
rising, ending at 100 (a rollout that stops short would delete a deployment that still serves).
`idle`: reads the endpoint as `az ml online-endpoint show --output json` prints it and exits 0
only when the live deployment gets 0% of the traffic and 0% of the mirrored traffic and the
candidate gets 100%: the one state in which deleting the live deployment cannot drop a request.
Exit codes: 0 yes, 1 no (the reason on stderr), 2 unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys


class RolloutError(ValueError):
    pass


def parse_steps(text: str) -> list[int]:
    words = str(text).split()
    if not words:
        raise RolloutError("no traffic steps given; use e.g. '10 50 100'")
    steps = []
    for word in words:
        if not word.isdigit() or not 1 <= int(word) <= 100:
            raise RolloutError(f"traffic step {word!r} is not a whole percentage from 1 to 100")
        steps.append(int(word))
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        raise RolloutError(f"traffic steps must rise: {' '.join(words)}")
    if steps[-1] != 100:
        raise RolloutError(f"traffic steps must end at 100 (got {' '.join(words)}): the old "
                           "deployment is deleted at the end and must serve nothing by then")
    return steps


def _percent(mapping, name: str) -> int:
    value = (mapping or {}).get(name, 0)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise RolloutError(f"traffic for {name} is not a number: {value!r}") from None


def live_is_idle(endpoint: dict, live: str, candidate: str) -> tuple[bool, str]:
    """Whether `live` can be deleted without dropping or shadowing a request."""
    if not isinstance(endpoint, dict) or "traffic" not in endpoint:
        raise RolloutError("expected the JSON of `az ml online-endpoint show` (no 'traffic')")
    traffic, mirror = endpoint.get("traffic") or {}, endpoint.get("mirror_traffic") or {}
    state = f"traffic {json.dumps(traffic, sort_keys=True)}, mirror {json.dumps(mirror)}"
    if endpoint.get("provisioning_state", "Succeeded") not in ("Succeeded",):
        return False, f"the endpoint is {endpoint.get('provisioning_state')}, not Succeeded"
    if _percent(traffic, live) != 0 or _percent(mirror, live) != 0:
        return False, f"{live} still gets traffic ({state})"
    if _percent(traffic, candidate) != 100:
        return False, f"{candidate} does not get all the traffic ({state})"
    return True, f"{live} is idle and {candidate} serves everything ({state})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    steps = sub.add_parser("steps", help="check the traffic steps")
    steps.add_argument("steps")
    idle = sub.add_parser("idle", help="is the live deployment idle? (endpoint JSON on stdin)")
    idle.add_argument("--live", required=True)
    idle.add_argument("--candidate", required=True)
    args = parser.parse_args(argv)
    try:
        if args.action == "steps":
            print(" ".join(map(str, parse_steps(args.steps))))
            return 0
        ok, reason = live_is_idle(json.load(sys.stdin), args.live, args.candidate)
    except (RolloutError, json.JSONDecodeError) as err:
        print(f"rollout: {err}", file=sys.stderr)
        return 2
    print(f"rollout: {reason}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
