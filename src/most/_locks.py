"""Advisory locks of the operating system on an open file (``flock`` on POSIX, ``msvcrt`` on
Windows), taken without waiting: the system drops them when their process ends, however it
ends, so a run killed with ``kill -9`` leaves nothing that blocks the next one."""

from __future__ import annotations

import os

__all__ = ["lock", "unlock", "holder_line"]


def holder_line() -> str:
    """What a lock's holder writes into its lock file: its process id, machine and command."""
    import socket
    import sys

    command = " ".join(os.path.basename(a) if k == 0 else a for k, a in enumerate(sys.argv))[:200]
    return f"process {os.getpid()} on {socket.gethostname()}: {command}\n"


try:
    import fcntl

    def lock(fd: int) -> None:
        """Takes the exclusive lock on ``fd``; ``OSError`` when another open file holds it."""
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
except ImportError:  # Windows
    import msvcrt

    def lock(fd: int) -> None:
        """Takes the exclusive lock on ``fd``; ``OSError`` when another open file holds it."""
        # typeshed declares msvcrt's functions for win32 only, and mypy checks for this (POSIX) platform
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]

    def unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)  # type: ignore[attr-defined]  # as in lock
