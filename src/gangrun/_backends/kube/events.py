"""Timeline events ↔ Kubernetes Events on the ClusteredTask.

The controller writes each `gangrun._core.timeline.Event` as a core/v1 Event whose reason is the
event type, so `kubectl describe clusteredtask NAME` shows the timeline; `gangrun events` reads them
back. The attempt and the structured data travel in annotations. Names are derived from the event's
time, so a reconcile retried after a partial failure re-creates the same Event (AlreadyExists)
instead of a duplicate. Kubernetes expires Events (1h by default), so this timeline is recent history;
the durable record is the status (attempts, evictions).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gangrun._backends.kube import crd
from gangrun._backends.kube.fields import format_time, parse_time
from gangrun._core.timeline import Event, EventType

COMPONENT = "gangrun-controller"
ATTEMPT_ANNOTATION = f"{crd.GROUP}/attempt"
DATA_ANNOTATION = f"{crd.GROUP}/data"
TIME_ANNOTATION = f"{crd.GROUP}/time"  # firstTimestamp has whole seconds only; the timeline needs order
MESSAGE_LIMIT = 1024


def event_name(task: str, event: Event, index: int) -> str:
    """`<task>.<time in hex><digest>`: the same event retried gets the same name; different ones do not."""
    nanos = int(event.time.timestamp() * 1_000_000) * 1000
    digest = hashlib.sha256(f"{event.type.value}\n{event.attempt}\n{event.message}".encode()).hexdigest()[:8]
    return f"{task}.{nanos:x}{index:02x}{digest}"


def to_k8s(task: dict[str, Any], event: Event, *, type_: str, index: int = 0,
           instance: str = "") -> dict[str, Any]:
    md = task.get("metadata") or {}
    name, namespace = md.get("name", ""), md.get("namespace", "")
    annotations = {TIME_ANNOTATION: event.time.isoformat()}
    if event.attempt is not None:
        annotations[ATTEMPT_ANNOTATION] = str(event.attempt)
    if event.data:
        annotations[DATA_ANNOTATION] = json.dumps(event.data, sort_keys=True, default=str)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": event_name(name, event, index), "namespace": namespace, "annotations": annotations},
        "involvedObject": {"apiVersion": crd.API_VERSION, "kind": crd.KIND, "name": name, "namespace": namespace,
                           "uid": md.get("uid", ""), "resourceVersion": md.get("resourceVersion", "")},
        "reason": event.type.value,
        "message": event.message[:MESSAGE_LIMIT],
        "type": type_,
        "count": 1,
        "firstTimestamp": format_time(event.time),
        "lastTimestamp": format_time(event.time),
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance or COMPONENT,
    }


def from_k8s(obj: Any) -> Event | None:
    """The timeline event of a Kubernetes Event gangrun wrote; None for any other or malformed Event."""
    if not isinstance(obj, dict):
        return None
    try:
        type_ = EventType(obj.get("reason", ""))
    except ValueError:
        return None
    md = obj.get("metadata") or {}
    annotations = md.get("annotations") or {}
    when = (annotations.get(TIME_ANNOTATION) or obj.get("eventTime") or obj.get("lastTimestamp")
            or obj.get("firstTimestamp") or md.get("creationTimestamp"))
    time = parse_time(when)
    if time is None:
        return None
    attempt = annotations.get(ATTEMPT_ANNOTATION, "")
    try:
        data = json.loads(annotations.get(DATA_ANNOTATION) or "{}")
    except ValueError:
        data = {}
    return Event(time=time, type=type_, message=str(obj.get("message") or ""),
                 attempt=int(attempt) if attempt.isdigit() else None, data=data if isinstance(data, dict) else {})
