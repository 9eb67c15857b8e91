"""How the CLI prints tasks, timelines and tables. Text for people, `-o json` for programs.

The views it prints are typed (`gangrun._core.view_types`): a key read here that the view does not
have is a type error.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from gangrun._core.checkpoint_root import describe as describe_resume_from
from gangrun._core.timeline import Event
from gangrun._core.units import format_bytes, format_duration
from gangrun._core.view_types import AttemptView, ListedView, TaskView


def emit_json(doc: Any) -> None:
    json.dump(doc, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    return "\n".join(lines)


def task_rows(views: Sequence[ListedView]) -> str:
    rows = [[v["name"], v["phase"], str(v["attempt"]), shorten_reason(v["reason"], REASON_WIDTH)] for v in views]
    return table(rows, ["NAME", "PHASE", "ATTEMPT", "REASON"])


TIMELINE = "[gangrun]"
_SOURCE_WIDTH = len(TIMELINE)


def prefixed(source: str, text: str) -> str:
    """A line of `gangrun run`: its source (`[gangrun]`, `[rank N]`) in a fixed-width column, then the text."""
    return f"{source:<{_SOURCE_WIDTH}} {text}"


def waiting_why(view: TaskView) -> str:
    """Why a task waits, while it waits: its place in the queue and Kueue's message (or gangrun's reason);
    "" once it runs or ended."""
    waiting = view["phase"] in ("Queued", "WaitingForResources") or "waiting for re-admission" in view["reason"]
    if not waiting:
        return ""
    position, pending = view.get("queuePosition"), view.get("pending")
    where = f"#{position} in queue {view.get('queue') or 'default'}" if position else ""
    why = pending or view["reason"]
    return f"{where}: {why}" if where else why


def status_line(view: TaskView, *, elapsed: float, width: int = 119) -> str:
    """The live line under `gangrun run`'s output: time, phase, attempt, and what is happening or why it waits."""
    seconds = int(elapsed)
    head = f"[{seconds // 60:02d}:{seconds % 60:02d}] {view['phase']}  attempt {view['attempt']}  "
    return head + shorten_reason(waiting_why(view) or view["reason"], max(20, width - len(head)))


def event_line(e: Event) -> str:
    attempt = f"attempt {e.attempt}" if e.attempt else ""
    return f"{_clock(e.time)}  {e.type.value:<22} {attempt:<10} {e.message}"


def describe(view: TaskView, events: list[Event]) -> str:
    out = [
        f"Name:           {view['name']}",
        f"Phase:          {view['phase']} (version {view['phaseVersion']})",
        f"Reason:         {view['reason']}",
        f"Attempt:        {view['attempt']}   restart attempt {view['restartAttempt']}",
        f"Retries used:   user {view['userRetriesUsed']}, system {view['systemRetriesUsed']}"
        + (f" ({view['retriesLeft']} user retries left)" if view.get("retriesLeft") is not None else ""),
    ]
    if view.get("pending") or view.get("queuePosition"):
        out.append(f"Waiting:        {waiting_why(view)}")
    for key, label in (("queue", "Queue"), ("priorityClass", "Priority"), ("namespace", "Namespace"),
                       ("checkpointRoot", "Checkpoints"), ("resumeFrom", "Resumes from")):
        value = view.get(key)
        if value not in (None, ""):
            out.append(f"{label + ':':<16}{value}" + (_resume_result(view) if key == "resumeFrom" else ""))
    if "executable" in view:  # local: the command's argv[0], found on the submitter's PATH at submit
        missing = "not found on the submitting PATH (the workers cannot start)"
        out.append(f"Executable:     {view.get('executable') or missing}")
    if view.get("code"):
        out.append(f"Error:          {view['code']}: {view.get('message', '')}")
    if view.get("evictionsByCause"):
        causes = ", ".join(f"{k} {v}" for k, v in view["evictionsByCause"].items())
        waited = view.get("waitingForReadmissionSeconds") or 0
        # An eviction that ended its attempt was never waited out: no wait to report (S4 vs S5).
        out.append(f"Evictions:      {causes}" + (f"; waited {waited:.1f}s for re-admission" if waited > 0 else ""))
    accounting = view.get("accounting")
    if isinstance(accounting, dict) and accounting:
        out.append("Accounting:")
        out.extend(accounting_lines(accounting, indent=2))
        grace = accounting.get("grace")
        if isinstance(grace, dict) and grace.get("sufficient") is False:
            out.append(f"Grace period:   WARNING: {grace.get('message')}")
    out.append("Attempts:")
    out.extend(attempt_lines(view["attempts"]))
    out.append("Events:")
    out.extend("  " + event_line(e) for e in events)
    return "\n".join(out)


