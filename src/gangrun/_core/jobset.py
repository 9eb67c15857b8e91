"""JobSet's API strings: the only module that spells them.

Source: kubernetes-sigs/jobset v0.11–v0.12 (`jobset.x-k8s.io/v1alpha2`): `api/jobset/v1alpha2`,
`pkg/constants` and `pkg/controllers`.
"""

from __future__ import annotations

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "JobSet"
PLURAL = "jobsets"
CONTROLLER_NAME = "jobset.sigs.k8s.io/jobset-controller"

# Condition types and reasons (§6).
COMPLETED = "Completed"
FAILED = "Failed"
SUSPENDED = "Suspended"
RESTARTING = "RestartingJobSet"
STARTUP_POLICY_COMPLETED = "StartupPolicyCompleted"

ALL_JOBS_COMPLETED = "AllJobsCompleted"
FAILED_JOBS = "FailedJobs"
REACHED_MAX_RESTARTS = "ReachedMaxRestarts"
SUSPENDED_JOBS = "SuspendedJobs"
RESUME_JOBS = "ResumeJobs"
DEFAULT_FAILURE_POLICY = "DefaultFailurePolicy"

MSG_COMPLETED = "jobset completed successfully"
MSG_SUSPENDED = "jobset is suspended"
MSG_RESUMED = "jobset is resumed"
JOBS_READY = "JobsReady"  # RestartingJobSet=False once the restarted gang is ready again (v0.12+)
JOBSET_SUSPENDED = "JobSetSuspended"  # RestartingJobSet=False when the JobSet is suspended mid-restart
MSG_JOBS_READY = "all jobs are ready"


def failed_jobs_message(first_failed_job: str) -> str:
    return f"jobset failed due to one or more job failures (first failed job: {first_failed_job})"


def reached_max_restarts_message(first_failed_job: str) -> str:
    return f"jobset failed due to reaching max number of restarts (first failed job: {first_failed_job})"


def restarting_message(first_failed_job: str) -> str:
    return f"applying RestartJobSet failure policy action (first failed job: {first_failed_job})"


# Labels and annotations JobSet puts on child Jobs and pods (§7).
JOBSET_NAME_KEY = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_KEY = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_NAME_KEY = "jobset.sigs.k8s.io/replicatedjob-name"
RESTART_ATTEMPT_KEY = "jobset.sigs.k8s.io/restart-attempt"
JOB_INDEX_KEY = "jobset.sigs.k8s.io/job-index"
JOB_COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
# With backoffLimitPerIndex, the Job controller counts on a replacement pod the failures of its index that a
# podFailurePolicy Ignore rule left uncounted (k8s.io/api v0.36 batch/v1 JobIndexIgnoredFailureCountAnnotation)
JOB_INDEX_IGNORED_FAILURE_COUNT_KEY = "batch.kubernetes.io/job-index-ignored-failure-count"

# Spec values a client writes itself because it cannot rely on JobSet's defaulting webhook,
# and the downward-API path of the restart counter (§7).
SUCCESS_POLICY_ALL = "All"
STARTUP_ANY_ORDER = "AnyOrder"
RESTART_STRATEGY_RECREATE = "Recreate"
DEFAULT_GROUP_NAME = "default"
RESTART_ATTEMPT_FIELD_PATH = f"metadata.annotations['{RESTART_ATTEMPT_KEY}']"
JOB_COMPLETION_INDEX_FIELD_PATH = f"metadata.annotations['{JOB_COMPLETION_INDEX_KEY}']"
JOB_INDEX_IGNORED_FAILURE_COUNT_FIELD_PATH = f"metadata.annotations['{JOB_INDEX_IGNORED_FAILURE_COUNT_KEY}']"
JOB_COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"  # injected by the Job controller into Indexed pods

# Node disruptions (jobset@v0.12.0 pkg/constants/constants.go, pkg/controllers/failure_policy.go;
# k8s.io/api v0.36 core/v1 and batch/v1). A pod that a drain, a spot reclaim, a taint or a kubelet's
# node-pressure eviction takes away carries the condition DisruptionTarget (reasons below); the Job's
# podFailurePolicy fails the Job for it with reason PodFailurePolicy, and a JobSet rule on that reason
# with RestartJobSetAndIgnoreMaxRestarts restarts the gang without counting toward maxRestarts.
DISRUPTION_TARGET = "DisruptionTarget"
DISRUPTION_EVICTION_API = "EvictionByEvictionAPI"  # "Eviction API: evicting" (kubectl drain)
DISRUPTION_TAINT_MANAGER = "DeletionByTaintManager"  # "Taint manager: deleting due to NoExecute taint"
DISRUPTION_POD_GC = "DeletionByPodGC"  # "PodGC: node no longer exists"
DISRUPTION_KUBELET = "TerminationByKubelet"  # node-pressure eviction, graceful node shutdown
DISRUPTION_SCHEDULER = "PreemptionByScheduler"  # "<scheduler>: preempting to accommodate a higher priority pod"
MSG_EVICTION_API = "Eviction API: evicting"
JOB_REASON_POD_FAILURE_POLICY = "PodFailurePolicy"  # the child Job's Failed reason
RESTART_IGNORING_MAX_RESTARTS = "RestartJobSetAndIgnoreMaxRestarts"
DISRUPTION_RULE = "restartOnDisruption"  # gangrun's rule; JobSet's rule-name pattern admits no '-'
RESTARTING_REASON_DISRUPTION = f"FailurePolicy_{DISRUPTION_RULE}"  # RestartingJobSet's reason for that rule


def restarting_ignoring_max_message(first_failed_job: str) -> str:
    return f"applying RestartJobSetAndIgnoreMaxRestarts failure policy action (first failed job: {first_failed_job})"


def pod_failure_policy_condition_message(namespace: str, pod: str, condition: str, index: int) -> str:
    """The Job's Failed message when a pod condition matched a FailJob rule (k8s pkg/controller/job)."""
    return f"Pod {namespace}/{pod} has condition {condition} matching FailJob rule at index {index}"
