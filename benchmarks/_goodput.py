"""The goodput storm both tiers play (``python -m benchmarks.bench_goodput``, on the local backend, and
``--tier realnode``, benchmarks/goodput_realnode.py): the storm's shape and its seeded plan, the worker every low
gang runs, and the figures, the side-by-side comparison and its table. In a module of its own so that each tier
imports it and neither imports the other."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

WORKER = """import os, pickle, sys, time
import gangrun

ctx = gangrun.context()
ck = ctx.checkpoint
every, total, dt = int(os.environ["EVERY"]), int(os.environ["STEPS"]), float(os.environ["STEP_SECONDS"])
state = {"step": 0}
path = ck.load()
if path is not None:
    state = pickle.loads(path.read_bytes())
while state["step"] < total:
    if ctx.stop_requested:
        sys.exit(0)  # no final save: it would not fit in the grace period
    time.sleep(dt)
    state["step"] += 1
    if state["step"] % every == 0:
        ck.save(pickle.dumps(state), step=state["step"])
"""


@dataclass(frozen=True)
class Storm:
    gangs: int
    arrivals: int
    steps: int  # steps of work per low gang
    step_seconds: float
    intervals: tuple[int, ...]  # checkpoint every k steps, one per gang (seeded order)
    arrival_window: tuple[float, float]  # high tasks arrive at seeded times in this window (seconds)
    high_seconds: float  # how long each high task runs
    boost_steps: tuple[float, ...]  # node-seconds: the boost's steps, scaled to the storm's time

CONFIGS = [(boost, resume) for resume in (False, True) for boost in (False, True)]


def plan(storm: Storm, seed: int) -> tuple[list[int], list[float]]:
    """The seeded storm: each low gang's checkpoint interval (in submission order) and the arrival times."""
    rng = random.Random(seed)
    intervals = list(storm.intervals[:storm.gangs])
    rng.shuffle(intervals)
    lo, hi = storm.arrival_window
    return intervals, sorted(rng.uniform(lo, hi) for _ in range(storm.arrivals))


def worker_env(storm: Storm, every: int) -> dict[str, str]:
    """What WORKER reads: its checkpoint interval, the steps to train and how long a step takes."""
    return {"EVERY": str(every), "STEPS": str(storm.steps), "STEP_SECONDS": str(storm.step_seconds)}

def figures(views: list[dict[str, Any]], intervals: list[int]) -> dict[str, Any]:
    up = lost = elapsed = 0.0
    badput: dict[str, float] = {}
    preemptions = retries = 0
    per_gang = []
    for v, every in zip(views, intervals, strict=True):
        a = v["accounting"]
        gang_lost = float(a["workLostSeconds"])
        lost += gang_lost
        up += float(a["gangUpSeconds"])
        gp = float(a["goodput"])
        gang_elapsed = (float(a["gangUpSeconds"]) - gang_lost) / gp if gp > 0 else 0.0
        elapsed += gang_elapsed
        for cause, seconds in badput_of(a).items():
            badput[cause] = badput.get(cause, 0.0) + seconds
        preemptions += sum((a.get("preemptionsByCause") or {}).values())
        retries += int(v.get("userRetriesUsed", 0)) + int(v.get("systemRetriesUsed", 0))
        per_gang.append({"name": v["name"], "round": v["round"], "checkpointEvery": every, "workLostSeconds": round(gang_lost, 2),
                         "phase": v["phase"], "stops": [(w["at"][11:22], w["seconds"]) for w in a["workLost"]]})
    return {"workLostSeconds": round(lost, 2), "goodput": round((up - lost) / elapsed, 4) if elapsed else 0.0,
            "badputSeconds": {k: round(s, 2) for k, s in badput.items()}, "preemptions": preemptions,
            "retriesSpent": retries, "gangs": per_gang}


def badput_of(acct: dict[str, Any]) -> dict[str, float]:
    """Badput by cause: the accounting's own breakdown when it has one, else what its fields say."""
    if isinstance(acct.get("badputSeconds"), dict):
        return {k: float(s) for k, s in acct["badputSeconds"].items()}
    return {"queued": float(acct.get("queuedSeconds", 0.0)),
            "waitingForReadmission": float(acct.get("waitingForReadmissionSeconds", 0.0)),
            "workLost": float(acct.get("workLostSeconds", 0.0))}

def compare(results: dict[tuple[bool, bool], dict[str, Any]], out: dict[str, Any]) -> dict[str, Any]:
    """`out` with each configuration's figures and, per resume setting, work lost with boosting on / off."""
    out["configs"] = [{"boost": boost, "resumeAfterPreemption": resume, **results[(boost, resume)]}
                      for boost, resume in CONFIGS if (boost, resume) in results]
    for resume in sorted({r for _b, r in results}):
        off, on = results[(False, resume)]["workLostSeconds"], results[(True, resume)]["workLostSeconds"]
        out[f"lostRatioOnOff_resume{'On' if resume else 'Off'}"] = round(on / off, 3) if off else None
        out[f"targetMet_resume{'On' if resume else 'Off'}"] = on <= 0.5 * off
    return out


def table(out: dict[str, Any]) -> str:
    causes = sorted({c for cfg in out["configs"] for c in cfg["badputSeconds"]})
    head = ["boost", "resume", "work lost s", "goodput", *[f"{c} s" for c in causes], "preemptions", "retries"]
    rows = [[("on" if c["boost"] else "off"), ("on" if c["resumeAfterPreemption"] else "off"),
             f"{c['workLostSeconds']:.1f}", f"{c['goodput']:.3f}",
             *[f"{c['badputSeconds'].get(k, 0.0):.1f}" for k in causes], str(c["preemptions"]), str(c["retriesSpent"])]
            for c in out["configs"]]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(x.rjust(w) for x, w in zip(r, widths, strict=True)) for r in rows]
    for resume in [r for r in ("Off", "On") if f"lostRatioOnOff_resume{r}" in out]:
        ratio = out[f"lostRatioOnOff_resume{resume}"]
        met = out[f"targetMet_resume{resume}"]
        lines.append(f"resumeAfterPreemption {resume.lower()}: work lost with boosting on / off = "
                     f"{'n/a' if ratio is None else f'{ratio:.2f}'} (target <= 0.5: {'met' if met else 'NOT met'})")
    return "\n".join(lines)
