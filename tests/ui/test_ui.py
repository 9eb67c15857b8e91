"""`gangrun ui` in a real headless browser, on a real preempted-and-resumed task of the local backend.

The story (S11 on one machine): `train` (low priority, resumeAfterPreemption) saves step 6, `urgent`
(high) preempts it, `train` waits for re-admission, is readmitted and resumes from its checkpoint.
The page must list both tasks, and train's timeline must show the preemption (and by whom), the
wait and the checkpoint it resumed from. Screenshots of the list and the timeline are saved to
$GANGRUN_SCREENSHOTS (default: the test's temporary folder).
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import gangrun
from gangrun._api import open_backend
from gangrun._backends.local import LocalBackend
from gangrun._ui import start
from tests.ui.browser import Chromium, find_chromium

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory):
    """The preemption story, run to the end once; then the page served for it."""
    home = tmp_path_factory.mktemp("ui") / "home"
    old_path = os.environ["PATH"]
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + old_path  # `python` in the manifests
    local = LocalBackend(home)
    server = None
    try:
        local.up(cpu="2", memory="4Gi", gpu=0)
        train = gangrun.submit(EXAMPLES / "train.yaml", home=home)
        view, deadline = train.status(), time.monotonic() + 120
        while ((view["accounting"]["lastCheckpoint"] or {}).get("step") or 0) < 6:  # then preempt it
            assert view["phase"] in ("Queued", "WaitingForResources", "Initializing", "Running"), view
            assert time.monotonic() < deadline, f"train saved no step 6 in 120s: {view['reason']}"
            time.sleep(0.1)
            view = train.status()
        urgent = gangrun.submit(EXAMPLES / "urgent.yaml", home=home)
        assert urgent.wait(timeout=120)["phase"] == "Succeeded"
        final = train.wait(timeout=120)
        assert (final["phase"], final["attempt"], final["evictionsByCause"]) == ("Succeeded", 1, {"Preempted": 1})
        server = start(open_backend("local", home=home))
        yield server.url
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        local.down()
        os.environ["PATH"] = old_path


@pytest.fixture(scope="module")
def chromium() -> Chromium:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI=true and no chromium: ./dev setup installs Debian's chromium package", pytrace=False)
        pytest.skip("no chromium on PATH (./dev setup installs Debian's chromium package)")
    return Chromium(binary)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("GANGRUN_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def attrs(dom: str, kind: str) -> list[str]:
    """The data-label of every timeline mark of `kind`."""
    return [html.unescape(m) for m in re.findall(rf'class="mark mark-{kind}[^"]*" data-kind="{kind}" data-label="([^"]*)"',
                                                 dom)]


def test_the_json_the_page_draws_from(story: str) -> None:
    status, doc = get(story + "api/tasks")
    assert status == 200 and doc["backend"] == "local"
    assert sorted(t["name"] for t in doc["tasks"]) == ["train", "urgent"]
    status, doc = get(story + "api/tasks/train")
    assert status == 200 and [s["kind"] for s in doc["timeline"]["lanes"][0]["segments"]].count("waiting") == 1
    status, doc = get(story + "api/tasks/train/logs?rank=1&attempt=1")
    assert status == 200 and doc["lines"][-1].startswith("done: step 40")
    assert get(story + "api/tasks/nobody") == (404, {"error": 'unknown task "nobody" (known tasks: train, urgent)'})
    assert get(story + "api/tasks/train/logs?rank=x")[0] == 400
    assert get(story + "api/tasks/train/logs?rank=9")[0] == 404  # the backend's own message: ranks 0..1


def test_the_page_lists_the_preempted_and_resumed_task(story: str, chromium: Chromium, shots: Path) -> None:
    dom = chromium.dom(story)
    rows = dict(re.findall(r'<tr data-task="([a-z-]+)">(.*?)</tr>', dom))
    assert set(rows) == {"train", "urgent"}
    assert "Succeeded" in rows["train"] and ">1</td>" in rows["train"]  # attempt 1, one preemption
    assert re.search(r">\d+%</td>", rows["train"]), "goodput"
    chromium.screenshot(story, shots / "ui-tasks.png", size=(1280, 360))


def test_the_timeline_shows_the_preemption_the_wait_and_the_checkpoint_it_resumed_from(
        story: str, chromium: Chromium, shots: Path) -> None:
    url = story + "#/tasks/train"
    dom = chromium.dom(url)
    assert attrs(dom, "preempted") == ["preempted by urgent"]
    assert re.findall(r'class="seg seg-waiting" data-kind="waiting"', dom), "a waiting-for-re-admission span"
    (resumed,) = attrs(dom, "resumed")
    step = int(re.fullmatch(r"resumed from step (\d+)", resumed).group(1))
    assert step >= 6
    assert f'class="mark mark-checkpoint resumed-from" data-kind="checkpoint" data-label="step {step}"' in dom
    assert attrs(dom, "readmitted") == ["readmitted"] and attrs(dom, "ended") == ["Succeeded"]
    assert "starting at step" in dom  # rank 0's output, in the logs panel
    # The badput line labels every cause the server defines (B5), and the step time is beside goodput.
    assert "below full size" in dom and "work lost" in dom and "stepping" in dom
    chromium.screenshot(url, shots / "ui-timeline.png", size=(1280, 900))
