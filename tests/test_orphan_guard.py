"""The orphan guard: a command started under it dies with the process that asked for it, or on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pagedkv_edu.bench.real_router import GUARD


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too: it waits only for its parent to read its status
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split(") ")[1][0] != "Z"


def _wait_dead(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _child_pid(pid_file: Path, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text().strip():
            return int(pid_file.read_text())
        time.sleep(0.05)
    raise TimeoutError("the guarded command never started")


def test_the_command_dies_when_its_parent_dies(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    # the parent starts the guard, waits for the command to run, then dies without cleaning up (a killed kernel)
    parent = (f"import os, pathlib, subprocess, sys, time\n"
              f"subprocess.Popen([sys.executable, {str(GUARD)!r}, str(os.getpid()), '--', 'sh', '-c', "
              f"'echo $$ > {pid_file}; exec sleep 60'], start_new_session=True)\n"
              f"while not pathlib.Path({str(pid_file)!r}).exists(): time.sleep(0.05)\n"
              f"os._exit(0)")
    subprocess.run([sys.executable, "-c", parent], check=True, timeout=30)
    child = _child_pid(pid_file)
    assert _wait_dead(child), "the guarded command outlived its parent"


def test_sigterm_to_the_guard_stops_the_command(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    guard = subprocess.Popen([sys.executable, str(GUARD), str(os.getpid()), "--", "sh", "-c",
                              f"echo $$ > {pid_file}; exec sleep 60"])
    child = _child_pid(pid_file)
    assert _alive(child)
    guard.send_signal(signal.SIGTERM)
    assert guard.wait(timeout=15) == 128 + signal.SIGTERM   # sleep's status, killed by the guard's SIGTERM
    assert _wait_dead(child)


def test_a_guard_without_a_command_says_how_to_call_it() -> None:
    done = subprocess.run([sys.executable, str(GUARD), "12"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "usage: orphan_guard.py PARENT_PID -- COMMAND" in done.stderr
