"""kwok's stages for the test cluster: how fake pods become Ready, complete, fail and go away.

kwok's own fast stages (nodes initialised and kept alive, pods Ready at once, deleted pods gone at once) and
stages of our own driven by pod annotations (:data:`ANNOTATION_COMPLETE_AFTER` and the others below: the pod
template's annotations reach the pods), and a kubelet's answer to a disruption: a pod evicted with the condition
DisruptionTarget (the Eviction API, ``kubectl drain``) is stopped Failed with exit 143 before it goes, as a
kubelet's SIGTERM would end it.
"""

from __future__ import annotations

import copy
from pathlib import Path

from tests.harness.binaries import load_yaml_docs

# Pod annotations that drive kwok (the pod template's annotations reach the pods).
# Value: a Go duration ("0s", "5s") or an RFC 3339 time at which the pod ends.
ANNOTATION_COMPLETE_AFTER = "gang.test/complete-after"
ANNOTATION_FAIL_AFTER = "gang.test/fail-after"
# With ANNOTATION_FAIL_AFTER, the exit code written into the container status (default 1).
ANNOTATION_EXIT_CODE = "gang.test/exit-code"
# A pod with this annotation stays Pending (bound, never Running/Ready).
ANNOTATION_NEVER_READY = "gang.test/never-ready"
# With ANNOTATION_COMPLETE_AFTER or ANNOTATION_FAIL_AFTER, the worker container's termination message
# (what gangrun.launch writes there: the newest committed checkpoint).
ANNOTATION_TERMINATION_MESSAGE = "gang.test/termination-message"
# A Go duration: a pod being deleted stays that long before it is gone, as a kubelet that gives its
# containers their grace period (without it kwok removes a deleted pod at once).
ANNOTATION_TERMINATE_AFTER = "gang.test/terminate-after"


def stage_docs(stages_dir: Path) -> list[dict]:
    """The stages kwok runs with (``stages_dir``: kwok's ``kustomize/stage`` folder)."""
    docs: list[dict] = []
    for rel in ("node/fast/node-initialize.yaml", "node/heartbeat/node-heartbeat.yaml",
                "pod/fast/pod-ready.yaml", "pod/fast/pod-delete.yaml"):
        docs += load_yaml_docs(stages_dir / rel)
    for doc in docs:
        if doc["metadata"]["name"] == "pod-ready":
            doc["spec"]["selector"].setdefault("matchExpressions", []).append(
                {"key": f'.metadata.annotations["{ANNOTATION_NEVER_READY}"]',
                 "operator": "DoesNotExist"})
        if doc["metadata"]["name"] == "pod-delete":
            # A disrupted pod is stopped first (see _own_pod_stages), and a slow one waits.
            doc["spec"]["selector"].setdefault("matchExpressions", []).extend([
                {"key": _DISRUPTION_TARGET, "operator": "NotIn", "values": ["True"]},
                {"key": f'.metadata.annotations["{ANNOTATION_TERMINATE_AFTER}"]', "operator": "DoesNotExist"}])
    return docs + _own_pod_stages(stages_dir)


_DISRUPTION_TARGET = '.status.conditions.[] | select( .type == "DisruptionTarget" ) | .status'


