# SPDX-License-Identifier: GPL-3.0-or-later
"""Start background processes, recognise them later, and stop exactly those.

A process is recorded as (pid, start time from /proc/<pid>/stat, executable); a pid that was
reused by something else does not match and is never signalled. Waiting for a process to end
uses a pidfd (Linux >= 5.3), so no polling is needed; every wait has a deadline.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path


def proc_start_time(pid: int):
    """Return the process start time in clock ticks (field 22 of /proc/<pid>/stat), or None."""
    try:
        data = Path("/proc/%d/stat" % pid).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[19])


def proc_state(pid: int) -> str | None:
    """Return the one-letter state of a process (R, S, Z, ...) or None if it does not exist."""
    try:
        data = Path("/proc/%d/stat" % pid).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()[0]


def start(name: str, argv: list, log_path: Path, cwd: Path, env: dict | None = None, pass_fds=()) -> dict:
    """Start ``argv`` in its own session with output appended to ``log_path``; return its record."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(("==== %s starting: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), " ".join(map(str, argv)))).encode())
        log.flush()
        proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=str(cwd), env=env, start_new_session=True, close_fds=True, pass_fds=tuple(pass_fds))
    # The Popen object is dropped on purpose: the process outlives this program. Its exit status
    # is collected by whoever reaps it (init once we exit); is_alive() treats zombies as gone.
    proc.returncode = 0
    return {"name": name, "pid": proc.pid, "start_time": proc_start_time(proc.pid), "exe": str(argv[0]), "log": str(log_path)}


def is_alive(record: dict) -> bool:
    """Tell whether the recorded process still runs (same pid and start time, not a zombie)."""
    pid = record.get("pid")
    if not pid:
        return False
    state = proc_state(pid)
    if state is None or state in ("Z", "X"):
        return False
    return record.get("start_time") is None or proc_start_time(pid) == record.get("start_time")


def wait_gone(records: list, timeout: float) -> list:
    """Wait until the recorded processes are gone or ``timeout`` passes; return those still alive."""
    deadline = time.monotonic() + timeout
    alive = [r for r in records if is_alive(r)]
    while alive:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        fds = {}
        for record in alive:
            try:
                fds[os.pidfd_open(record["pid"])] = record
            except OSError:
                continue
        try:
            if fds:
                poller = select.poll()
                for fd in fds:
                    poller.register(fd, select.POLLIN)
                # A pidfd becomes readable when the process exits; zombies of ours count as gone.
                poller.poll(max(1, int(min(remaining, 0.5) * 1000)))
        finally:
            for fd in fds:
                os.close(fd)
        _reap_children()
        alive = [r for r in alive if is_alive(r)]
    return alive


def _reap_children() -> None:
    while True:
        try:
            pid = os.waitpid(-1, os.WNOHANG)[0]
        except ChildProcessError:
            return
        if pid == 0:
            return


def stop(records: list, timeout: float = 15.0) -> list:
    """SIGTERM each recorded process (only if it is still the same process), then SIGKILL leftovers.

    Returns the records that could not be stopped (normally empty).
    """
    for record in records:
        if is_alive(record):
            try:
                os.kill(record["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass
    left = wait_gone(records, timeout)
    for record in left:
        if is_alive(record):
            try:
                os.kill(record["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
    return wait_gone(left, 5.0)
