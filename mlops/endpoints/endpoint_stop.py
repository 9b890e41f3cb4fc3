"""Which local endpoints run, and stopping them (make stop-local): every server of an endpoint,
found from endpoint.json and from its run folders (and, where /proc tells, the processes
themselves), so a removed or damaged endpoint.json stops them too. Signals wait until a stop
is done.
"""

from __future__ import annotations

import contextlib
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mlops.endpoints.endpoint_state import STATE_FILE, EndpointState
from mlops.endpoints.local_endpoint import (
    endpoint_folder,
    endpoint_folders,
    endpoint_lock,
    grace,
    live_state,
    read_state,
    retire,
    running_servers,
)
from mlops.errors import LocalRunError
from mlops.runtime import alive, interruptible, signals_held, stop_service

# how a user starts one again: azml in any repository, its make target in this one
START = ("start it with azml online-deployment create -f <deployment.yml> "
         "(make serve-local in this repository)")


def running_endpoints(*, partly: bool = False) -> list[Path]:
    """The local endpoints whose front runs (partly: or any server they started, found from
    endpoint.json or, when it is gone or damaged, from their run folders)."""
    found = []
    for folder in endpoint_folders():
        try:
            state = read_state(folder)
        except LocalRunError:
            if not partly:
                raise
            state = None
        pids = [state.front_pid] if state else []
        if partly:
            pids += [s.pid for s in state.deployments.values()] if state else []
            pids += list(running_servers(folder))
        if any(alive(pid) for pid in pids):
            found.append(folder)
    return found


def chosen(name: str | None) -> Path:
    """The endpoint asked for, or the one that runs when none is named."""
    if name:
        return endpoint_folder(name)
    running = running_endpoints()
    if len(running) == 1:
        return running[0]
    if not running:
        raise LocalRunError(f"no local endpoint is running: {START}")
    raise LocalRunError(f"{len(running)} local endpoints run ("
                        f"{', '.join(f.name for f in running)}): name one, ENDPOINT=<name>")


def stop(name: str | None = None) -> int:
    """Stop the front (it answers what it accepted first), then every deployment's server;
    with no name, every local endpoint that runs. Servers are found from endpoint.json and
    from the endpoint's run folders, so a damaged or missing endpoint.json stops them too."""
    folders = [chosen(name)] if name else running_endpoints(partly=True)
    if not folders:
        print("no local endpoint running")
    for folder in folders:
        with interruptible(), endpoint_lock(folder, "stop-local"), signals_held():
            stopped = _stop_endpoint(folder)
        print(f"stopped local endpoint {folder.name}: {', '.join(stopped) or 'no deployment'}")
    return 0


def _stop_endpoint(folder: Path) -> list[str]:
    try:
        state, damaged = live_state(folder), False
    except LocalRunError as err:
        print(f"note: {err}", file=sys.stderr)
        state, damaged = None, True
    found = running_servers(folder)
    state = state or EndpointState(name=folder.name)
    front = state.front_pid or next((pid for pid, run in found.items() if run.name == "front"),
                                    0)
    if front:
        drain = max((grace(s) for s in state.deployments.values()), default=5) + 10
        stop_service(front, folder / "front", grace=drain)
    slots = {s.pid: s for s in state.deployments.values()}
    strays = {pid: run for pid, run in found.items() if pid not in slots and pid != front}
    with ThreadPoolExecutor(max(len(slots) + len(strays), 1)) as pool:  # all at once
        stopping = [pool.submit(retire, slot) for slot in slots.values()]
        stopping += [pool.submit(stop_service, pid, run, 10) for pid, run in strays.items()]
        for done in stopping:
            done.result()
    stopped = [f"{n} (pid {s.pid})" for n, s in state.deployments.items()]
    stopped += [f"{run.name} (pid {pid}, found in its run folder)" for pid, run in strays.items()
                if run.name != "front"]
    if damaged:
        aside = folder / f"{STATE_FILE}.damaged"
        with contextlib.suppress(FileNotFoundError):
            os.replace(folder / STATE_FILE, aside)
            print(f"note: the damaged state is kept as {aside}", file=sys.stderr)
    elif (folder / STATE_FILE).exists():
        state.front_pid, state.deployments = 0, {}
        state.traffic, state.mirror_traffic = {}, {}
        state.write(folder)
    return stopped


def stop_orphans(folder: Path) -> None:
    """Stop the servers of the endpoint that run but that endpoint.json does not name: a start
    killed (SIGKILL) before it recorded them, or an endpoint.json removed by hand."""
    state = live_state(folder)
    named = {state.front_pid, *(s.pid for s in state.deployments.values())} if state else set()
    for pid, run in running_servers(folder).items():
        if pid not in named:
            print(f"note: {run.name}'s server (pid {pid}) runs but endpoint.json does not name "
                  "it: stopping it", file=sys.stderr, flush=True)
            with signals_held():
                stop_service(pid, run, grace=10)