def _own_pod_stages(stages_dir: Path) -> list[dict]:
    """Complete or fail a Running pod when the test puts an annotation on it; stop a pod being
    deleted with the condition DisruptionTarget (the Eviction API, `kubectl drain`) as a kubelet does:
    Failed with exit 143 once SIGTERM ended it, so the Job's podFailurePolicy sees a failed pod."""
    complete = load_yaml_docs(stages_dir / "pod/general/pod-complete.yaml")[0]
    complete["metadata"]["name"] = "pod-complete-on-annotation"
    complete["spec"]["selector"] = {"matchExpressions": [
        {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
        {"key": ".status.phase", "operator": "In", "values": ["Running"]},
        {"key": f'.metadata.annotations["{ANNOTATION_COMPLETE_AFTER}"]', "operator": "Exists"},
        {"key": f'.metadata.annotations["{ANNOTATION_FAIL_AFTER}"]', "operator": "DoesNotExist"},
    ]}
    complete["spec"]["delay"] = {
        "durationMilliseconds": 0,
        "durationFrom": {"expressionFrom": f'.metadata.annotations["{ANNOTATION_COMPLETE_AFTER}"]'},
    }
    complete["spec"].pop("weight", None)
    complete["spec"].pop("weightFrom", None)
    fail = copy.deepcopy(complete)
    fail["metadata"]["name"] = "pod-fail-on-annotation"
    fail["spec"]["selector"] = {"matchExpressions": [
        {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
        {"key": ".status.phase", "operator": "In", "values": ["Running"]},
        {"key": f'.metadata.annotations["{ANNOTATION_FAIL_AFTER}"]', "operator": "Exists"},
    ]}
    fail["spec"]["delay"] = {
        "durationMilliseconds": 0,
        "durationFrom": {"expressionFrom": f'.metadata.annotations["{ANNOTATION_FAIL_AFTER}"]'},
    }
    fail["spec"]["next"]["statusTemplate"] = _FAIL_STATUS_TEMPLATE
    complete["spec"]["next"]["statusTemplate"] = _COMPLETE_STATUS_TEMPLATE
    terminate = copy.deepcopy(fail)
    terminate["metadata"]["name"] = "pod-terminate-disrupted"
    terminate["spec"]["selector"] = {"matchExpressions": [
        {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
        {"key": ".status.phase", "operator": "In", "values": ["Pending", "Running"]},
        {"key": _DISRUPTION_TARGET, "operator": "In", "values": ["True"]},
    ]}
    terminate["spec"]["delay"] = {"durationMilliseconds": 0}
    terminate["spec"]["next"]["statusTemplate"] = _TERMINATED_STATUS_TEMPLATE
    gone = copy.deepcopy(terminate)
    gone["metadata"]["name"] = "pod-delete-terminated"
    gone["spec"]["selector"] = {"matchExpressions": [
        {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
        {"key": ".status.phase", "operator": "In", "values": ["Failed", "Succeeded"]},
    ]}
    gone["spec"]["next"] = {"delete": True}
    slow = copy.deepcopy(gone)
    slow["metadata"]["name"] = "pod-delete-after-annotation"
    slow["spec"]["selector"] = {"matchExpressions": [
        {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
        {"key": _DISRUPTION_TARGET, "operator": "NotIn", "values": ["True"]},
        {"key": f'.metadata.annotations["{ANNOTATION_TERMINATE_AFTER}"]', "operator": "Exists"},
    ]}
    slow["spec"]["delay"] = {
        "durationMilliseconds": 0,
        "durationFrom": {"expressionFrom": f'.metadata.annotations["{ANNOTATION_TERMINATE_AFTER}"]'},
    }
    return [complete, fail, terminate, gone, slow]


# The container statuses of a completed pod, kwok's general pod-complete template with the worker's
# termination message.
_COMPLETE_STATUS_TEMPLATE = """
{{ $now := Now }}
{{ $root := . }}
{{ $msg := index (or .metadata.annotations dict) "MESSAGE_ANNOTATION" }}
containerStatuses:
{{ range $index, $item := .spec.containers }}
- image: {{ $item.image | Quote }}
  name: {{ $item.name | Quote }}
  ready: true
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
      {{ if and $msg (eq $item.name "worker") }}message: {{ $msg | Quote }}{{ end }}
{{ end }}
phase: Succeeded
""".replace("MESSAGE_ANNOTATION", ANNOTATION_TERMINATION_MESSAGE)

# A pod a kubelet stopped for a disruption: SIGTERM ended every container (143); conditions are left
# as they are (the DisruptionTarget condition the podFailurePolicy matches stays).
_TERMINATED_STATUS_TEMPLATE = """
{{ $now := Now }}
containerStatuses:
{{ range $index, $container := .spec.containers }}
- image: {{ $container.image | Quote }}
  name: {{ $container.name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 143
      finishedAt: {{ $now | Quote }}
      reason: Error
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Failed
"""

# The container statuses of a failed pod; same shape as kwok's general pod-complete template.
_FAIL_STATUS_TEMPLATE = """
{{ $now := Now }}
{{ $root := . }}
{{ $exit := or (index (or .metadata.annotations dict) "EXIT_ANNOTATION") "1" }}
{{ $msg := index (or .metadata.annotations dict) "MESSAGE_ANNOTATION" }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: PodFailed
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: PodFailed
  type: ContainersReady
containerStatuses:
{{ range $index, $container := .spec.containers }}
- image: {{ $container.image | Quote }}
  name: {{ $container.name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {{ $exit }}
      finishedAt: {{ $now | Quote }}
      reason: Error
      startedAt: {{ $now | Quote }}
      {{ if and $msg (eq $container.name "worker") }}message: {{ $msg | Quote }}{{ end }}
{{ end }}
phase: Failed
""".replace("EXIT_ANNOTATION", ANNOTATION_EXIT_CODE).replace("MESSAGE_ANNOTATION", ANNOTATION_TERMINATION_MESSAGE)  # not str.format: the Go template is full of braces
