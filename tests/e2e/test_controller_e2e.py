"""The real `gangrun controller` against the real Kueue and JobSet controllers (issue #6, deliverable 4).

Each test runs `python -m gangrun controller` as a subprocess next to the session's tier-C control
plane, watching only the test's own namespace, with the ClusteredTask CRD from `deploy/crd.yaml`
installed. kwok runs no containers: the task's pods are made to succeed by annotating them.

Sizing (the ClusterQueue's quota is the 4 kwok nodes, 16 CPU): the task is 2 nodes of 4 CPU (8 CPU);
the preemptor is a `high` batch Job of 3 pods of 4 CPU (12 CPU). 8 + 12 > 16, so Kueue must preempt
the task to admit the Job, and 12 + 8 > 16, so the task is readmitted only once the Job completed.

Every test records, through a watch, each JobSet gangrun created in its namespace: at most one JobSet
(one UID) ever exists per attempt, also across a SIGKILL of the controller.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from gangrun._backends.kube.controller import REJECTED_EVENT
from gangrun._backends.kube.leader import LEASE_DURATION, LEASE_NAME
from tests.harness.addons import LOCAL_QUEUE, NODE_CPU
from tests.harness.client import ApiError, Kube, Watch, condition, has_condition
from tests.harness.controlplane import ControlPlane
from tests.harness.kwok import ANNOTATION_COMPLETE_AFTER
from tests.harness.processes import Component
from tests.harness.tasks import (
    ATTEMPT_LABEL,
    GROUP,
    PLURAL,
    TASK_LABEL,
    TIMEOUT,
    VERSION,
    task_path,
    wait_status,
)

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
RBAC_HINT = "the controller may not read Kueue Workloads (403)"
PREEMPTED_PREFIX = "gang evicted by kueue (Preempted, InClusterQueue): "
WAITING = "; waiting for re-admission"


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def crd_installed(control_plane_tier_c: ControlPlane) -> ControlPlane:
    kube = control_plane_tier_c.kube
    doc = yaml.safe_load((REPO / "deploy" / "crd.yaml").read_text())
    kube.apply(doc)
    kube.wait_for("ClusteredTask CRD Established", lambda: has_condition(
        kube.get("CustomResourceDefinition", doc["metadata"]["name"]), "Established"), timeout=60)
    # The CRD's REST mapping is served a little after Established.
    kube.wait_for("clusteredtasks served", lambda: _try(lambda: kube.request(
        "GET", f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}")), timeout=60)
    return control_plane_tier_c


def _try(fn):
    try:
        return fn() is not None
    except ApiError:
        return False


class ControllerProcess:
    """`gangrun controller` for one namespace; SIGKILL and restart at will."""

    def __init__(self, cp: ControlPlane, ns: str, kubeconfig: Path | None = None, args: tuple[str, ...] = (),
                 *, identity: str = "") -> None:
        self.cp, self.ns = cp, ns
        self.kubeconfig = kubeconfig or cp.kubeconfig
        self.args = args  # more `gangrun controller` flags
        self.identity = identity  # given one, it leads only while it holds the Lease in the test's namespace
        self.runs: list[Component] = []
        self.current: Component | None = None

    def start(self) -> ControllerProcess:
        assert self.current is None
        argv = [sys.executable, "-m", "gangrun", "controller", "--kubeconfig", str(self.kubeconfig),
                "--namespace", self.ns, "--metrics-port", "0", "--health-port", "0", *self.args,
                *(["--lease-namespace", self.ns, "--identity", self.identity] if self.identity
                  else ["--no-leader-election"])]
        env = {"KUBECONFIG": str(self.kubeconfig), "PYTHONPATH": str(REPO / "src"),
               "PYTHONUNBUFFERED": "1"}
        self.current = self.cp.spawn(f"gangrun-controller-{self.ns}-{len(self.runs)}", argv, env=env)
        self.runs.append(self.current)
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        c = self.current
        assert c is not None
        os.killpg(c.proc.pid, signal.SIGKILL)
        c.proc.wait(timeout=30)
        self.cp.terminate(c)
        self.current = None

    def stop(self) -> None:
        if self.current is not None:
            self.cp.terminate(self.current)
            self.current = None

    def check(self) -> None:
        c = self.current
        if c is not None and not c.alive():
            raise AssertionError(f"the controller exited with {c.proc.returncode}:\n{c.tail(60)}")

    def log(self) -> str:
        return "\n".join(c.log.read_text(errors="replace") for c in self.runs if c.log.exists())


class JobSetRecorder:
    """Every JobSet of gangrun in a namespace that ever existed, from a watch: {(attempt, name, uid)}."""

    def __init__(self, cp: ControlPlane, ns: str) -> None:
        self.seen: dict[str, tuple[str, str]] = {}  # uid -> (attempt, name)
        self.deleted: set[str] = set()
        self._watch = Watch(cp, ns, "jobsets", self._record, group="jobset.x-k8s.io", version="v1alpha2",
                            label_selector=TASK_LABEL, timeout_seconds=5)

    def _record(self, _t: float, type_: str, obj: dict) -> None:
        md = obj.get("metadata", {})
        self.seen.setdefault(md["uid"], ((md.get("labels") or {}).get(ATTEMPT_LABEL, "?"), md["name"]))
        if type_ == "DELETED":
            self.deleted.add(md["uid"])

    def stop(self) -> None:
        self._watch.stop()

    def by_attempt(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for uid, (attempt, _name) in self.seen.items():
            out.setdefault(attempt, []).append(uid)
        return out

    def assert_one_per_attempt(self, attempts: int) -> None:
        time.sleep(0.5)  # let the watch deliver the last events
        per = self.by_attempt()
        assert sorted(per) == [str(n) for n in range(1, attempts + 1)], self.seen
        assert all(len(uids) == 1 for uids in per.values()), f"duplicate JobSets: {self.seen}"


@pytest.fixture
def env(crd_installed: ControlPlane, make_namespace):
    """(control plane, namespace, JobSet recorder); the controller(s) the test started stop first."""
    cp = crd_installed
    ns = make_namespace()
    rec = JobSetRecorder(cp, ns)
    controllers: list[ControllerProcess] = []
    yield cp, ns, rec, controllers
    rec.stop()
    for c in controllers:
        c.stop()
    for c in controllers:  # an Event the API server refused is a bug in gangrun, not a line to skim past
        assert REJECTED_EVENT not in c.log(), c.log()[-4000:]
    # Delete the tasks (their JobSets go with them) before the namespace fixture waits for Workloads.
    for t in list_tasks(cp.kube, ns):
        cp.kube.request("DELETE", task_path(ns, t["metadata"]["name"]))
    for j in cp.kube.list("Job", ns):
        cp.kube.delete("Job", j["metadata"]["name"], ns, propagation="Foreground")


def controller(env, kubeconfig: Path | None = None, args: tuple[str, ...] = ()) -> ControllerProcess:
    cp, ns, _rec, controllers = env
    c = ControllerProcess(cp, ns, kubeconfig, args).start()
    controllers.append(c)
    return c


# ------------------------------------------------------------------------------- objects


def list_tasks(kube: Kube, ns: str) -> list[dict]:
    return kube.request("GET", task_path(ns))["items"]


def create_task(kube: Kube, ns: str, name: str, *, resume: bool, retries: int) -> dict:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusteredTask",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodes": 2, "command": ["python", "train.py"], "image": "example.invalid/trainer:1",
            "resources": {"cpu": str(NODE_CPU), "memory": "1Gi"},
            "retries": retries, "failurePolicy": {"resumeAfterPreemption": resume},
            "priorityClass": "low", "queue": LOCAL_QUEUE, "terminationGracePeriod": "1s",
        },
    }
    return kube.request("POST", task_path(ns), body=body)


def preemptor(ns: str, name: str = "urgent") -> dict:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {
            "kueue.x-k8s.io/queue-name": LOCAL_QUEUE, "kueue.x-k8s.io/priority-class": "high"}},
        "spec": {
            "suspend": True, "parallelism": 3, "completions": 3, "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "example.invalid/job:1",
                                "resources": {"requests": {"cpu": str(NODE_CPU)}}}],
            }},
        },
    }


def complete_pods(kube: Kube, ns: str, selector: str, count: int) -> None:
    """Wait for `count` Running pods and make kwok complete them."""
    for p in kube.wait_running_pods(ns, selector, count, timeout=TIMEOUT):
        kube.patch("Pod", p["metadata"]["name"], ns,
                   {"metadata": {"annotations": {ANNOTATION_COMPLETE_AFTER: "0s"}}})


def is_running(s: dict) -> bool:
    return s.get("phase") == "Running" and str(s.get("reason", "")).startswith("running (")


def is_waiting_for_readmission(s: dict) -> bool:
    r = str(s.get("reason", ""))
    return s.get("phase") == "Running" and r.startswith(PREEMPTED_PREFIX) and r.endswith(WAITING)


def jobset_uid(kube: Kube, ns: str, name: str) -> str:
    return kube.get("JobSet", name, ns)["metadata"]["uid"]


def workload_of_jobset(kube: Kube, ns: str, uid: str) -> dict | None:
    items = kube.list("Workload", ns, label_selector=f"{JOB_UID_LABEL}={uid}")
    return items[0] if items else None


def preempt(kube: Kube, ns: str) -> None:
    kube.create(preemptor(ns))


def finish_preemptor(kube: Kube, ns: str) -> None:
    complete_pods(kube, ns, "batch.kubernetes.io/job-name=urgent", 3)


def finish_task(kube: Kube, ns: str, name: str, attempt: int) -> None:
    complete_pods(kube, ns, f"{TASK_LABEL}={name},{ATTEMPT_LABEL}={attempt}", 2)


def wait_gone(kube: Kube, ns: str, jobset: str) -> None:
    kube.wait_for(f"JobSet {jobset} deleted", lambda: kube.get_or_none("JobSet", jobset, ns) is None,
                  timeout=TIMEOUT, interval=0.2)


def attempt_outcomes(s: dict) -> list[tuple[int, str | None, str | None]]:
    return [(a["number"], a.get("outcome"), a.get("code") or "") for a in s.get("attempts") or []]


# ------------------------------------------------------------------------------- scenarios
#
# Each scenario takes `kill_at`: the set of points at which the controller is SIGKILLed and restarted.


def _bounce(ctl: ControllerProcess, point: str, kill_at: frozenset[str]) -> None:
    if point in kill_at:
        ctl.kill()
        ctl.start()


def scenario_resume(env, kill_at: frozenset[str] = frozenset()) -> None:
    """S11: preempted, waits on attempt 1, readmitted, resumes and succeeds with no retry used."""
    cp, ns, rec, _ = env
    kube, name = cp.kube, "train"
    ctl = controller(env)
    create_task(kube, ns, name, resume=True, retries=0)
    s = wait_status(kube, ns, name, is_running, "Running", ctl)
    assert s["attempt"] == 1 and s["jobSet"] == "train-1"
    _bounce(ctl, "running", kill_at)

    preempt(kube, ns)
    s = wait_status(kube, ns, name, is_waiting_for_readmission, "preempted, waiting for re-admission", ctl)
    assert s["attempt"] == 1 and s["userRetriesUsed"] == 0 and s["systemRetriesUsed"] == 0, s
    assert has_condition({"status": s}, "Evicted", reason="Preempted"), s["conditions"]
    assert has_condition({"status": s}, "Running", "False", reason="WaitingForReadmission"), s["conditions"]
    _bounce(ctl, "preempted", kill_at)

    finish_preemptor(kube, ns)
    s = wait_status(kube, ns, name, lambda s: s.get("reason") == "running (restart attempt 0)"
                    and not s.get("eviction"), "readmitted and running again", ctl)
    assert s["phase"] == "Running" and s["attempt"] == 1, s
    _bounce(ctl, "readmitted", kill_at)

    finish_task(kube, ns, name, 1)
    s = wait_status(kube, ns, name, lambda s: s.get("phase") == "Succeeded", "Succeeded", ctl)
    assert s["attempt"] == 1 and s["userRetriesUsed"] == 0 and s["systemRetriesUsed"] == 0, s
    assert attempt_outcomes(s) == [(1, "Succeeded", "")], s["attempts"]
    assert len(s["evictions"]) == 1 and s["evictions"][0]["kind"] == "Preempted", s["evictions"]
    rec.assert_one_per_attempt(1)
    assert not rec.deleted, "the JobSet of a succeeded task stays for its logs"


def scenario_no_resume(env, kill_at: frozenset[str] = frozenset()) -> None:
    """resumeAfterPreemption off: the preemption ends attempt 1 as a user retry; attempt 2 is a fresh gang."""
    cp, ns, rec, _ = env
    kube, name = cp.kube, "train"
    ctl = controller(env)
    create_task(kube, ns, name, resume=False, retries=1)
    wait_status(kube, ns, name, is_running, "Running", ctl)
    first_uid = jobset_uid(kube, ns, "train-1")

    preempt(kube, ns)
    s = wait_status(kube, ns, name, lambda s: s.get("attempt") == 2, "attempt 2", ctl)
    _bounce(ctl, "attempt-ended", kill_at)
    assert s["userRetriesUsed"] == 1 and s["systemRetriesUsed"] == 0, s
    assert attempt_outcomes(s)[0] == (1, "UserRetry", "GangEvicted"), s["attempts"]
    assert s["jobSet"] == "train-2"
    wait_gone(kube, ns, "train-1")
    second = kube.wait_for("JobSet train-2", lambda: kube.get_or_none("JobSet", "train-2", ns), timeout=TIMEOUT)
    assert second["metadata"]["uid"] != first_uid

    finish_preemptor(kube, ns)
    wait_status(kube, ns, name, is_running, "attempt 2 Running", ctl)
    finish_task(kube, ns, name, 2)
    s = wait_status(kube, ns, name, lambda s: s.get("phase") == "Succeeded", "Succeeded", ctl)
    assert s["attempt"] == 2 and s["userRetriesUsed"] == 1 and s["systemRetriesUsed"] == 0, s
    assert attempt_outcomes(s) == [(1, "UserRetry", "GangEvicted"), (2, "Succeeded", "")], s["attempts"]
    rec.assert_one_per_attempt(2)
    assert first_uid in rec.deleted


def scenario_deactivated(env, kill_at: frozenset[str] = frozenset()) -> None:
    """S11, second half: deactivated while it waits for re-admission: a system retry, a fresh gang, success."""
    cp, ns, rec, _ = env
    kube, name = cp.kube, "train"
    ctl = controller(env)
    create_task(kube, ns, name, resume=True, retries=0)
    wait_status(kube, ns, name, is_running, "Running", ctl)
    first_uid = jobset_uid(kube, ns, "train-1")
    preempt(kube, ns)
    wait_status(kube, ns, name, is_waiting_for_readmission, "waiting for re-admission", ctl)

    wl = workload_of_jobset(kube, ns, first_uid)
    assert wl is not None, f"no Workload labelled {JOB_UID_LABEL}={first_uid}"
    kube.patch("Workload", wl["metadata"]["name"], ns, {"spec": {"active": False}})
    _bounce(ctl, "deactivated", kill_at)
    s = wait_status(kube, ns, name, lambda s: s.get("attempt") == 2, "attempt 2 after deactivation", ctl)
    _bounce(ctl, "attempt-ended", kill_at)
    assert s["userRetriesUsed"] == 0 and s["systemRetriesUsed"] == 1, s
    assert attempt_outcomes(s)[0] == (1, "SystemRetry", "GangEvicted"), s["attempts"]
    wait_gone(kube, ns, "train-1")

    finish_preemptor(kube, ns)
    wait_status(kube, ns, name, is_running, "attempt 2 Running", ctl)
    finish_task(kube, ns, name, 2)
    s = wait_status(kube, ns, name, lambda s: s.get("phase") == "Succeeded", "Succeeded", ctl)
    assert s["attempt"] == 2 and s["userRetriesUsed"] == 0 and s["systemRetriesUsed"] == 1, s
    assert attempt_outcomes(s) == [(1, "SystemRetry", "GangEvicted"), (2, "Succeeded", "")], s["attempts"]
    rec.assert_one_per_attempt(2)
    assert first_uid in rec.deleted


def rbac_without_workloads() -> list[dict]:
    """deploy/rbac.yaml's controller ClusterRole, minus the workloads rule."""
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text()) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gangrun-controller")
    rules = [r for r in role["rules"] if "workloads" not in r["resources"]]
    assert len(rules) == len(role["rules"]) - 1
    return rules


