"""`tuner search --devices 0,1,2,3`: one worker process per GPU of this host, all on one study.

Each worker is the same `tuner search` command without `--devices`, pinned to its GPU by the
backend's visibility variable (CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES), so that it sees
that GPU alone. The workers share the study through its storage, so the budget, the claims and
the cache record are the study's (see storage.py). Their output comes back prefixed with their
device, Ctrl-C (or SIGTERM) stops them all cleanly, and a worker whose parent is killed stops too.
"""
import os
import signal
import subprocess
import sys
import threading

from .backends import Backend
from .formats import counted
from .runtime import NoGPU, driver_device_count
from .stopping import STOPS, Terminated, shielded, stop_on_sigterm, worker_environment


def parse_devices(text: str) -> list[int]:
    """The device indices of `--devices 0,1,2,3`; ValueError saying what to pass instead."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise ValueError(f"--devices takes GPU indices separated by commas, such as 0,1,2,3, not {text!r}")
    devices = [int(part) for part in parts]
    repeated = sorted({device for device in devices if devices.count(device) > 1})
    if repeated:
        raise ValueError(f"--devices lists device {repeated[0]} twice; give each GPU once")
    return devices


def check_visible(backend: Backend, devices: list[int], environ: dict) -> None:
    """Refuse indices past the list of an existing CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES,
    which workers are pinned by position in (simulated workers too), in one line."""
    visible = environ.get(backend.visible_devices)
    count = len(visible.split(",")) if visible else None
    if count is not None and max(devices) >= count:
        raise ValueError(f"--devices {max(devices)}: {backend.visible_devices}={visible} lists "
                         f"{counted(count, 'device')}, numbered 0 to {count - 1} here; pass indices into that list")


def check_devices(backend: Backend, devices: list[int]) -> None:
    """Refuse indices this host's GPUs of `backend` do not have, in one line saying what exists."""
    try:
        count = driver_device_count(backend)
    except NoGPU as reason:
        raise ValueError(f"--devices {','.join(map(str, devices))}: no {backend.name} GPU here ({reason}); "
                         "add --simulate to run one simulated worker per index, or drop --devices") from None
    missing = [device for device in devices if device >= count]
    if missing:
        raise ValueError(f"--devices: there is no {backend.name} GPU {missing[0]} here; this process sees "
                         f"{count} (0 to {count - 1}, `tuner devices` lists them)")


def pinned_environment(backend: Backend, device: int, environ: dict) -> dict:
    """`environ` for a worker that sees only GPU `device`, numbered as this process sees them (an
    index into an existing CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES), and stops when this
    process dies (stopping.follow_parent)."""
    visible = environ.get(backend.visible_devices)
    target = visible.split(",")[device].strip() if visible else str(device)
    return {**environ, backend.visible_devices: target, **worker_environment()}


class _Relay(threading.Thread):
    """Copies a worker's stream to `out`, each line prefixed. After a
    write fails (a full stdout, a reader that left) it only drains the stream, so that the worker
    never blocks on it, and keeps the error for run_workers to raise in the main thread."""

    def __init__(self, stream, prefix: str, out):
        super().__init__()
        self.stream, self.prefix, self.out = stream, prefix, out
        self.error: OSError | None = None

    def run(self) -> None:
        for line in self.stream:
            if self.error:
                continue
            try:
                self.out.write(f"{self.prefix}{line}")
                self.out.flush()
            except OSError as error:
                self.error = error


