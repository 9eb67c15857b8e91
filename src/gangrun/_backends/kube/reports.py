"""What the workers report, read from their pods: the newest checkpoint each committed, its first step
after a load, what spec.checkpoint.resumeFrom gave its load (`gangrun._checkpoint_report`).

A worker reports in its container's termination message as it exits, and a running one serves its
newest report live (`live_reports.py`). Total functions, as in `adapter.py`: a pod that says nothing
readable reports nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from gangrun import _checkpoint_report as checkpoint_report
from gangrun._backends.kube import adapter


def reports_for(worker_attempt: int | None, attempt: int) -> bool:
    """Whether what a worker of `worker_attempt` reports counts for a task at `attempt`: its own, and the
    ended attempt's, whose workers leave their newest commit as they exit, after the next attempt
    began; that commit is what the next attempt loads and what the stop lost work from."""
    return worker_attempt in (attempt - 1, attempt)


def checkpoints(pods: Iterable[Any], live: Mapping[str, str] | None = None) -> list[checkpoint_report.Commit]:
    """The newest committed checkpoint each worker reported: in its termination message, or `live`
    (pod uid -> the report a running worker served, `live_reports.py`)."""
    return [mark for _, message in _reports(pods, live) if (mark := checkpoint_report.read(message)) is not None]


def first_steps(pods: Iterable[Any], live: Mapping[str, str] | None = None) -> list[tuple[int | None, dict[str, Any]]]:
    """(attempt, report) of each worker's first step after its load, from the same reports (the report's
    `time` is a datetime; see `gangrun._checkpoint_report.first_step`)."""
    return [(adapter.attempt_of(pod), s) for pod, message in _reports(pods, live)
            if (s := checkpoint_report.first_step(message)) is not None]


def resumes(pods: Iterable[Any], live: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """What spec.checkpoint.resumeFrom gave each worker's newest load, from the same reports."""
    return [r for _, message in _reports(pods, live) if (r := checkpoint_report.resume(message)) is not None]


def _reports(pods: Iterable[Any], live: Mapping[str, str] | None) -> Iterator[tuple[dict[str, Any], str]]:
    """(pod, report) of every termination message the worker container left, current and last state,
    and of the live report the running worker served."""
    for pod in pods:
        if not isinstance(pod, dict):
            continue
        for message in adapter.termination_messages(pod):
            yield pod, message
        if live and (text := live.get(adapter.uid(pod))):
            yield pod, text
