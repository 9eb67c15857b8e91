"""The few lines a worker's user must see: logged on the ``gangrun`` logger and printed to stderr.

Printed because a worker's logging is often not configured, and its stderr is what the backend keeps
as the worker log. Logged only when some handler is configured: otherwise Python's last-resort
handler would print warnings a second time.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("gangrun")


def say(line: str, level: int = logging.INFO) -> None:
    if log.hasHandlers():
        log.log(level, line)
    print(line, file=sys.stderr, flush=True)