def _start(command: list[str], backend: Backend, device: int, environ: dict, workers: list) -> None:
    """Start the worker on `device`, in `environ` pinned, and the relays of its output, and add them to
    `workers` as (device, process, relays). A worker whose output cannot be relayed is killed at once,
    before it can have measured anything (it holds the stop signals until it follows its parent), and
    the error raised: unread, its output would block it."""
    worker = subprocess.Popen(command, env=pinned_environment(backend, device, environ), text=True,
                              errors="replace", stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    prefix = f"[{backend.name} {device}] "
    relays = [_Relay(worker.stdout, prefix, sys.stdout), _Relay(worker.stderr, prefix, sys.stderr)]
    try:
        for relay in relays:
            relay.start()
    except RuntimeError:
        worker.kill()
        worker.communicate()
        raise
    workers.append((device, worker, relays))


def run_workers(command: list[str], backend: Backend, devices: list[int], environ: dict | None = None) -> int:
    """Run `command` (a `tuner search` without --devices) once per device, pinned, in `environ`
    (default: this process's); wait for all.
    The exit status is 2 if a worker could not start (those started are stopped as by Ctrl-C),
    else 130 after Ctrl-C (143 after SIGTERM), else 0 if every worker succeeded, else the highest
    (1 for a worker killed by a signal); a relayed line that could not be written raises its
    error once all are done."""
    environ = dict(os.environ) if environ is None else environ
    previous = stop_on_sigterm()  # a scheduler's SIGTERM stops them as Ctrl-C does, a second kills them
    interrupted = terminated = False
    workers = []
    unstarted = None  # (device, error) of a worker that could not start
    # A worker runs in its own session, so a Ctrl-C at the terminal reaches only this process,
    # which hands each worker exactly one SIGINT: they keep what they measured and exit 130.
    # A second Ctrl-C kills them; the study and the cache survive that too.
    signals = [signal.SIGINT, signal.SIGKILL]

    def signal_workers(sent: int | None = None) -> None:
        """Send each running worker `sent`, by default the next of `signals`."""
        sent = sent or (signals.pop(0) if signals else signal.SIGKILL)
        for _, worker, _ in workers:
            if worker.poll() is None:
                worker.send_signal(sent)

    def stop(error: KeyboardInterrupt) -> None:
        nonlocal interrupted, terminated
        interrupted, terminated = True, terminated or isinstance(error, Terminated)
        signal_workers()

    try:
        # A stop while they start is taken once all have, and each holds it (the mask it inherits)
        # until it can stop cleanly (stopping.follow_parent); one before that starts none.
        with shielded():
            held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
            try:
                for device in devices:
                    _start(command, backend, device, environ, workers)
            except (OSError, RuntimeError) as error:  # no room for a process, a pipe or a thread
                unstarted = device, error
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
        if unstarted:
            signal_workers(signal.SIGINT)  # as a Ctrl-C, which still takes its turn: a second one kills them
        else:
            print(f"tuner search: {counted(len(workers), 'worker')} started, pinned with {backend.visible_devices}; "
                  "Ctrl-C stops them all", file=sys.stderr)
    except KeyboardInterrupt as error:
        stop(error)
    while True:
        try:
            for _, worker, relays in workers:
                worker.wait()
                for relay in relays:
                    relay.join()
            break
        except KeyboardInterrupt as error:
            stop(error)
    signal.signal(signal.SIGTERM, previous)
    if unstarted:
        stopped = f"stopped the {len(workers)} started, completed trials are kept: " if workers else ""
        print(f"tuner search: error: cannot start the worker on {backend.name} {unstarted[0]} ({unstarted[1]}); "
              f"{stopped}run the same command again, or with fewer --devices", file=sys.stderr)
        return 2
    failed = {device: worker.returncode for device, worker, _ in workers if worker.returncode != 0}
    if interrupted:
        print(f"tuner search: {'terminated (SIGTERM)' if terminated else 'interrupted'}; completed trials are kept, "
              "run the same command to resume", file=sys.stderr)
    elif failed:
        print("tuner search: " + ", ".join(
            f"the worker on {backend.name} {device} " + (f"exited with {status}" if status > 0 else
                                                          f"was killed by signal {-status}")
            for device, status in failed.items()), file=sys.stderr)
    if interrupted:
        return 143 if terminated else 130
    lost = next((relay.error for _, _, relays in workers for relay in relays if relay.error), None)
    if lost:
        raise lost  # said, as a failed write of this process's own is, by cli.main
    return max((status if status > 0 else 1 for status in failed.values()), default=0)
