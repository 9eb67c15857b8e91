"""Where a `Checkpoint` is, shared by its loading and saving halves: the task's root and this attempt's
folder (as URIs and as the storage spells them), the process cache its restored copies and staged
snapshots go to, and the one line that says where a script run outside a gang keeps them."""

from __future__ import annotations

import uuid
from pathlib import Path

from gangrun._ckpt import cache
from gangrun._ckpt.layout import attempt_name, entry_name, join
from gangrun._ckpt.logs import say
from gangrun._ckpt.storage import Storage


class Places:
    """What `Checkpoint` sets up for both halves (see its constructor)."""

    root: str
    attempt: int
    task: str | None
    rank: int
    _storage: Storage
    _root_path: str
    _attempt_path: str
    _events_file: str | None
    _where: str | None
    _cache_dir: Path | None

    @property
    def uri(self) -> str:
        """This attempt's folder."""
        return join(self.root, attempt_name(self.attempt))

    def _say_where(self) -> None:
        """Once, on rank 0: where the checkpoints of a script run outside a gang go."""
        where, self._where = self._where, None
        if where and self.rank == 0:
            say(where)

    def _uri_of(self, attempt: int, seq: int) -> str:
        return join(self.root, attempt_name(attempt), entry_name(seq))

    def _cache(self) -> Path:
        if self._cache_dir is None:
            # Restored copies live until the process ends (a Path handed out must stay valid after
            # this object is gone), and no longer (cache.py); pass cache_dir= to keep them.
            self._cache_dir = Path(cache.process_cache()) / f"ckpt-{uuid.uuid4().hex[:12]}"
        self._cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self._cache_dir