def scenario_rbac(env, kill_at: frozenset[str] = frozenset()) -> None:
    """Without the right to read Workloads an eviction cannot be classified: a system retry, never a hang."""
    cp, ns, rec, _ = env
    kube, name = cp.kube, "train"
    kc = cp.service_account_kubeconfig(ns, "gangrun-controller", namespace_rules=rbac_without_workloads())
    with pytest.raises(ApiError):
        Kube(kc).list("Workload", ns)
    ctl = controller(env, kc)
    create_task(kube, ns, name, resume=True, retries=0)
    wait_status(kube, ns, name, is_running, "Running", ctl)

    preempt(kube, ns)
    s = wait_status(kube, ns, name, lambda s: s.get("attempt") == 2, "attempt 2 (system retry)", ctl)
    _bounce(ctl, "attempt-ended", kill_at)
    assert s["userRetriesUsed"] == 0 and s["systemRetriesUsed"] == 1, s
    assert attempt_outcomes(s)[0] == (1, "SystemRetry", "GangEvicted"), s["attempts"]

    finish_preemptor(kube, ns)
    wait_status(kube, ns, name, is_running, "attempt 2 Running", ctl)
    finish_task(kube, ns, name, 2)
    s = wait_status(kube, ns, name, lambda s: s.get("phase") == "Succeeded", "Succeeded", ctl)
    assert s["attempt"] == 2 and s["userRetriesUsed"] == 0 and s["systemRetriesUsed"] == 1, s
    rec.assert_one_per_attempt(2)
    for run in ctl.runs:  # the hint, once per process
        text = run.log.read_text(errors="replace")
        assert text.count(RBAC_HINT) <= 1, text[-4000:]
    assert ctl.runs[0].log.read_text(errors="replace").count(RBAC_HINT) == 1, ctl.runs[0].tail(60)


