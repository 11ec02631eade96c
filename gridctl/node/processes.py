"""Proving that a PID is still ours before touching it.

A recorded PID may belong to a new, unrelated process after a crash or reboot.
gridctl therefore signals a process only when the kernel's birth time, the
resolved executable and the exact argv all match what was recorded right after
spawn. Anything less is *unproven*: the process is left alone (fenced), never
signalled, and its record is kept so the port is not handed out twice.
"""

from __future__ import annotations

import signal
import time
from enum import StrEnum

import psutil

from gridctl.node.records import ProcessIdentity

# psutil derives create_time from boot time + start ticks; both are stable, so a
# genuine match agrees to far better than this.
BIRTH_TOLERANCE_SECONDS = 0.05


class Liveness(StrEnum):
    PROVEN = "proven"  # alive and provably the recorded child
    DEAD = "dead"  # gone (or a zombie waiting to be reaped)
    UNPROVEN = "unproven"  # something lives under that PID but we cannot prove it is ours


def observe_identity(pid: int) -> ProcessIdentity | None:
    """The identity of a live process, or ``None`` if it is gone or unreadable."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return ProcessIdentity(
                pid=pid,
                create_time=proc.create_time(),
                executable=proc.exe(),
                cmdline=tuple(proc.cmdline()),
            )
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


def observe_launched_identity(pid: int, *, settle_seconds: float = 2.0) -> ProcessIdentity | None:
    """The identity of a child just launched, once its exec has settled.

    ``Popen`` returns when the kernel closes the child's close-on-exec pipe, which
    happens before the new image's argument block is in place: for a moment
    ``/proc/PID/cmdline`` reads empty although the child is alive and well. An
    empty argv is therefore observed again (bounded); a non-empty argv (which the
    caller compares with what it launched) or a process that is gone is returned
    at once.
    """
    deadline = time.monotonic() + settle_seconds
    while True:
        identity = observe_identity(pid)
        if identity is None or identity.cmdline or time.monotonic() >= deadline:
            return identity
        time.sleep(0.005)


def _check_once(expected: ProcessIdentity) -> Liveness:
    try:
        proc = psutil.Process(expected.pid)
        with proc.oneshot():
            if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                return Liveness.DEAD
            if abs(proc.create_time() - expected.create_time) > BIRTH_TOLERANCE_SECONDS:
                return Liveness.UNPROVEN
            if proc.exe() != expected.executable:
                return Liveness.UNPROVEN
            if tuple(proc.cmdline()) != expected.cmdline:
                return Liveness.UNPROVEN
    except psutil.NoSuchProcess:
        return Liveness.DEAD
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return Liveness.UNPROVEN
    return Liveness.PROVEN


def check_identity(expected: ProcessIdentity, *, settle_seconds: float = 0.3) -> Liveness:
    """Is the recorded child alive, dead, or replaced by something we cannot prove?

    A process in the middle of exiting briefly loses its ``exe`` link before it
    becomes a zombie; an unproven answer is therefore re-checked for up to
    ``settle_seconds`` so a dying child is reported dead rather than fenced.
    """
    deadline = time.monotonic() + settle_seconds
    while True:
        liveness = _check_once(expected)
        if liveness is not Liveness.UNPROVEN or time.monotonic() >= deadline:
            return liveness
        time.sleep(0.05)


def _proven_process(expected: ProcessIdentity) -> psutil.Process | None:
    """A psutil handle to the child, only if its identity is proven right now.

    psutil itself re-checks the birth time before every signal it sends through
    this handle, which closes the window between this proof and the signal.
    """
    if check_identity(expected) is not Liveness.PROVEN:
        return None
    try:
        proc = psutil.Process(expected.pid)
    except psutil.NoSuchProcess:
        return None
    if abs(proc.create_time() - expected.create_time) > BIRTH_TOLERANCE_SECONDS:
        return None
    return proc


def signal_proven(expected: ProcessIdentity, signum: int) -> bool:
    """Send ``signum`` only if the process is provably ours; report whether it was sent."""
    proc = _proven_process(expected)
    if proc is None:
        return False
    try:
        proc.send_signal(signum)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    return True


def wait_gone(expected: ProcessIdentity, timeout: float) -> bool:
    """Poll until the recorded process is gone (dead or zombie) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        if check_identity(expected) is Liveness.DEAD:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def stop_proven(expected: ProcessIdentity, *, grace: float = 10.0, kill_after: float = 5.0) -> bool:
    """SIGTERM a proven child, then SIGKILL it if it outlives ``grace``.

    Returns ``True`` when the process is gone. An unproven PID is never signalled
    and yields ``False`` unless it is already dead.
    """
    liveness = check_identity(expected)
    if liveness is Liveness.DEAD:
        return True
    if liveness is Liveness.UNPROVEN:
        return False
    if not signal_proven(expected, signal.SIGTERM):
        return check_identity(expected) is Liveness.DEAD
    if wait_gone(expected, grace):
        return True
    signal_proven(expected, signal.SIGKILL)
    return wait_gone(expected, kill_after)
