"""More than one real node on this one host: the first (realnode.py) and the nodes that join it.

A joined node has its own everything that one host can keep apart: containerd (root, state, socket),
the kubelet (root folder, ports, node name ``gangrun-node-N``), the pods' bridge ``gangrun<N-1>`` and
subnet 10.250.<N-1>.0/24, the bridge's gateway as its node IP (where its kubelet listens and the API
server reaches it), and the cgroup ``/gangrun-node-N`` its kubelet puts the pods under, so that the two
kubelets' ``kubepods`` hierarchies do not collide. It carries the first node's label and taint, so
:func:`realnode.placement` selects either. It shares the first node's CoreDNS (its pods' cluster DNS is
the first gateway) and the first node's record of the host: it adds itself to the record when it
starts, so the first node's stop (or ``clean_leftovers`` after a SIGKILL) removes it too, and takes
itself out again when it stops on its own. Pods on one bridge reach pods on another, and CoreDNS,
through the host, which holds every gateway: the host's connected routes are all the routing needed
(on separate machines each node would need a route to every other node's pod subnet).

Usage as a program (the SIGKILL test of test_realnode_host.py): ``python -m tests.harness.realnodes COUNT KUBECONFIG
WORKDIR [IMAGE.tar...]`` starts COUNT nodes, prints ``ready`` and runs until killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness import realnode
from tests.harness.binaries import Binaries
from tests.harness.client import Kube

RECORD = realnode.RECORD_DIR / "record.json"


def node_net(index: int) -> realnode.NodeNet:
    """The name, network and cgroup of the `index`-th node on this host (1: the first, realnode's own)."""
    if index == 1:
        return realnode.NodeNet()
    name = f"{realnode.NODE_NAME}-{index}"
    return realnode.NodeNet(name=name, bridge=f"gangrun{index - 1}", subnet=f"10.250.{index - 1}.0/24",
                            gateway=f"10.250.{index - 1}.1", cgroup_root=f"/{name}")


@dataclass
class JoinedNode(realnode.RealNode):
    """A further real node beside `first` (started), with the identity `net` gives it (:func:`node_net`)."""

    first: realnode.RealNode = field(kw_only=True)

    @property
    def dns(self) -> str:
        """The first node's CoreDNS: one for the whole cluster, as a cluster's DNS Service would be."""
        return self.first.dns

    def _record(self) -> None:
        """Join the first node's record (what its stop and a clean-up after a SIGKILL remove), then make the
        cgroup the kubelet puts the pods under: the kubelet refuses a ``cgroupRoot`` that does not exist."""
        record = json.loads(RECORD.read_text())  # the first node wrote it when it started
        record.setdefault("others", []).append({
            "workdir": str(self.workdir), "keep_workdir": self.keep_workdir, "bridge": self.net.bridge,
            "cgroups": list(self.net.cgroups)})
        _write_record(record)
        for root in realnode._cgroup_roots():
            top = root / self.net.cgroup_root.strip("/")
            top.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):  # an empty cpuset admits no process
                if (root / name).exists() and not (top / name).read_text().strip():
                    (top / name).write_text((root / name).read_text())

    def _start_coredns(self) -> None:
        """None of its own: the first node's serves the pods of every node."""

    def stop(self) -> None:
        """Stop this node alone and undo what it changed by itself (its processes, mounts, bridge, cgroups and
        folder); what the nodes changed together goes with the first node. Its Node object goes too: no lone
        node takes its name again, and the scheduler must not pick a node that is gone."""
        self._stop_components()
        with contextlib.suppress(Exception):  # the API server may be gone already
            Kube(self.kubeconfig).delete("Node", self.net.name)
        with contextlib.suppress(FileNotFoundError):
            record = json.loads(RECORD.read_text())
            others = record.get("others", [])
            mine = [n for n in others if n["workdir"] == str(self.workdir)]
            record["others"] = [n for n in others if n not in mine]
            _write_record(record)
            for n in mine:
                realnode.clean_node(n)


def _write_record(record: dict) -> None:
    """Replace the record in one step, so that a SIGKILL never leaves half of it."""
    tmp = RECORD.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, RECORD)


def start_nodes(binaries: Binaries, kubeconfig: Path, workdir: Path, images: list[Path], count: int, *,
                keep_workdir: bool = False, exclusive: bool = True) -> list[realnode.RealNode]:
    """`count` real nodes on this host: the first in `workdir`, node N in ``<workdir>-N`` beside it (the other
    arguments as RealNode's, the same for every node). Started one after another; on a failure the ones
    started are stopped again."""
    nodes = [realnode.RealNode(binaries, kubeconfig, workdir, images, keep_workdir, exclusive)]
    try:
        nodes[0].start()
        for i in range(2, count + 1):
            nodes.append(JoinedNode(binaries, kubeconfig, workdir.with_name(f"{workdir.name}-{i}"), images,
                                    keep_workdir, exclusive, net=node_net(i), first=nodes[0]))
            nodes[-1].start()
    except BaseException:
        stop_nodes(nodes)
        raise
    return nodes


def stop_nodes(nodes: list[realnode.RealNode]) -> None:
    """Stop the nodes, the joined ones first, and leave the host as it was before the first started."""
    for node in reversed(nodes):
        node.stop()


if __name__ == "__main__":
    from tests.harness.binaries import locate_binaries

    started = start_nodes(locate_binaries(), Path(sys.argv[2]), Path(sys.argv[3]), [Path(p) for p in sys.argv[4:]],
                          int(sys.argv[1]))
    print("ready", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(1)
            for n in started:
                n.check_alive()
    finally:
        stop_nodes(started)