# ------------------------------------------------------------------------------- tests


def test_s11_preempted_task_waits_on_its_attempt_and_resumes_after_readmission(env) -> None:
    scenario_resume(env)


def test_preemption_without_resume_is_a_user_retry_with_a_fresh_jobset(env) -> None:
    scenario_no_resume(env)


def test_s11_deactivation_while_waiting_for_readmission_is_a_system_retry(env) -> None:
    scenario_deactivated(env)


def test_controller_that_cannot_read_workloads_degrades_evictions_to_system_retries(env) -> None:
    scenario_rbac(env)


# SIGKILL of the controller at the points that matter, then a restart: the same outcome, one JobSet
# per attempt, no retry counted twice.


def test_sigkill_after_running_after_preemption_and_after_readmission(env) -> None:
    scenario_resume(env, frozenset({"running", "preempted", "readmitted"}))


def test_sigkill_right_after_a_user_retry(env) -> None:
    scenario_no_resume(env, frozenset({"attempt-ended"}))


def test_sigkill_right_after_deactivation_and_after_the_system_retry(env) -> None:
    scenario_deactivated(env, frozenset({"deactivated", "attempt-ended"}))


def test_sigkill_right_after_a_system_retry_without_workload_rights(env) -> None:
    scenario_rbac(env, frozenset({"attempt-ended"}))


