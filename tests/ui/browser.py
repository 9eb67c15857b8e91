"""A real headless Chromium for the web page's tests: the page's DOM after its scripts ran, and screenshots.

Debian's `chromium` package (`./dev setup` installs it when it is missing and may). `--virtual-time-budget`
lets the page's timers and fetches run before Chromium dumps the DOM or takes the picture; every run
gets a new empty profile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def find_chromium() -> str | None:
    return os.environ.get("GANGRUN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    def __init__(self, binary: str, *, budget_ms: int = 6000, timeout: float = 90.0) -> None:
        self.binary, self.budget_ms, self.timeout = binary, budget_ms, timeout

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory(prefix="gangrun-chromium-") as profile:
            r = subprocess.run([self.binary, *FLAGS, f"--user-data-dir={profile}",
                                f"--virtual-time-budget={self.budget_ms}", *args],
                               capture_output=True, text=True, timeout=self.timeout, check=False)
        if r.returncode != 0:
            raise AssertionError(f"chromium exited {r.returncode}: {r.stderr[-2000:]}")
        return r

    def dom(self, url: str, *, size: tuple[int, int] = (1280, 900)) -> str:
        return self._run(f"--window-size={size[0]},{size[1]}", "--dump-dom", url).stdout

    def screenshot(self, url: str, path: Path, *, size: tuple[int, int] = (1280, 900)) -> Path:
        self._run(f"--window-size={size[0]},{size[1]}", f"--screenshot={path}", url)
        assert path.stat().st_size > 10_000, f"{path} is nearly empty"
        return path
