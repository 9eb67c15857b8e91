"""Kueue's API strings: the only module that spells them.

Source: Kueue v0.17–v0.19 (API `kueue.x-k8s.io/v1beta2`), its `pkg/workload` and `apis/kueue` packages;
the strings were checked against real Workloads captured in tests/fixtures/kube.
Everything else compares against these names, never against string literals.
"""

from __future__ import annotations

import re

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
WORKLOADS = "workloads"

# Labels a job carries for Kueue, and the one Kueue puts on the Workload it creates for the job.
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

# Workload condition types (§1.4).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
PODS_READY = "PodsReady"
FINISHED = "Finished"
DEACTIVATION_TARGET = "DeactivationTarget"

# Evicted reasons (§1.5). Deactivation is matched by prefix, as Kueue's own IsEvictedByDeactivation does.
EVICTED_BY_PREEMPTION = "Preempted"
EVICTED_BY_PODS_READY_TIMEOUT = "PodsReadyTimeout"
EVICTED_BY_ADMISSION_CHECK = "AdmissionCheck"
EVICTED_BY_CLUSTER_QUEUE_STOPPED = "ClusterQueueStopped"
EVICTED_BY_LOCAL_QUEUE_STOPPED = "LocalQueueStopped"
EVICTED_DUE_TO_NODE_FAILURES = "NodeFailures"
EVICTED_ON_MANAGER_CLUSTER = "EvictedOnManagerCluster"
EVICTED_BY_FLAVOR_MIGRATION = "FlavorMigration"
DEACTIVATED = "Deactivated"
DEACTIVATED_DUE_TO_MAX_EXEC_TIME = "DeactivatedDueToMaximumExecutionTimeExceeded"
INACTIVE_WORKLOAD_LEGACY = "InactiveWorkload"  # Kueue <= v0.9

# Preempted condition reasons (§1.6) and their human texts, as Kueue writes them into messages.
IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
HUMAN_PREEMPTION_REASONS = {
    IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    IN_COHORT_RECLAMATION: "reclamation within the cohort",
    IN_COHORT_FAIR_SHARING: "Fair Sharing within the cohort",
    IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
}

# QuotaReserved / Admitted / Requeued / PodsReady reasons and messages used by the local twin.
QUOTA_RESERVED_REASON = "QuotaReserved"
PENDING = "Pending"
INADMISSIBLE = "Inadmissible"
NO_RESERVATION = "NoReservation"
BACKOFF_FINISHED = "BackoffFinished"
REACTIVATED = "Reactivated"
PODS_READY_STARTED = "Started"
PODS_READY_RECOVERED = "Recovered"
PODS_READY_WAIT_FOR_START = "WaitForStart"
PODS_READY_WAIT_FOR_RECOVERY = "WaitForRecovery"
FINISHED_SUCCEEDED = "Succeeded"
FINISHED_FAILED = "Failed"

MSG_ADMITTED = "The workload is admitted"
MSG_NO_RESERVATION = "The workload has no reservation"
MSG_DEACTIVATED = "The workload is deactivated"
MSG_REACTIVATED = "The workload was reactivated"
MSG_PODS_READY = "All pods reached readiness and the workload is running"
MSG_PODS_NOT_READY = "Not all pods are ready or succeeded"
MSG_PODS_WAIT_FOR_RECOVERY = "At least one pod has failed, waiting for recovery"
MSG_BACKOFF_FINISHED = "The workload backoff was finished"


def quota_reserved_message(cluster_queue: str) -> str:
    return f"Quota reserved in ClusterQueue {cluster_queue}"


def local_queue_missing_message(queue: str) -> str:
    """The QuotaReserved=False/Inadmissible message for a job naming a LocalQueue that does not exist."""
    return f"LocalQueue {queue} doesn't exist"


def preemption_message(*, workload_uid: str, job_uid: str, reason: str, preemptor_path: str,
                       preemptee_path: str) -> str:
    """Kueue's Evicted/Preempted message for a preemption (v0.15+ format, with the path suffix)."""
    human = HUMAN_PREEMPTION_REASONS.get(reason, "UNKNOWN")
    return (f"Preempted to accommodate a workload (UID: {workload_uid}, JobUID: {job_uid}) due to {human}; "
            f"preemptor path: {preemptor_path}; preemptee path: {preemptee_path}")


_PREEMPTOR_JOB_UID = re.compile(r"^Preempted to accommodate a workload \(UID: [^,)]*, JobUID: ([^,)\s]+)\)")


def preemptor_job_uid(message: str) -> str:
    """The UID of the preemptor's job in a preemption message (§1.6: matched by its start, as the
    path suffix came in v0.15), or "" when the message is not one."""
    found = _PREEMPTOR_JOB_UID.match(message)
    return found.group(1) if found else ""


def pods_ready_timeout_message(namespace: str, workload: str) -> str:
    return f"Exceeded the PodsReady timeout {namespace}/{workload}"


def node_failures_message(nodes: str) -> str:
    return f"Workload was evicted as there was no replacement for unhealthy node(s): {nodes}"


def previously(message: str) -> str:
    """What Kueue writes into Evicted/Preempted when it readmits: the old message behind `Previously: `."""
    return f"Previously: {message}"


def is_deactivation_reason(reason: str) -> bool:
    """Kueue's IsEvictedByDeactivation is a prefix match; `InactiveWorkload` is the pre-v0.10 spelling."""
    return reason.startswith(DEACTIVATED) or reason == INACTIVE_WORKLOAD_LEGACY


KIND = "Workload"
WORKLOAD_PRIORITY_CLASSES = "workloadpriorityclasses"
LOCAL_QUEUES = "localqueues"
CLUSTER_QUEUES = "clusterqueues"  # cluster-scoped

# Kueue's on-demand visibility API (feature VisibilityOnDemand, an aggregated API served by Kueue):
# GET /apis/<group>/<version>/namespaces/<ns>/localqueues/<lq>/pendingworkloads lists the pending
# Workloads of a LocalQueue in admission order, each with its 0-based positionInLocalQueue.
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSION = "v1beta2"
PENDING_WORKLOADS = "pendingworkloads"
POSITION_IN_LOCAL_QUEUE = "positionInLocalQueue"
