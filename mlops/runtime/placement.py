"""Where a task's processes go: how many, and what each is told, as Azure's launchers tell them.

Azure runs the command once per process: `distribution: pytorch` sets RANK, LOCAL_RANK,
WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT in each; `mpi` sets Open MPI's OMPI_COMM_WORLD_*
variables; `tensorflow` sets TF_CONFIG. Here every node is simulated on this machine
(instance_count x processes per node, capped by --max-procs with a notice), and each simulated
node gets its own GPUs (devices.py).
"""

from __future__ import annotations

import json
import shlex
import shutil
from dataclasses import dataclass
from typing import NamedTuple

from mlops.errors import LocalRunError
from mlops.runtime import devices
from mlops.runtime.launch import LOCALHOST, free_port
from mlops.specs import SpecData

KINDS = ("pytorch", "mpi", "tensorflow")


def _count(value, key: str, where: str, default: int | None) -> int | None:
    if value in (None, ""):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise LocalRunError(f"{where}.{key}: {value!r} is not a whole number") from None


@dataclass(frozen=True, kw_only=True)
class Distribution:
    """A spec's `distribution:`."""

    type: str
    process_count_per_instance: int = 1
    worker_count: int | None = None  # tensorflow
    parameter_server_count: int = 0  # tensorflow

    @classmethod
    def from_spec(cls, data, where: str) -> Distribution | None:
        if not isinstance(data, dict) or not data.get("type"):
            return None
        where = f"{where}.distribution"
        return cls(type=str(data["type"]).lower(),
                   process_count_per_instance=_count(data.get("process_count_per_instance"),
                                                     "process_count_per_instance", where, 1),
                   worker_count=_count(data.get("worker_count"), "worker_count", where, None),
                   parameter_server_count=_count(data.get("parameter_server_count"),
                                                 "parameter_server_count", where, 0))


@dataclass(frozen=True)
class Placement:
    """How many processes a task runs: a distribution over `instance_count` simulated nodes, or
    `copies` identical processes with no distribution (a mini-batch driver's workers)."""

    distribution: Distribution | None = None
    instance_count: int = 1
    copies: int = 1

    @classmethod
    def from_spec(cls, data: SpecData, where: str) -> Placement:
        resources = data.get("resources") if isinstance(data.get("resources"), dict) else {}
        nodes = _count(resources.get("instance_count"), "instance_count", f"{where}.resources", 1)
        return cls(Distribution.from_spec(data.get("distribution"), where), max(1, nodes))


class Layout(NamedTuple):
    nodes: int
    per_node: int
    notice: str  # "" unless the cluster was scaled down


class Overlays(NamedTuple):
    """One environment overlay per process, and a notice ("" when none is due)."""

    envs: list[dict[str, str]]
    notice: str


class Wrapped(NamedTuple):
    command: str
    envs: list[dict[str, str]]


def layout(distribution: Distribution, nodes: int, max_procs: int) -> Layout:
    """Nodes and processes per node for the simulated cluster."""
    nodes = max(1, nodes)
    if distribution.type == "tensorflow":
        total = (distribution.worker_count or nodes) + distribution.parameter_server_count
        per = max(1, -(-total // nodes))
    else:
        per = max(1, distribution.process_count_per_instance)
    wanted = nodes * per if distribution.type != "tensorflow" else total
    if wanted <= max_procs:
        return Layout(nodes, per, "")
    nodes = min(nodes, max_procs)
    per = max(1, max_procs // nodes)
    return Layout(nodes, per, f"note: {wanted} processes requested, running {nodes * per} on "
                              f"this machine (--max-procs {max_procs})")


def rank_envs(placement: Placement, max_procs: int) -> Overlays:
    """One overlay per process; raises ValueError for a distribution type Azure does not know."""
    distribution = placement.distribution
    if distribution is None:
        return Overlays([{} for _ in range(max(1, placement.copies))], "")
    nodes, per, notice = layout(distribution, placement.instance_count, max_procs)
    world = nodes * per
    if distribution.type == "pytorch":
        port = str(free_port())
        return Overlays([{"RANK": str(r), "LOCAL_RANK": str(r % per), "WORLD_SIZE": str(world),
                          "NODE_RANK": str(r // per), "MASTER_ADDR": LOCALHOST,
                          "MASTER_PORT": port} for r in range(world)], notice)
    if distribution.type == "mpi":
        port = str(free_port())
        return Overlays([{"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(world),
                          "OMPI_COMM_WORLD_LOCAL_RANK": str(r % per),
                          "OMPI_COMM_WORLD_LOCAL_SIZE": str(per),
                          "OMPI_COMM_WORLD_NODE_RANK": str(r // per),
                          "AZ_BATCHAI_MPI_MASTER_NODE": LOCALHOST,
                          "AZ_BATCH_MASTER_NODE": f"{LOCALHOST}:{port}"}
                         for r in range(world)], notice)
    if distribution.type == "tensorflow":
        return Overlays(_tf_envs(distribution, world), notice)
    raise ValueError(f"distribution.type {distribution.type}: Azure knows {', '.join(KINDS)}")


def with_gpus(placement: Placement, overlays: Overlays) -> Overlays:
    """A distributed task's simulated nodes each see their own GPUs (devices.py)."""
    if placement.distribution is None:
        return overlays
    envs, gpu_notice = devices.assign(overlays.envs, devices.visible_gpus())
    return Overlays(envs, "\n".join(filter(None, (overlays.notice, gpu_notice))))


def under_mpirun(command: str, overlays: list[dict[str, str]],
                 distribution: Distribution | None, env: dict[str, str]) -> Wrapped:
    """`distribution: mpi` in an environment that has an MPI (an mpirun on its PATH): one
    mpirun starts every process, as on Azure, so MPI.COMM_WORLD spans them. Without one, each
    process gets Open MPI's OMPI_COMM_WORLD_* variables alone (rank_envs)."""
    if distribution is None or distribution.type != "mpi":
        return Wrapped(command, overlays)
    mpirun = shutil.which("mpirun", path=env.get("PATH"))
    if not mpirun:
        return Wrapped(command, overlays)
    # every simulated node is this machine: mpirun sees one node holding every process
    wrapped = f"{mpirun} -n {len(overlays)} --oversubscribe --bind-to none bash -c " \
        f"{shlex.quote(command)}"
    return Wrapped(wrapped, [{"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                              "AZ_BATCHAI_MPI_MASTER_NODE": LOCALHOST}])


def _tf_envs(distribution: Distribution, world: int) -> list[dict[str, str]]:
    servers = min(distribution.parameter_server_count, max(0, world - 1))
    roles = [("worker", i) for i in range(world - servers)] + [("ps", i) for i in range(servers)]
    addresses: dict[str, list[str]] = {"worker": [], "ps": []}
    for role, _ in roles:
        addresses[role].append(f"{LOCALHOST}:{free_port()}")
    cluster = {k: v for k, v in addresses.items() if v}
    return [{"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": role, "index": i},
                                      "environment": "cloud"})} for role, i in roles]