def _resume_result(view: TaskView) -> str:
    """What resumeFrom gave the load, after its source: the checkpoint, or a warning that it held none."""
    result = view.get("resumeFromResult")
    if not isinstance(result, dict):
        return ""
    if result.get("found"):
        return f" (loaded {result.get('uri')}, step {result.get('step')})"
    return " (WARNING: it held no complete checkpoint; the task started from scratch)"


LABEL_WIDTH = 30  # the accounting's values line up after their labels, at every depth
REASON_LINE = 100  # an attempt's reason wraps at this width; it is never cut


def accounting_lines(doc: Mapping[str, Any], *, indent: int, seconds: bool = False) -> list[str]:
    """The accounting as labelled lines with units, whatever its keys: `queuedSeconds` is "queued  3.0 s",
    `goodput` a percentage, a nested mapping an indented block (a key ending in Seconds gives its
    children seconds), a list one indented line per item. New keys print the same way."""
    out = []
    labels = {key: _label(key) for key in doc}
    plain = {label for key, (label, _) in labels.items() if not key.endswith("Seconds")}
    for key, value in doc.items():
        label, unit_s = labels[key]
        if key.endswith("Seconds") and label in plain:  # workLostSeconds beside the workLost list
            label += " (total)"
        unit_s = unit_s or seconds
        head = " " * indent + label
        if isinstance(value, dict) and value:
            out.append(head)
            out.extend(accounting_lines(value, indent=indent + 2, seconds=unit_s))
        elif isinstance(value, list) and value:
            out.append(head)
            out.extend(" " * (indent + 2) + _inline(item, seconds=unit_s) for item in value)
        else:
            out.append(f"{head:<{LABEL_WIDTH}} {_value(key, value, seconds=unit_s)}")
    return out


def _label(key: str) -> tuple[str, bool]:
    """`waitingForReadmissionSeconds` -> ("waiting for readmission", True): words, and whether in seconds.
    A key that is a name, not a field (a cause such as `Preempted`), stays as it is."""
    if key[:1].isupper():
        return key, False
    in_seconds = key.endswith("Seconds") and key != "Seconds"
    base = key.removesuffix("Seconds") if in_seconds else key
    words = "".join(f" {c.lower()}" if c.isupper() else c for c in base).strip()
    return words, in_seconds or key == "seconds"


def _value(key: str, v: Any, *, seconds: bool) -> str:
    if v is None or v == [] or v == {}:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if key == "goodput" and isinstance(v, int | float):
        return f"{v * 100:.1f} %"
    if isinstance(v, int | float):
        return _duration(float(v)) if seconds else _num(v)
    if isinstance(v, str):
        return _time(v)
    return str(v)


def _inline(item: Any, *, seconds: bool) -> str:
    """One item of a list on one line: a mapping as `label value` pairs."""
    if not isinstance(item, dict):
        return _value("", item, seconds=seconds)
    parts = []
    for key, v in item.items():
        label, unit_s = _label(key)
        shown = _value(key, v, seconds=unit_s or seconds)
        parts.append(shown if key == "seconds" else f"{label} {shown}")
    return ", ".join(parts)


def _duration(s: float) -> str:
    # Under a second to the millisecond (the accounting's own precision): a 0.042 s save is no "0.0 s".
    text = f"{s:.3f} s" if 0 < abs(s) < 1 else f"{s:.1f} s"
    if abs(s) >= 60:
        whole = round(abs(s))
        h, m, sec = whole // 3600, whole % 3600 // 60, whole % 60
        text += f" ({h}h {m:02d}m {sec:02d}s)" if h else f" ({m}m {sec:02d}s)"
    return text


