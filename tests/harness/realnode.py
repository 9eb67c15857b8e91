"""A real Kubernetes node beside the control plane: containerd, the kubelet and CoreDNS as host processes.

It needs root, Debian's ``containerd``, ``runc``, ``containernetworking-plugins`` and ``iptables``,
the kubelet and CoreDNS from ``hack/build-control-plane.sh`` and the images from
``hack/build-images.sh`` (imported into the node's own containerd when it starts).

The node registers as :data:`NODE_NAME` with the label ``gangrun.dev/node=real`` and the taint
:data:`TAINT` (``NoSchedule``): the kwok nodes' pods never land on it, and a test that wants real
containers adds :func:`placement` to its pod template. Pods get a bridge network
(:data:`POD_SUBNET`); CoreDNS (the ``kubernetes`` plugin against the API server) listens on the
bridge's gateway address and is the pods' cluster DNS, so JobSet's pod hostnames
(``<jobset>-<job>-<i>-<j>.<subdomain>``) resolve. In-cluster API clients (the gangrun controller)
run with ``hostNetwork`` and reach the API server on loopback: see :func:`api_server_env`.

The host is left as it was: :meth:`RealNode.stop` removes what containerd, the kubelet and the CNI
plugins changed (processes, mounts, network namespaces, the bridge and its veths, the iptables chains
they made, ``net.ipv4.ip_forward``, cgroups, files under ``/var/lib`` and ``/run``), and
:meth:`RealNode.start` first does the same for a run that was SIGKILLed, from the record it keeps in
:data:`RECORD_DIR`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.harness.binaries import REPO_ROOT, Binaries
from tests.harness.client import Kube, has_condition
from tests.harness.processes import Component, ControlPlaneError, end, free_port, respawn, spawn

NODE_NAME = "gangrun-node"
NODE_LABEL = ("gangrun.dev/node", "real")
TAINT = {"key": "gangrun.dev/real-node", "value": "true", "effect": "NoSchedule"}
BRIDGE = "gangrun0"
POD_SUBNET = "10.250.0.0/24"
GATEWAY = "10.250.0.1"
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "localhost/pause:gangrun"
IMAGE = "localhost/gangrun:dev"
FLYTE_IMAGE = "localhost/gangrun-flyte:dev"  # the same Dockerfile with the flyte extra (build-images.sh --flyte)
DEBIAN_PACKAGES = ("containerd", "runc", "containernetworking-plugins", "iptables", "nftables")
IMAGES_SCRIPT = REPO_ROOT / "hack" / "build-images.sh"

# What survives a SIGKILLed run is found from here: the record of the host before the node started.
RECORD_DIR = Path("/run/gangrun-node")
# Paths that containerd, the kubelet or the CNI plugins make whatever their configuration says;
# removed on stop when they were not there before.
HOST_PATHS = ("/var/lib/kubelet", "/run/containerd", "/opt/containerd", "/var/lib/cni", "/var/log/containers",
              "/var/log/pods", "/run/netns", "/etc/cni")
CGROUP_NAMES = ("kubepods", "kubepods.slice", "k8s.io")
# Chains the kubelet, kube-proxy and the CNI plugins make.
OWNED_CHAIN = re.compile(r"^(KUBE-|CNI-)")


class NodeSetupError(RuntimeError):
    """A piece the real node needs is missing (a package, the binaries, the images, root)."""


@dataclass(frozen=True)
class NodeNet:
    """What sets one real node apart from another on this host (realnodes.py starts more than one): its
    name, its pods' bridge, subnet and gateway (also the node's IP, where its kubelet listens), and the
    cgroup its kubelet puts the pods under (``/``: the top level, as a lone node has it)."""

    name: str = NODE_NAME
    bridge: str = BRIDGE
    subnet: str = POD_SUBNET
    gateway: str = GATEWAY
    cgroup_root: str = "/"

    @property
    def cgroups(self) -> tuple[str, ...]:
        """The top-level cgroups of this node's kubelet and containerd, removed when it stops."""
        return CGROUP_NAMES if self.cgroup_root == "/" else (self.cgroup_root.strip("/"),)


def placement() -> dict:
    """Pod spec fields that put a pod on the real node (merge into a pod template's ``spec``)."""
    return {"nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]},
            "tolerations": [{"key": TAINT["key"], "operator": "Equal", "value": TAINT["value"],
                             "effect": TAINT["effect"]}]}


def api_server_env(api_url: str) -> dict[str, str]:
    """The environment an in-cluster client (``hostNetwork: true``) needs to find the API server."""
    host, port = api_url.removeprefix("https://").rsplit(":", 1)
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}