def test_preemption_while_the_controller_is_down(env) -> None:
    """The controller is dead while Kueue preempts the gang; the new process finds it waiting."""
    cp, ns, rec, _ = env
    kube, name = cp.kube, "train"
    ctl = controller(env)
    create_task(kube, ns, name, resume=True, retries=0)
    wait_status(kube, ns, name, is_running, "Running", ctl)
    uid = jobset_uid(kube, ns, "train-1")
    ctl.kill()
    preempt(kube, ns)
    kube.wait_for("Workload evicted", lambda: has_condition(workload_of_jobset(kube, ns, uid), "Evicted"),
                  timeout=TIMEOUT, interval=0.2)
    kube.wait_for("JobSet suspended", lambda: kube.get("JobSet", "train-1", ns)["spec"].get("suspend") is True,
                  timeout=TIMEOUT, interval=0.2)
    ctl.start()
    s = wait_status(kube, ns, name, is_waiting_for_readmission, "waiting for re-admission", ctl)
    assert s["attempt"] == 1
    finish_preemptor(kube, ns)
    wait_status(kube, ns, name, lambda s: s.get("reason") == "running (restart attempt 0)"
                and not s.get("eviction"), "readmitted", ctl)
    finish_task(kube, ns, name, 1)
    s = wait_status(kube, ns, name, lambda s: s.get("phase") == "Succeeded", "Succeeded", ctl)
    assert s["attempt"] == 1 and s["userRetriesUsed"] == 0 and s["systemRetriesUsed"] == 0, s
    rec.assert_one_per_attempt(1)
    assert condition({"status": s}, "Finished")["status"] == "True"


