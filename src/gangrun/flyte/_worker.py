"""What every rank of a Flyte task's gang runs (see gangrun.flyte._call for the files it reads and writes).

    python -m gangrun.flyte._worker call FOLDER       a local run: the call is in FOLDER
    python -m gangrun.flyte._worker flyte a0 ARGS...  on a cluster: Flyte's own task entrypoint

Nothing in the package imports this module, so `python -m` runs it fresh.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from gangrun.flyte._call import rank_args, run_call


def main(argv: Sequence[str]) -> int:
    rank = int(os.environ.get("RANK", "0"))
    if len(argv) == 2 and argv[0] == "call":
        return run_call(Path(argv[1]), rank)
    if len(argv) >= 2 and argv[0] == "flyte":
        args = rank_args(argv[1:], rank)
        os.execvp(args[0], args)
    print("usage: python -m gangrun.flyte._worker call FOLDER | flyte ENTRYPOINT ARGS...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
