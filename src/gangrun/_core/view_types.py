"""The shape of the task view, `gangrun get -o json`: the one definition of its keys, as TypedDicts.

The view is a public contract (docs/interface.md); these types say which keys it has and what each
holds, so that every producer (`gangrun._core.view`, each backend's view builder) and every reader
(the API, the CLI, the web page's lanes, the metrics) is checked against the same keys, and a key
renamed in one place is a type error in the others. The runtime values are plain dicts, as before.

    StateView      what the task's state says, the same on both backends (`gangrun._core.view.state_view`)
    TaskView       a task that reads: its `StateView`, the facts both backends add, and the backend's own
                   (`LocalView`, `OfflineLocalView`, `KubeView`); each backend builds its view as one
                   literal of its type
    UnreadableView a local task whose stored record no longer reads, as the task list shows it
    ListedView     any of them, as `list()` returns them

Key order is the order the builders write them in, which is the JSON's order. The annotations are
evaluated (no `from __future__ import annotations`), so that `__required_keys__` and
`__optional_keys__` tell the keys apart at run time, for the tests that hold the builders to them.
"""

from typing import Any, NotRequired, TypedDict


class AttemptView(TypedDict):
    """One attempt, as stored and as `attempts` lists it."""

    number: int
    startedAt: str | None
    runningAt: str | None
    endedAt: str | None
    outcome: str | None
    code: str | None
    reason: str | None


class EvictionView(TypedDict):
    """One time Kueue took the gang back, with its readmission (None while it waits), as stored."""

    attempt: int
    kind: str
    reason: str
    detail: str
    message: str
    at: str | None
    readmittedAt: str | None


class OpenEvictionView(TypedDict):
    """`eviction`: the eviction in progress."""

    reason: str
    detail: str
    message: str
    at: str


class WorkLostView(TypedDict):
    """One stop's work thrown away: `seconds` of gang-up time before `at`."""

    attempt: int
    cause: str
    seconds: float
    at: str


class CheckpointView(TypedDict):
    """`lastCheckpoint`: the newest committed checkpoint (`takenAt` from workers that report it)."""

    attempt: int
    step: int | None
    at: str
    uri: str
    takenAt: NotRequired[str]


class GraceView(TypedDict):
    """`grace`: whether the grace period fits the final saves measured so far."""

    gracePeriodSeconds: float
    finalSaveP95Seconds: float
    finalSaves: int
    sufficient: bool
    message: str


class AccountingFigures(TypedDict):
    """What the accounting folds from the timeline (B5). `badputSeconds` has one key per cause of
    `gangrun._core.badput.CAUSES`, in that order."""

    queuedSeconds: float
    gangUpSeconds: float
    restoringSeconds: float
    workLost: list[WorkLostView]
    workLostSeconds: float
    goodput: float
    stepSeconds: float
    badputSeconds: dict[str, float]
    lastCheckpoint: CheckpointView | None
    finalSaveSeconds: list[float]
    periodicSaveSeconds: list[float]


class AccountingView(AccountingFigures):
    """`accounting`: the figures, the preemptions by cause and the grace-period check."""

    preemptionsByCause: dict[str, int]
    waitingForReadmissionSeconds: float
    grace: GraceView | None


class ResumeFromResult(TypedDict):
    """`resumeFromResult`: what `spec.checkpoint.resumeFrom` gave the newest load (found False: nothing)."""

    found: bool
    uri: str | None
    step: int | None
    at: str | None


class SpecFacts(TypedDict):
    """What the view shows of the spec, with its defaults; all None for a spec that is not valid."""

    queue: str | None
    priorityClass: str | None
    nodes: int | None
    minNodes: int | None
    nprocPerNode: int | None
    worldSize: int | None
    resumeFrom: str | None


class Waiting(TypedDict, total=False):
    """Why the gang waits, while it does: Kueue's message and the 1-based place in its queue."""

    pending: str | None
    queuePosition: int | None


class GangWorkerView(TypedDict):
    rank: int
    node: int
    pid: int | None
    running: bool
    exitCode: int | None


class GangView(TypedDict):
    """`gang` (local): the JobSet twin of the current attempt."""

    name: str
    attempt: int
    suspended: bool
    restarts: int
    nodes: int
    resizes: int
    workers: list[GangWorkerView]


class WorkloadView(TypedDict):
    """`workload` (local): the Workload twin, Kueue-style."""

    name: str
    queue: str
    clusterQueue: str
    priority: int
    active: bool
    admitted: bool
    conditions: list[dict[str, Any]]


class ControlPlaneView(TypedDict):
    """`controlPlane` (local, read while no daemon runs): not running, last seen when."""

    running: bool
    lastSeen: str | None


class StateView(TypedDict):
    """What the task's state says, the same on both backends (`gangrun._core.view.state_view`)."""

    name: str
    phase: str
    phaseVersion: int
    reason: str
    attempt: int
    userRetriesUsed: int
    systemRetriesUsed: int
    restartAttempt: int
    attempts: list[AttemptView]
    evictionsByCause: dict[str, int]
    waitingForReadmissionSeconds: float
    evictions: list[EvictionView]
    # With the task's policy (a valid spec): its budgets and what is left.
    retries: NotRequired[int]
    maxSystemRetries: NotRequired[int]
    retriesLeft: NotRequired[int]
    eviction: NotRequired[OpenEvictionView]  # while an eviction is open
    code: NotRequired[str]  # the final error, on Failed
    message: NotRequired[str]


class BackendFacts(SpecFacts):
    """What both backends add to the state's view."""

    backend: str
    runningNodes: int  # the nodes with a running worker now
    uid: str
    resumeFromResult: ResumeFromResult | None
    accounting: AccountingView


class LocalView(StateView, BackendFacts):
    """The local backend's view: the state's, the shared facts, and its own."""

    priority: int | None
    queuePosition: int | None
    pending: str | None
    workload: WorkloadView | None
    gang: GangView | None
    executable: str | None  # the command's argv[0] found on the submitter's PATH at submit
    checkpointRoot: str
    logs: str


class OfflineLocalView(LocalView):
    """A local task read while no daemon runs: its gang, recorded as running, is not known to run."""

    controlPlane: ControlPlaneView


class KubeView(StateView, BackendFacts, Waiting):
    """The Kubernetes backend's view: `pending` and `queuePosition` only while the gang waits."""

    namespace: str | None  # the task's (the backend's namespace for a task that does not say)
    jobSet: str


TaskView = LocalView | OfflineLocalView | KubeView


class UnreadableView(TypedDict):
    """A stored task whose record no longer reads: its name, why, and the way out (`reason`)."""

    name: str
    backend: str
    phase: str
    phaseVersion: int
    attempt: int
    reason: str
    unreadable: str
    attempts: list[AttemptView]


ListedView = TaskView | UnreadableView
