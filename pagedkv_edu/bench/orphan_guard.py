"""Run a command, and stop it if the process that asked for it dies: no server outlives a crashed kernel.

``python orphan_guard.py PARENT_PID -- COMMAND...`` (run by path: it imports only the standard
library, not the package). :class:`~pagedkv_edu.bench.real_router.Processes` starts every replica
and router through it. A ``with`` block stops them in the normal case, even when a cell fails; this
covers the case it cannot: the notebook's kernel killed or restarted, with no Python left to clean
up. The guard polls the parent twice a second; when it is gone (or on SIGTERM), it sends the
command SIGTERM, then SIGKILL after a grace period, and exits with the command's status (128 + N for signal N).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.5
GRACE_S = 5.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:      # alive, someone else's
        return True
    return True


def _status(code: int) -> int:
    """The shell's convention: a command killed by signal N exits with 128 + N."""
    return 128 - code if code < 0 else code


def _stop(child: subprocess.Popen) -> int:
    if child.poll() is None:
        child.terminate()
        try:
            return _status(child.wait(timeout=GRACE_S))
        except subprocess.TimeoutExpired:
            child.kill()
    return _status(child.wait())


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: orphan_guard.py PARENT_PID -- COMMAND...", file=sys.stderr)
        return 2
    parent = int(argv[0])
    child = subprocess.Popen(argv[2:])
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
    signal.signal(signal.SIGTERM, on_term)
    while child.poll() is None:
        if stopping or not _alive(parent):
            return _stop(child)
        time.sleep(POLL_S)
    return _status(child.returncode)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