def test_the_preempted_event_names_the_preemptor(env) -> None:
    """Issue 27, item 11: on a real API server with Kueue, the Preempted event names what preempted the
    gang (here a plain Job), from the job UID in Kueue's preemption message."""
    cp, ns, _rec, _ = env
    kube, name = cp.kube, "train"
    ctl = controller(env)
    create_task(kube, ns, name, resume=True, retries=0)
    wait_status(kube, ns, name, is_running, "Running", ctl)
    preempt(kube, ns)
    wait_status(kube, ns, name, is_waiting_for_readmission, "preempted, waiting for re-admission", ctl)

    def preempted() -> list[dict]:
        return [e for e in kube.list("Event", ns) if e.get("reason") == "Preempted"
                and (e.get("involvedObject") or {}).get("name") == name]

    [event] = kube.wait_for("the Preempted event", preempted, timeout=TIMEOUT, interval=0.2)
    assert event["message"].startswith("preempted by Job urgent; " + PREEMPTED_PREFIX), event["message"]


class Replicas:
    """Two `gangrun controller` processes electing a leader through one Lease."""

    def __init__(self, env) -> None:
        cp, ns, _rec, controllers = env
        self.kube, self.ns = cp.kube, ns
        self.by_identity = {i: ControllerProcess(cp, ns, identity=i).start() for i in ("replica-a", "replica-b")}
        controllers.extend(self.by_identity.values())

    def check(self) -> None:
        for c in self.by_identity.values():
            c.check()

    def holder(self) -> str:
        try:
            lease = self.kube.get("Lease", LEASE_NAME, self.ns)
        except ApiError:
            return ""
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    def leader(self) -> str:
        return str(self.kube.wait_for("a replica leading", lambda: self.holder() in self.by_identity
                                      and self.holder(), timeout=TIMEOUT, interval=0.1))

    def other(self, identity: str) -> str:
        return next(i for i in self.by_identity if i != identity)


