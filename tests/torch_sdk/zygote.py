"""Forks ranks of a test gang from one interpreter that has imported torch already (see torchgang.py).

Reads one JSON request a line on stdin, ``{"mode": ..., "env": {...}, "out": path}``, forks, and
answers ``{"pid": N}``. The child takes the environment, sends its output to `out` and runs
``worker.main(mode)``: a rank then costs a fork instead of an interpreter start and a torch import
(seconds each on a small machine), so a test can start and kill many gangs. Children are reaped
by the kernel (SIGCHLD ignored): the tests kill them and look at what they left on disk.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback

import torch.distributed  # noqa: F401  (torch imported once here, before any fork: the point of this process)
import worker

signal.signal(signal.SIGCHLD, signal.SIG_IGN)
for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.environ.clear()
            os.environ.update(request["env"])
            out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(out, 1)
            os.dup2(out, 2)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            worker.main(request["mode"])
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
