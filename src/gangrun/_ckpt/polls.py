"""Waiting on the store: look again and again until something appears, a timeout passes, or the gang's
stop notice says a peer is gone (then nobody should wait for it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from gangrun._ckpt import notice


class Polls:
    """Look again and again until `timeout` seconds pass: ``for _ in Polls(...): if done(): break``.

    A look at a local folder costs microseconds, so it is repeated often (the ranks of a save finish
    close together, and every wasted interval is added to the save); a look at an object store is
    a request, so it backs off to a few per second. `restart()` gives the full timeout again.
    """

    def __init__(self, *, timeout: float, local: bool) -> None:
        self.timeout = timeout
        self._first, self._most = (0.0005, 0.005) if local else (0.01, 0.2)
        self.restart()

    def restart(self) -> None:
        self._deadline = time.monotonic() + self.timeout
        self._delay = self._first

    def __iter__(self) -> Iterator[None]:
        while True:
            yield
            left = self._deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(self._delay, left))
            self._delay = min(self._most, self._delay * 2)


#: How long a pending sharded save still waits once a stop notice said a peer is gone: enough for a save
#: whose parts are all written to commit, far less than a grace period spent waiting for a dead rank.
PEER_LOST_WAIT = 2.0


def peer_lost() -> str | None:
    """The lost peer's stop message, once PEER_LOST_WAIT has passed since the notice said one is gone."""
    at = notice.peer_lost_at()
    if at is None or time.time() - at < PEER_LOST_WAIT:
        return None
    n = notice.STATE.told()
    return (n.message if n is not None else None) or "a peer is gone"