def _time(text: str) -> str:
    """An ISO time as the local clock (the timeline's form); any other text as it is."""
    if "T" not in text:
        return text
    try:
        return _clock(datetime.fromisoformat(text))
    except ValueError:
        return text


def attempt_lines(attempts: Sequence[AttemptView]) -> list[str]:
    """The attempts table, each attempt's reason whole on the lines below its row (wrapped, never cut)."""
    rows = [[str(a["number"]), _clock_s(a["startedAt"]), _clock_s(a.get("endedAt")), a.get("outcome") or "-"]
            for a in attempts]
    lines = table(rows, ["#", "STARTED", "ENDED", "OUTCOME"]).splitlines()
    out = ["  " + lines[0]]
    for a, line in zip(attempts, lines[1:], strict=True):
        out.append("  " + line)
        reason = " ".join(str(a.get("reason") or "").split())
        if reason:
            out.extend(textwrap.wrap(reason, REASON_LINE, initial_indent="      reason: ",
                                     subsequent_indent=" " * 14, break_long_words=False, break_on_hyphens=False))
    return out


def _num(v: Any) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


REASON_WIDTH = 90


def shorten_reason(text: str, n: int) -> str:
    """At most `n` characters, cut in the middle: a reason starts with its cause and ends with what is
    happening now (`...; waiting for re-admission`), and both must stay readable."""
    text = " ".join(text.split())
    if len(text) <= n:
        return text
    head = _head(text, n)
    return text[:head] + "…" + text[len(text) - (n - 1 - head):]


_TAIL_MIN = 32  # room for the longest "what is happening" ending, "; waiting for re-admission"


def _head(text: str, n: int) -> int:
    """Characters kept from the start: through the cause's parenthesis (`(Preempted, InClusterQueue)`)
    when it fits beside the tail, else half."""
    close = text.find(")")
    return close + 1 if close > 0 and close + 1 <= n - 1 - _TAIL_MIN else n // 2


def _clock(t: datetime) -> str:
    return t.astimezone().strftime("%H:%M:%S")


def _clock_s(iso: str | None) -> str:
    return _clock(datetime.fromisoformat(iso)) if iso else "-"


def run_lines(summary: dict[str, Any]) -> list[str]:
    """What `validate` adds about how the gang runs: its elasticity, where it resumes from, its environment."""
    out = []
    if summary["minNodes"] < summary["nodes"]:
        cooldown = format_duration(timedelta(seconds=summary["resizeCooldown"]))
        out.append(f"elastic: {summary['minNodes']} to {summary['nodes']} node(s), grows back at most once per "
                   f"{cooldown}")
    if summary.get("resumeFrom"):
        out.append(f"resumes from {describe_resume_from(summary['resumeFrom'])} when it has none of its own")
    if summary.get("env"):
        out.append("env " + ", ".join(f"{k}={v}" for k, v in sorted(summary["env"].items())))
    return out


def pod_template_lines(summary: dict[str, Any]) -> list[str]:
    """What `validate` adds about the Kubernetes-side fields: /dev/shm, GPUs, the pod template, and
    which of its fields a local run ignores."""
    out = []
    if summary.get("shmSize"):
        out.append(f"shmSize {format_bytes(summary['shmSize'])} on /dev/shm (kubernetes)")
    gpus = (summary.get("resources") or {}).get("gpu")
    if gpus:
        out.append(f"{gpus} GPU(s) per node, requested as {summary.get('gpuResource')} on kubernetes")
    template = summary.get("podTemplate") or {}
    fields = [f"metadata.{k}" for k, v in (template.get("metadata") or {}).items() if v]
    for key, value in (template.get("spec") or {}).items():
        if key == "containers":
            fields.append("containers " + ", ".join(str(c.get("name")) for c in value))
        elif value not in (None, [], {}):
            fields.append(key)
    if fields:
        out.append("podTemplate (kubernetes): " + "; ".join(fields))
    if summary.get("ignoredLocally"):
        out.append("ignored by the local backend: " + ", ".join(summary["ignoredLocally"]))
    return out
