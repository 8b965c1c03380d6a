"""Advisory locks of the operating system on an open file (``flock`` on POSIX, ``msvcrt`` on
Windows), taken without waiting: the system drops them when their process ends, however it
ends, so a run killed with ``kill -9`` leaves nothing that blocks the next one."""

from __future__ import annotations

import errno
import os

__all__ = ["HeldElsewhere", "lock", "unlock", "open_locked", "sign", "holder_line"]

#: what a lock held by another open file answers (flock: EWOULDBLOCK; msvcrt: EACCES or EDEADLOCK);
#: any other error means the file system keeps no such locks (some network and FUSE mounts)
_BUSY = {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, getattr(errno, "EDEADLK", errno.EAGAIN),
         getattr(errno, "EDEADLOCK", errno.EAGAIN)}


def lock(fd: int) -> bool:
    """Takes the exclusive lock on ``fd``: ``True``; ``False`` where the file system keeps no
    such locks (two writers cannot be kept apart there); ``OSError`` when another open file
    holds it."""
    try:
        _take(fd)
    except OSError as exc:
        if exc.errno in _BUSY:
            raise
        return False
    return True


class HeldElsewhere(Exception):
    """The lock is held by another open file; ``holder`` is what its holder wrote into it."""

    def __init__(self, holder: str):
        super().__init__(holder)
        self.holder = holder


def open_locked(path) -> tuple[int, bool]:
    """Opens ``path`` (made if missing, never through a link) and takes its lock: ``(fd, True)``;
    ``(fd, False)`` where the file system keeps no locks; :class:`HeldElsewhere` naming the
    holder (``""`` if it wrote nothing) when another open file holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        locked = lock(fd)
    except OSError:
        try:
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip()
        except OSError:  # the holder's line could not be read: the refusal still names the file
            holder = ""
        finally:
            os.close(fd)
        raise HeldElsewhere(holder) from None
    return fd, locked


def sign(fd: int) -> None:
    """Writes :func:`holder_line` into the lock file ``fd`` holds, for a second process's message.
    The line is a courtesy: a write that fails (a full disk) leaves the lock held and the file
    empty, and never raises."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, holder_line().encode())
    except OSError:
        pass


def unlock(fd: int) -> None:
    """Lets the lock on ``fd`` go (closing ``fd`` would too: an error here, on a file system that
    keeps no locks, changes nothing)."""
    try:
        _give(fd)
    except OSError:
        pass


def holder_line() -> str:
    """What a lock's holder writes into its lock file: its process id, machine and command."""
    import socket
    import sys

    command = " ".join(os.path.basename(a) if k == 0 else a for k, a in enumerate(sys.argv))[:200]
    return f"process {os.getpid()} on {socket.gethostname()}: {command}\n"


try:
    import fcntl

    def _take(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _give(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
except ImportError:  # Windows
    import msvcrt

    #: the byte locked: far past the holder's line, which a byte-range lock would make unreadable to
    #: the second process that wants to name the holder
    _BYTE = 2 ** 30

    def _take(fd: int) -> None:
        os.lseek(fd, _BYTE, os.SEEK_SET)
        try:
            # typeshed declares msvcrt's functions for win32 only, and mypy checks for this (POSIX) platform
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        finally:
            os.lseek(fd, 0, os.SEEK_SET)

    def _give(fd: int) -> None:
        os.lseek(fd, _BYTE, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)  # type: ignore[attr-defined]  # as in _take
