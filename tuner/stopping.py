"""How a search process stops: Ctrl-C and SIGTERM alike keep what was measured, neither cuts a write
in half, and a worker (of `--devices`, or a compile worker) stops when its parent dies."""
import atexit
import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies
# "<pid>@<seconds since boot>": set in a worker's environment by the process that started it, as it did.
PARENT = "TUNER_PARENT_PID"
# Seconds between that stamp and the worker's start, within which a worker whose parent is gone is
# that parent's; a value left over (exported in a shell, copied from a worker's) is older.
_STARTED_WITHIN = 60
STOPS = {signal.SIGINT, signal.SIGTERM}  # held by a --devices parent while it starts its workers, which inherit that


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken as Ctrl-C by a process that called stop_on_sigterm (exit status 143)."""


def _terminate(signum, frame):
    raise Terminated


def _stop_once(signum, frame):
    # The first stop signal this handler takes stops the process; later SIGTERMs and SIGINTs it
    # would take are ignored to the process's exit, so that none cuts the stop short. A worker
    # whose parent is killed gets a SIGTERM from each of the parent's threads as they exit (Linux
    # reparents it to each in turn); a worker under a scheduler gets its SIGTERM and then its
    # parent's SIGINT. A handler that does nothing ignores them until the interpreter exits, the
    # system from then on: one caught but not yet handled when its handler became SIG_IGN would make
    # CPython print "Signal 15 ignored due to race condition" with a traceback.
    for taken in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(taken) is _stop_once:
            signal.signal(taken, _ignore)
    atexit.unregister(_ignore_to_the_end)
    atexit.register(_ignore_to_the_end)
    _stopping[:] = [signum]
    raise _stop(signum)


def _stop(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


_stopping = []  # the signal that began the stop under way in this process, if one did


def _under_way() -> int | None:
    """The signal that began the stop under way, while its later ones are ignored."""
    if _stopping and _ignore in (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)):
        return _stopping[0]
    return None


def raise_if_stopping() -> None:
    """Raise the stop under way again, where its first raise was lost: a signal taken while a
    finalizer (a __del__) runs raises there, and Python reports it as ignored and goes on, while
    the later signals that would have stopped the process are ignored."""
    if _under_way():
        raise _stop(_stopping[0])


def stop_status() -> int | None:
    """The exit status of the stop under way, if a stop signal taken once began one: 143 for SIGTERM,
    130 for SIGINT. It outranks output that then cannot be written: a --devices worker whose parent
    was killed stops cleanly, and its last lines have no reader left."""
    signum = _under_way()
    if signum is None:
        return None
    return 143 if signum == signal.SIGTERM else 130


def _ignore(signum, frame):
    """A stop signal taken while the stop goes on."""


def _ignore_to_the_end():
    # At exit CPython sets a Python handler back to the system's default, which a late signal would
    # take as a kill.
    for taken in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(taken) is _ignore:
            signal.signal(taken, signal.SIG_IGN)


def stop_on_sigterm(once: bool = False):
    """From now on SIGTERM stops this process as Ctrl-C does, by raising Terminated; the handler
    it had. With `once`, only the first does: later ones are ignored while the stop goes on."""
    return signal.signal(signal.SIGTERM, _stop_once if once else _terminate)


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


def worker_environment() -> dict[str, str]:
    """The variable that makes a process this one starts now its worker (follow_parent)."""
    return {PARENT: f"{os.getpid()}@{_since_boot():.2f}"}


def _since_boot() -> float:
    """Seconds since boot, the clock of Linux's process start times (_started); 0 elsewhere."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) if sys.platform.startswith("linux") else 0.0


def _started() -> float:
    """When this process started, in seconds since boot (Linux's /proc); OSError elsewhere."""
    with open("/proc/self/stat") as status:
        fields = status.read().rpartition(")")[2].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime, the stat file's 22nd field


def _parent() -> int | None:
    """The process this one is a worker of, by $TUNER_PARENT_PID: its parent, or one gone that
    started it (named with a stamp from when this process started); None where it is no worker,
    the variable unset or left over."""
    pid, _, stamp = os.environ.get(PARENT, "").partition("@")
    if not pid.isdigit():
        return None
    if os.getppid() == int(pid):
        return int(pid)
    with contextlib.suppress(OSError, ValueError):
        if abs(_started() - float(stamp)) < _STARTED_WITHIN:
            return int(pid)
    return None


def follow_parent() -> None:
    """In a worker (_parent): get SIGTERM when the parent dies (Linux's prctl), and at once if it
    died before this process could ask, taken as that SIGTERM is: a compile worker, which leaves
    it to the system, dies of it quietly. Its parent stops it with one SIGINT, which stops it once
    too, as a SIGTERM taken once does, even where SIGINT was ignored (a shell's background job): in
    its own session, only its parent sends one. A stop signal held since the worker started
    (STOPS) is taken here, once the worker can stop cleanly. A process that is no worker, such as
    a search run from a shell that still exports a worker's $TUNER_PARENT_PID, goes on."""
    parent = _parent()
    if parent is None:
        return
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, signal.SIG_IGN):
        signal.signal(signal.SIGINT, _stop_once)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            signal.raise_signal(signal.SIGTERM)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