def missing_pieces(binaries: Binaries | None) -> list[str]:
    """What the real node lacks on this machine, in words (empty: it can start)."""
    out = []
    if os.geteuid() != 0:
        out.append("root (containerd and the kubelet run as root)")
    for tool in ("containerd", "runc", "ctr", "iptables-save", "buildah", "debootstrap"):
        if not shutil.which(tool):
            out.append(f"the {tool} command (apt-get install {' '.join(DEBIAN_PACKAGES)} buildah debootstrap)")
    if not Path("/usr/lib/cni/bridge").exists():
        out.append("/usr/lib/cni/bridge (apt-get install containernetworking-plugins)")
    if binaries is not None:
        for b in ("kubelet", "coredns"):
            if not binaries.path(b).exists():
                out.append(f"{b} in {binaries.root / 'bin'} (bash hack/build-control-plane.sh)")
    return out


def image_archives(*, flyte: bool = False) -> list[Path]:
    """The image tarballs of hack/build-images.sh, building what is missing (cached: a second call is quick);
    with `flyte`, :data:`FLYTE_IMAGE`'s too."""
    r = subprocess.run(["bash", str(IMAGES_SCRIPT), *(["--flyte"] if flyte else [])], capture_output=True, text=True)
    if r.returncode != 0:
        raise NodeSetupError(f"hack/build-images.sh failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    out = Path(subprocess.run(["bash", str(IMAGES_SCRIPT), "--print-dir"], capture_output=True, text=True,
                              check=True).stdout.strip())
    return [out / "pause.tar", out / "gangrun.tar", *([out / "gangrun-flyte.tar"] if flyte else [])]


# --------------------------------------------------------------------------------------------
# The host's state, as the clean-host test compares it


def _run(argv: list[str], check: bool = False) -> str:
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise ControlPlaneError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def _tables(dump: str) -> dict[str, list[str]]:
    """iptables-save output by table, without comments and counters."""
    out: dict[str, list[str]] = {}
    table = None
    for line in dump.splitlines():
        if line.startswith("*"):
            table = line[1:]
            out[table] = []
        elif table and line and not line.startswith("#") and line != "COMMIT":
            out[table].append(re.sub(r" \[\d+:\d+\]$", "", line))
    return out


def host_state() -> dict[str, object]:
    """What the node may change on the host, in a comparable form."""
    cgroups = sorted(str(p) for root in _cgroup_roots() for p in root.iterdir() if p.is_dir())
    mounts = sorted(line.split()[1] + " " + line.split()[2] for line in Path("/proc/mounts").read_text().splitlines())
    return {
        "iptables": _tables(_run(["iptables-save"])),
        "ip6tables": _tables(_run(["ip6tables-save"])),
        "links": sorted(re.sub(r"^\d+: ", "", line).split(":")[0] for line in _run(["ip", "-o", "link"]).splitlines()),
        "routes": sorted(_run(["ip", "route"]).splitlines()),
        "mounts": mounts,
        "cgroups": cgroups,
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        "paths": sorted(p for p in HOST_PATHS if os.path.lexists(p)),
    }


def _cgroup_roots() -> list[Path]:
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():  # cgroup v2 only
        return [base]
    return [p for p in base.iterdir() if p.is_dir() and not p.is_symlink()]


# --------------------------------------------------------------------------------------------
# Cleaning up: every step is idempotent, so it serves a stop, a failed start and a SIGKILLed run


