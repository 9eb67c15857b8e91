"""The local control plane's files under GANGRUN_HOME, and its configuration.

    $GANGRUN_HOME/                     (0700: only its user reaches the socket and the state)
      local.db                         SQLite: tasks, timelines, configuration
      daemon.sock                      the RPC socket (0600); see `socket_path` for long homes
      daemon.lock / daemon.pid         one daemon per home
      daemon.log                       the daemon's own output
      .gangrun-home                    marks the directory as a gangrun home
      logs/<task>/<id>/attempt-<N>/restart-<R>/rank-<r>.log
      run/<task>/<id>/attempt-<N>/     stop notice and checkpoint events of that attempt's gang
      checkpoints/<task>/<id>/attempt-<N>/  default checkpoint root (spec.checkpoint.uri replaces
                                       `checkpoints`)

`<id>` is the task's identity, minted when it is submitted: a task deleted and re-created under the
same name is another task and never sees the first one's logs, events or checkpoints. (A task stored
before identities were kept has none, and keeps the folders without `<id>` it started with.)

Configuration = the one ClusterQueue's quota, its named queues, the priority classes, and whether
admission boosts the priority of gangs that would lose the most (checkpoint-aware preemption, on by
default; `gangrun._core.priority_boost`). A task
without `priorityClass` gets `default_priority_class` (`normal`, 1000), so that a `low` task never
preempts a task whose author did not think about priorities. (Kueue itself gives such a Workload
priority 0 unless a default WorkloadPriorityClass exists; `normal` plays that default's role.)
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from gangrun._backends.local.admission import Resources
from gangrun._core.checkpoint_root import task_root
from gangrun._core.priority_boost import DEFAULT_STEPS, BoostPolicy
from gangrun._core.units import parse_quantity
from gangrun._errors import UsageError

CLUSTER_QUEUE = "local"
CQ_PATH = f"/{CLUSTER_QUEUE}"  # how Kueue names a ClusterQueue in its preemption messages
NAMESPACE = "local"
DEFAULT_QUEUES = ("default",)
DEFAULT_PRIORITY_CLASSES = {"low": 100, "normal": 1000, "high": 10000}
DEFAULT_PRIORITY_CLASS = "normal"
SOCKET_MAX = 100  # sun_path is 108 bytes on Linux; keep a margin
MARKER = ".gangrun-home"  # says a directory is a gangrun home


def default_home() -> Path:
    return Path(os.environ.get("GANGRUN_HOME") or Path.home() / ".gangrun").expanduser()


@dataclass(frozen=True)
class Paths:
    home: Path

    @property
    def db(self) -> Path:
        return self.home / "local.db"

    @property
    def socket(self) -> Path:
        return socket_path(self.home)

    @property
    def lock(self) -> Path:
        return self.home / "daemon.lock"

    @property
    def start_lock(self) -> Path:
        """Held by the one client starting a daemon; the others wait on it instead of starting their own."""
        return self.home / "start.lock"

    @property
    def pidfile(self) -> Path:
        return self.home / "daemon.pid"

    @property
    def log(self) -> Path:
        return self.home / "daemon.log"

    def logs(self, task: str, identity: str, attempt: int | None = None) -> Path:
        base = _keyed(self.home / "logs", task, identity)
        return base if attempt is None else base / f"attempt-{attempt}"

    def run(self, task: str, identity: str, attempt: int | None = None) -> Path:
        base = _keyed(self.home / "run", task, identity)
        return base if attempt is None else base / f"attempt-{attempt}"

    def checkpoint_base(self, uri: str) -> str:
        """Where every task's checkpoint root is, by name (`spec.checkpoint.uri`, or the home's)."""
        return uri.rstrip("/") if uri else str(self.home / "checkpoints")

    def checkpoint_root(self, task: str, identity: str, uri: str) -> str:
        return task_root(self.checkpoint_base(uri), task, identity)

    @property
    def marker(self) -> Path:
        return self.home / MARKER

    def ensure(self) -> None:
        """Create the home (0700), or check that an existing directory is one: gangrun never takes over
        (and chmods) a directory of someone else's that is not empty."""
        if self.home.exists() and not self.marker.exists():
            if not self.home.is_dir():
                raise UsageError(f"GANGRUN_HOME: {self.home} is not a directory")
            if any(self.home.iterdir()) and not self.db.exists():
                raise UsageError(f"GANGRUN_HOME: {self.home} is a directory gangrun did not create and it is not "
                                 "empty; point GANGRUN_HOME at a new or empty directory")
        self.home.mkdir(parents=True, exist_ok=True)
        os.chmod(self.home, 0o700)
        self.marker.touch()


