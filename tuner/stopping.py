"""How a search process stops: Ctrl-C and SIGTERM alike keep what was measured, neither cuts a write
in half, and a worker of `--devices` stops when its parent dies."""
import contextlib
import ctypes
import os
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies
PARENT = "TUNER_PARENT_PID"  # set in a worker's environment by the process that started it


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken as Ctrl-C by a process that called stop_on_sigterm (exit status 143)."""


def _terminate(signum, frame):
    # Later SIGTERMs are ignored, by the system, to the process's exit: the stop is under way, and
    # a second Terminated would cut it short. A worker whose parent is killed gets one from each of
    # the parent's threads as they exit, since Linux reparents it to each in turn.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated


def stop_on_sigterm():
    """From now on SIGTERM stops this process as Ctrl-C does, by raising Terminated once (later
    ones are ignored); the handler it had."""
    return signal.signal(signal.SIGTERM, _terminate)


@contextlib.contextmanager
def shielded():
    """Hold Ctrl-C and a handled SIGTERM until the block ends, then let them take their course, so
    that a write to the study or the cache is never cut in half (a half-written journal line or a
    lock left held). A signal this process ignores (nohup, a shell's background job) or leaves to
    the system stays so."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending = []
    held = {signum: signal.signal(signum, lambda caught, frame: pending.append(caught))
            for signum in (signal.SIGINT, signal.SIGTERM)
            if signal.getsignal(signum) not in (signal.SIG_IGN, signal.SIG_DFL, None)}
    try:
        yield
    finally:
        for signum, previous in held.items():
            signal.signal(signum, previous)
    for signum in dict.fromkeys(pending):
        signal.raise_signal(signum)


def follow_parent() -> None:
    """In a worker started with $TUNER_PARENT_PID: get SIGTERM when the parent dies (Linux's
    prctl), and stop at once if it died before this process could ask."""
    parent = os.environ.get(PARENT)
    if not parent or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):
        raise Terminated
