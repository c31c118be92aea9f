"""Which process is doing a piece of work, and whether that process is gone.

Work the dashboard records before it touches the store (a trash entry pending its batch's
commit, a restore under way, an erasure request running) names the process doing it. A later
process that finds the work unfinished takes it over at once when that process is known dead:
it ran on this machine since this boot, and its pid is gone (or the machine rebooted). A
process on another machine is never thought dead from here; its work is taken over only
after a timeout.
"""

from __future__ import annotations

import os
import socket


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            return boot.read().strip()
    except OSError:
        return ""


def this_process() -> dict:
    """What ``process_dead`` later reads: host, boot and pid of this process."""
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid": os.getpid()}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child its parent has not reaped yet is dead too
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def process_dead(owner: object) -> bool:
    """Whether the process ``owner`` (``this_process()`` as it was recorded) is known gone."""
    if not isinstance(owner, dict) or owner.get("host") != socket.gethostname():
        return False
    if owner.get("boot") != _boot_id():
        return True
    pid = owner.get("pid")
    return isinstance(pid, int) and pid != os.getpid() and not _pid_alive(pid)