def _keyed(base: Path, task: str, identity: str) -> Path:
    return base / task / identity if identity else base / task


def socket_path(home: Path) -> Path:
    """`home/daemon.sock`, or a short stand-in in a private temp dir when that path is too long."""
    p = Path(home).resolve() / "daemon.sock"
    if len(str(p)) <= SOCKET_MAX:
        return p
    short = Path(tempfile.gettempdir()) / f"gangrun-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    st = short.lstat()  # the temp dir is shared: someone may have planted this name before us
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise UsageError(f"{short} is not a private directory of this user (it holds the socket of a home whose "
                         f"path is too long for one); remove it, or use a shorter GANGRUN_HOME")
    if st.st_mode & 0o077:
        os.chmod(short, 0o700)
    return short / (hashlib.sha1(str(p).encode()).hexdigest()[:16] + ".sock")


def machine_quota() -> Resources:
    """Defaults from the machine: all its cores and memory, and its NVIDIA GPUs if any."""
    cpu = Decimal(os.cpu_count() or 1)
    try:
        memory = Decimal(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        memory = Decimal(8 * 2**30)
    gpus = sum(1 for p in Path("/dev").glob("nvidia[0-9]*")) if Path("/dev").exists() else 0
    return Resources(cpu=cpu, memory=memory, gpu=Decimal(gpus))


@dataclass(frozen=True, kw_only=True)
class Config:
    quota: Resources
    queues: tuple[str, ...] = DEFAULT_QUEUES
    priority_classes: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_PRIORITY_CLASSES))
    default_priority_class: str = DEFAULT_PRIORITY_CLASS
    pods_ready_backoff: float = 1.0  # seconds before requeue number 1 after PodsReadyTimeout (Kueue: 60)
    metrics_port: int = 0  # 127.0.0.1:<port>/metrics serves the Prometheus series; 0: not served
    priority_boost: bool = True  # checkpoint-aware preemption (`gangrun._core.priority_boost`, default band)
    boost_steps: tuple[float, ...] = DEFAULT_STEPS  # node-seconds of unsaved work where the boost steps up

    def priority_of(self, priority_class: str) -> int:
        return self.priority_classes[priority_class or self.default_priority_class]

    def with_quota(self, *, cpu: str | None, memory: str | None, gpu: int | None) -> Config:
        """The quota changed where a value is given. Raises UsageError naming the `local up` flag."""
        q = self.quota
        new = Resources(cpu=_quota_value("cpu", cpu, q.cpu), memory=_quota_value("memory", memory, q.memory),
                        gpu=_quota_value("gpu", gpu, q.gpu))
        return replace(self, quota=new)

    def for_json(self) -> dict[str, Any]:
        return {"quota": self.quota.for_json(), "queues": list(self.queues),
                "priorityClasses": self.priority_classes, "defaultPriorityClass": self.default_priority_class,
                "podsReadyBackoffSeconds": self.pods_ready_backoff, "metricsPort": self.metrics_port,
                "priorityBoost": self.priority_boost, "boostSteps": list(self.boost_steps)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Config:
        return cls(quota=Resources.from_json(d["quota"]), queues=tuple(d.get("queues", DEFAULT_QUEUES)),
                   priority_classes=dict(d.get("priorityClasses", DEFAULT_PRIORITY_CLASSES)),
                   default_priority_class=d.get("defaultPriorityClass", DEFAULT_PRIORITY_CLASS),
                   pods_ready_backoff=float(d.get("podsReadyBackoffSeconds", 1.0)),
                   metrics_port=int(d.get("metricsPort", 0)), priority_boost=bool(d.get("priorityBoost", True)),
                   boost_steps=tuple(float(x) for x in d.get("boostSteps", DEFAULT_STEPS)))

    def boost_policy(self) -> BoostPolicy | None:
        """The boost admission adds to each gang's priority, or None when boosting is off."""
        return BoostPolicy(steps=self.boost_steps) if self.priority_boost else None

    @classmethod
    def default(cls) -> Config:
        return cls(quota=machine_quota())


def _quota_value(name: str, value: str | int | None, current: Decimal) -> Decimal:
    if value is None:
        return current
    try:
        return parse_quantity(value)
    except ValueError as e:  # negative or not a quantity: the user's mistake, said with the flag's name
        raise UsageError(f"--{name}: {e}") from None
