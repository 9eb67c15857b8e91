"""`GangEnvironment`: Lightning's `ClusterEnvironment` for a process that gangrun (or torchrun) started.

Lightning learns the ranks, the node and the main address from a cluster environment. This one
reads them from `gangrun.context()`, that is from the worker environment a gang sets (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``NODE_RANK``, ``NNODES``, ``NPROC_PER_NODE``, ``MASTER_ADDR``,
``MASTER_PORT``) or, outside a gang, from what torchrun set. Every process is created outside
Lightning, so Lightning launches none of its own.
"""

from __future__ import annotations

import logging

from lightning.fabric.plugins.environments.cluster_environment import ClusterEnvironment
from lightning.fabric.plugins.environments.lightning import find_free_network_port

from gangrun._worker.context import Context, context

log = logging.getLogger("gangrun")


class GangEnvironment(ClusterEnvironment):
    """The gang's ranks as Lightning asks for them; read once, when the environment is made."""

    def __init__(self, ctx: Context | None = None) -> None:
        super().__init__()
        self._ctx = ctx if ctx is not None else context()
        self._port: int | None = self._ctx.master_port

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return self._ctx.master_addr or "127.0.0.1"

    @property
    def main_port(self) -> int:
        if self._port is None:  # a process alone (world size 1) has no rendezvous to be told about
            self._port = find_free_network_port()
        return self._port

    @staticmethod
    def detect() -> bool:
        """Whether this process is a gang's worker or one of several that torchrun started."""
        ctx = context()
        return ctx.in_gang or ctx.world_size > 1

    def world_size(self) -> int:
        return self._ctx.world_size

    def set_world_size(self, size: int) -> None:
        # Lightning computes it from devices x num_nodes; validate_settings made sure they agree.
        log.debug("gangrun: Lightning's world size %d ignored; the gang's is %d", size, self._ctx.world_size)

    def global_rank(self) -> int:
        return self._ctx.rank

    def set_global_rank(self, rank: int) -> None:
        log.debug("gangrun: Lightning's global rank %d ignored; the gang's is %d", rank, self._ctx.rank)

    def local_rank(self) -> int:
        return self._ctx.local_rank

    def node_rank(self) -> int:
        return self._ctx.node_rank

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Refuse a Trainer whose `devices` x `num_nodes` is not the gang's shape: it would train with
        ranks that do not match the processes gangrun started."""
        want = (self._ctx.nproc_per_node, self._ctx.nnodes)
        if num_devices * num_nodes != self._ctx.world_size or (num_devices, num_nodes) != want:
            raise ValueError(
                f"Trainer(devices={num_devices}, num_nodes={num_nodes}) does not match the gang: "
                f"{want[1]} node(s) x {want[0]} process(es) = world size {self._ctx.world_size} "
                f"(gangrun.lightning.trainer() sets both from the gang when they are not given)"
            )