def _kill_pids(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pids and time.monotonic() < deadline:
        pids = {p for p in pids if Path(f"/proc/{p}").exists() and _state(p) != "Z"}
        time.sleep(0.1)


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command's name (which may hold spaces and brackets): the
    state first, then the parent; [] when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _state(pid: int) -> str:
    fields = _stat(pid)
    return fields[0] if fields else "Z"


def parent_pid(pid: int) -> int:
    """The parent of `pid` (0 when it is gone)."""
    fields = _stat(pid)
    return int(fields[1]) if len(fields) > 1 else 0


def _processes_of(workdir: Path, cgroups: tuple[str, ...] = CGROUP_NAMES) -> set[int]:
    """Processes started for this node: the ones naming its folder (containerd, its shims, the kubelet,
    CoreDNS) and every process in a cgroup the node made (the containers)."""
    pids: set[int] = set()
    needle = str(workdir).encode()
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != os.getpid():
            with contextlib.suppress(OSError):
                if needle in (p / "cmdline").read_bytes():
                    pids.add(int(p.name))
    for root in _cgroup_roots():
        for name in cgroups:
            for procs in (root / name).rglob("cgroup.procs") if (root / name).is_dir() else ():
                with contextlib.suppress(OSError):
                    pids.update(int(x) for x in procs.read_text().split())
    return pids


def _unmount_under(prefixes: list[str]) -> None:
    for _ in range(5):  # a lazy unmount of a parent can uncover another mount
        points = [line.split()[1].replace("\\040", " ") for line in Path("/proc/mounts").read_text().splitlines()]
        mine = [m for m in points if any(m == p or m.startswith(p.rstrip("/") + "/") for p in prefixes)]
        if not mine:
            return
        for m in sorted(set(mine), key=len, reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)


def _remove_cgroups(names: tuple[str, ...] = CGROUP_NAMES) -> None:
    for root in _cgroup_roots():
        for name in names:
            top = root / name
            if not top.is_dir():
                continue
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    d.rmdir()
            for _ in range(20):
                try:
                    top.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


def _restore_iptables(save: str, restore: str, before: dict[str, list[str]]) -> None:
    """Drop the chains the node made (and the rules that jump to them) unless they were there before it
    started; delete a table that only the node created, when nft can."""
    for table, lines in _tables(_run([save])).items():
        had = set(before.get(table, ()))
        kept = [ln for ln in lines if ln in had or not _owned_line(ln)]
        if kept != lines:
            text = f"*{table}\n" + "\n".join(kept) + "\nCOMMIT\n"
            subprocess.run([restore], input=text, text=True, capture_output=True)
        if table not in before and shutil.which("nft") and all(ln.startswith(":") for ln in kept):
            family = "ip6" if save.startswith("ip6") else "ip"
            subprocess.run(["nft", "delete", "table", family, table], capture_output=True)


def _owned_line(line: str) -> bool:
    if line.startswith(":"):
        return bool(OWNED_CHAIN.match(line[1:]))
    parts = line.split()
    chain = parts[1] if len(parts) > 1 and parts[0] in ("-A", "-I") else ""
    target = parts[parts.index("-j") + 1] if "-j" in parts else ""
    goto = parts[parts.index("-g") + 1] if "-g" in parts else ""
    return any(OWNED_CHAIN.match(x) for x in (chain, target, goto) if x)


def clean_node(node: dict) -> None:
    """Undo what one node (`workdir`, `bridge`, `cgroups`, `keep_workdir`) changed on the host by itself: its
    processes, mounts, bridge, cgroups and folder. What nodes share (iptables, paths) is clean_host's."""
    workdir = Path(node["workdir"])
    _kill_pids(_processes_of(workdir, tuple(node["cgroups"])))
    _unmount_under([str(workdir)])
    # The pods' veths go with their network namespaces; any left on the bridge go with it.
    for line in _run(["ip", "-o", "link", "show", "master", node["bridge"]]).splitlines():
        name = re.sub(r"^\d+: ", "", line).split(":")[0].split("@")[0]
        subprocess.run(["ip", "link", "del", name], capture_output=True)
    subprocess.run(["ip", "link", "del", node["bridge"]], capture_output=True)
    _remove_cgroups(tuple(node["cgroups"]))
    if not node.get("keep_workdir"):
        shutil.rmtree(workdir, ignore_errors=True)


def clean_host(record: dict) -> None:
    """Undo everything a node run (described by its record) changed on the host: the nodes that joined the
    first one (`others`, newest first), the first node, then what they changed together."""
    first = {"workdir": record["workdir"], "keep_workdir": record.get("keep_workdir"), "bridge": BRIDGE,
             "cgroups": CGROUP_NAMES}
    for node in [*reversed(record.get("others", [])), first]:
        clean_node(node)
    _unmount_under([p for p in HOST_PATHS if p not in record["paths_before"]])
    _restore_iptables("iptables-save", "iptables-restore", record["iptables_before"])
    _restore_iptables("ip6tables-save", "ip6tables-restore", record["ip6tables_before"])
    with contextlib.suppress(OSError):
        Path("/proc/sys/net/ipv4/ip_forward").write_text(record["ip_forward"] + "\n")
    for p in HOST_PATHS:
        if p not in record["paths_before"]:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
    if "/var/lib/kubelet" in record["paths_before"]:  # the kubelet ignores --root-dir for this one
        shutil.rmtree("/var/lib/kubelet/device-plugins", ignore_errors=True)


def clean_leftovers() -> bool:
    """Clean up after a node run that could not stop (SIGKILL); True when there was one."""
    path = RECORD_DIR / "record.json"
    if not path.exists():
        return False
    clean_host(json.loads(path.read_text()))
    shutil.rmtree(RECORD_DIR, ignore_errors=True)
    return True


# --------------------------------------------------------------------------------------------
# The node


@dataclass
class RealNode:
    binaries: Binaries
    kubeconfig: Path          # an admin kubeconfig of the control plane
    workdir: Path             # the node's own folder (containerd, kubelet, CNI, CoreDNS); made and removed here
    images: list[Path] = field(default_factory=list)   # docker-archive tarballs to import
    keep_workdir: bool = False
    exclusive: bool = True    # tainted: only pods with placement() run here (False: every pod may)
    net: NodeNet = field(default_factory=NodeNet)
    components: list[Component] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    def start(self, timeout: float = 120.0) -> RealNode:
        missing = missing_pieces(self.binaries)
        if missing:
            raise NodeSetupError("the real node cannot start; missing: " + "; ".join(missing))
        t0 = time.monotonic()
        self.workdir = self.workdir.resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._record()
        try:
            self._start_containerd()
            self._import_images()
            self._make_bridge()
            self._start_coredns()
            self._start_kubelet(timeout)
        except BaseException:
            self.stop()
            raise
        self.timings["node start"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        self._stop_components()
        clean_leftovers()

    @property
    def dns(self) -> str:
        """The cluster DNS address of this node's pods: its own CoreDNS, on its gateway."""
        return self.net.gateway

    def _record(self) -> None:
        """Clean up after a SIGKILLed run, then record the host as it is (what stop restores)."""
        clean_leftovers()
        before = host_state()
        RECORD_DIR.mkdir(parents=True, exist_ok=True)
        (RECORD_DIR / "record.json").write_text(json.dumps({
            "workdir": str(self.workdir), "keep_workdir": self.keep_workdir,
            "paths_before": before["paths"], "ip_forward": before["ip_forward"],
            "iptables_before": before["iptables"], "ip6tables_before": before["ip6tables"],
        }))

    def _stop_components(self) -> None:
        for c in reversed(self.components):
            end(c.proc, grace=5.0)
        self.components.clear()

    @property
    def pod_logs_dir(self) -> Path:
        """The kubelet's podLogsDir: ``<namespace>_<pod>_<uid>/<container>/<n>.log``."""
        return self.workdir / "pod-logs"

    def pod_logs(self, pattern: str) -> list[Path]:
        """The container log files in `pod_logs_dir` matching `pattern`."""
        return list(self.pod_logs_dir.glob(pattern))

    def stops_told(self, pod: str, lines: int = 12) -> str:
        """What this node's logs say about stopping containers (containerd's StopContainer and signals) and
        the kubelet's last lines naming `pod` (its name or uid): why a worker said nothing at its stop."""
        def grep(name: str, keep: Callable[[str], bool]) -> str:
            try:
                text = (self.workdir / "logs" / f"{name}.log").read_text(errors="replace").splitlines()
            except OSError as e:
                return f"--- {name}: {e}"
            return "\n".join([f"--- {name}", *[line[:300] for line in text if keep(line)][-lines:]])
        return "\n".join([grep("containerd", lambda line: "top container" in line or "StopContainer" in line),
                          grep("kubelet", lambda line: pod in line)])

    def restart(self, name: str) -> Component:
        """Crash `containerd` or the `kubelet` and start it again (processes.respawn); the pods' containers and
        the node's folders are left as they are."""
        return respawn(self.components, name, self._spawn)

    def check_alive(self) -> None:
        for c in self.components:
            if not c.alive():
                raise ControlPlaneError(f"{c.name} exited with code {c.proc.returncode}; last log lines "
                                        f"({c.log}):\n{c.tail()}")

    # ---------------------------------------------------------------- internals
    def _spawn(self, name: str, argv: list[str]) -> Component:
        c = spawn(name, argv, self.workdir / "logs" / f"{name}.log", self.workdir)
        self.components.append(c)
        return c

    def _wait(self, what: str, fn, timeout: float, component: Component) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if not component.alive():
                break
            try:
                if fn():
                    return
            except Exception as e:
                last = e
            time.sleep(0.2)
        raise ControlPlaneError(f"timed out or died waiting for {what} (last error: {last}); last log lines of "
                                f"{component.name} ({component.log}):\n{component.tail()}")

    def _start_containerd(self) -> None:
        d = self.workdir / "containerd"
        conf_dir = self.workdir / "cni" / "net.d"
        conf_dir.mkdir(parents=True, exist_ok=True)
        (conf_dir / "10-gangrun.conflist").write_text(json.dumps(cni_conflist(self.workdir / "cni" / "ipam", self.net)))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{d / 'root'}"
state = "{d / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.containerd_socket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / 'opt'}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # The VM drops CAP_SYS_RESOURCE: without this, the sandbox's oom_score_adj -998 fails in runc.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d / 'runc'}"
  [{cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{conf_dir}"
"""
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.toml").write_text(config)
        c = self._spawn("containerd", ["containerd", "--config", str(d / "config.toml")])
        self._wait("containerd's socket", lambda: _run(
            ["ctr", "--address", str(self.containerd_socket), "version"]).find("Server") >= 0, 30, c)

    def _import_images(self) -> None:
        t0 = time.monotonic()
        for tar in self.images:
            _run(["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", "images", "import", str(tar)],
                 check=True)
        self.timings["image import"] = time.monotonic() - t0

    def _make_bridge(self) -> None:
        # Made here rather than by the bridge plugin at the first pod, so that CoreDNS can listen on the
        # gateway address before any pod exists; the plugin takes the bridge as it finds it.
        net = self.net
        _run(["ip", "link", "add", net.bridge, "type", "bridge"], check=True)
        _run(["ip", "addr", "add", f"{net.gateway}/{net.subnet.split('/')[1]}", "dev", net.bridge], check=True)
        _run(["ip", "link", "set", net.bridge, "up"], check=True)

    def _start_coredns(self) -> None:
        port = free_port()
        corefile = f""".:53 {{
    bind {self.net.gateway}
    errors
    health 127.0.0.1:{port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self.kubeconfig}
        pods insecure
        ttl 0
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
}}
"""
        d = self.workdir / "coredns"
        d.mkdir(parents=True, exist_ok=True)
        (d / "Corefile").write_text(corefile)
        c = self._spawn("coredns", [str(self.binaries.path("coredns")), "-conf", str(d / "Corefile")])
        import urllib.request

        def healthy() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                return r.status == 200
        self._wait("CoreDNS /health", healthy, 30, c)

    def _start_kubelet(self, timeout: float) -> None:
        d = self.workdir / "kubelet"
        d.mkdir(parents=True, exist_ok=True)
        ca = yaml.safe_load(Path(self.kubeconfig).read_text())["clusters"][0]["cluster"]["certificate-authority"]
        config = kubelet_config(ca, self.pod_logs_dir, port=free_port(), healthz_port=free_port(),
                                taints=[TAINT] if self.exclusive else [], net=self.net, dns=self.dns)
        (d / "config.yaml").write_text(yaml.safe_dump(config))
        c = self._spawn("kubelet", [
            str(self.binaries.path("kubelet")), f"--config={d / 'config.yaml'}",
            f"--kubeconfig={self.kubeconfig}", f"--root-dir={d / 'root'}", f"--cert-dir={d / 'pki'}",
            f"--hostname-override={self.net.name}", f"--node-ip={self.net.gateway}",  # it refuses a loopback one
            f"--container-runtime-endpoint=unix://{self.containerd_socket}",
            f"--node-labels={NODE_LABEL[0]}={NODE_LABEL[1]}", "--v=1",
        ])
        kube = Kube(self.kubeconfig)
        self._wait(f"Node {self.net.name} Ready",
                   lambda: has_condition(kube.get_or_none("Node", self.net.name), "Ready"), timeout, c)


def cni_conflist(ipam_dir: Path, net: NodeNet) -> dict:
    """The pods' network: a bridge with the gateway on the host, addresses from host-local, hostPorts."""
    return {"cniVersion": "1.0.0", "name": "gangrun", "plugins": [
        {"type": "bridge", "bridge": net.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
         "ipam": {"type": "host-local", "dataDir": str(ipam_dir),
                  "ranges": [[{"subnet": net.subnet, "gateway": net.gateway}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ]}


def kubelet_config(client_ca: str, pod_logs: Path, port: int, healthz_port: int, taints: list[dict], net: NodeNet,
                   dns: str) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        # This host has a cgroup v1 hierarchy and no systemd as PID 1.
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "failSwapOn": False,
        "podLogsDir": str(pod_logs),
        "address": net.gateway, "port": port, "readOnlyPort": 0, "cgroupRoot": net.cgroup_root,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        # The API server calls the kubelet (logs, exec) without a client certificate; the kubelet listens
        # only on the pods' bridge, which is local to this machine.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": client_ca}},
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDNS": [dns], "clusterDomain": CLUSTER_DOMAIN,
        "registerWithTaints": taints,
        # A shared development machine: never evict pods or collect images for disk or memory pressure.
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%",
                         "imagefs.available": "1%", "imagefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "staticPodPath": "",
        "syncFrequency": "10s", "fileCheckFrequency": "10s",
        "nodeStatusUpdateFrequency": "5s",
    }