def test_two_replicas_hand_over_when_the_leader_dies_and_when_it_stops(env) -> None:
    """Two controllers, one Lease. The leader is SIGKILLed as Kueue preempts the gang: the standby leads once
    the dead one's Lease has expired and finds the gang waiting on its attempt. The killed one comes back as
    the standby; then the new leader is stopped (SIGTERM) as the gang is readmitted: it gives the Lease up,
    and the other leads within its retry period. One JobSet, one eviction, no retry, attempt 1."""
    cp, ns, rec, _ = env
    kube, name = cp.kube, "train"
    replicas = Replicas(env)
    first = replicas.leader()
    create_task(kube, ns, name, resume=True, retries=0)
    wait_status(kube, ns, name, is_running, "Running", replicas)

    t0 = time.monotonic()
    replicas.by_identity[first].kill()
    preempt(kube, ns)
    s = wait_status(kube, ns, name, is_waiting_for_readmission, "preempted, seen by the standby", replicas)
    killed_to_waiting = time.monotonic() - t0
    second = replicas.leader()
    assert second == replicas.other(first) and s["attempt"] == 1, (second, s)
    replicas.by_identity[first].start()

    t1 = time.monotonic()
    replicas.by_identity[second].stop()
    third = str(kube.wait_for("the standby leading", lambda: replicas.holder() == first and first,
                              timeout=TIMEOUT, interval=0.05))
    stopped_to_leading = time.monotonic() - t1
    finish_preemptor(kube, ns)
    wait_status(kube, ns, name, lambda s: s.get("reason") == "running (restart attempt 0)"
                and not s.get("eviction"), "readmitted, seen by the first replica again", replicas)
    finish_task(kube, ns, name, 1)
    s = wait_status(kube, ns, name, lambda s: s.get("phase") == "Succeeded", "Succeeded", replicas)
    assert third == first
    assert (s["attempt"], s["userRetriesUsed"], s["systemRetriesUsed"]) == (1, 0, 0), s
    assert [e["kind"] for e in s["evictions"]] == ["Preempted"], s["evictions"]
    rec.assert_one_per_attempt(1)
    print(f"\nleader SIGKILLed -> the standby has the preempted gang waiting: {killed_to_waiting:.1f} s; "
          f"leader stopped -> the standby leads: {stopped_to_leading:.2f} s")
    # A Lease not given up would hold the standby off for its whole duration after the last renewal.
    assert stopped_to_leading < LEASE_DURATION, stopped_to_leading
