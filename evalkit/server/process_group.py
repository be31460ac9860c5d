"""The process group the vLLM server runs in: adopting orphans so their zombies can be reaped, and whether any live
process remains in the group (the leader, its workers, their children)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

_subreaper_done = False


def become_subreaper() -> None:
    """Adopt orphaned descendants (Linux) so the zombies of the server's group can be reaped.

    Where PID 1 does not reap (some containers), a dead grandchild would otherwise stay a zombie and keep the
    group visible to ``killpg(pgid, 0)``."""
    global _subreaper_done
    if _subreaper_done or not sys.platform.startswith("linux"):
        return
    _subreaper_done = True
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _group_members(pgid: int) -> list[tuple[int, str]] | None:
    """(pid, state) of each process in group ``pgid`` from /proc; None where /proc is unavailable."""
    if not os.path.isdir("/proc/self"):
        return None
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:
            members.append((int(entry), fields[0].decode()))
    return members


def group_alive(pgid: int, leader: subprocess.Popen[bytes] | None = None) -> bool:
    """Whether any live (non-zombie) process remains in group ``pgid``; reaps the zombies it can."""
    if leader is not None:
        leader.poll()
    members = _group_members(pgid)
    for pid, state in members or []:
        if state == "Z" and (leader is None or pid != leader.pid):
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    members = _group_members(pgid)
    return True if members is None else any(state != "Z" for _, state in members)
