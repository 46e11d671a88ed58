"""Compile variants ahead in worker processes while the measuring process keeps the GPU busy.

Each worker is a `python -m tuner.compile_ahead` process (launch.py) at a lower priority that reads one job
(a configuration) per line and answers one line. On a GPU it compiles the kernel into Numba's
disk cache (the kernel directory's `__pycache__`), from where the measuring process loads it in
milliseconds; where the search prunes by static ceilings (`counts`), it then makes the kernel's
static resource report too (on an sm_90 GPU from the kernel's own LLVM IR, which Numba does not
type and lower again), so that counting never holds up the measuring process. On the
simulator, which compiles nothing, it compiles the kernel to PTX for sm_90 and runs ptxas, so that
the pool does the real work it would do on a GPU host, and the static resource report comes back
with it. A tensor-core kernel cannot be cached on disk (Numba cannot pickle linked code), so for
those it makes only the static resource report, and the measuring process compiles the kernel
itself. A worker that crashes, runs out of memory or hangs past the timeout (compile and count
together) fails that variant alone, with the reason, and is replaced.
"""
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field

from .formats import error_line
from .launch import python_module
from .stopping import follow_parent, worker_environment

NICENESS = 10  # the measuring process keeps its priority, so compiling never starves timing
TIMEOUT_SECONDS = 300.0  # a compile this slow costs the search more than the variant can win
MEMORY_PER_WORKER = 3 << 30  # bytes a compiling worker may take (NVVM and ptxas on a large unrolled tile)


def default_workers(devices: int = 1) -> int:
    """Workers for one of `devices` measuring processes on this host: the cores left after one
    each for measuring, shared out, within the memory; at least 1."""
    cores = os.cpu_count() or 1
    return max(1, min((cores - devices) // devices, _memory_bytes() // 2 // MEMORY_PER_WORKER // devices))


def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass
class Compiled:
    """What a worker made of one configuration: the seconds it took, and the error if it failed;
    the static resource report where one was made. `fatal` is a failure that is not the
    variant's (the kernel directory, the disk, a worker that cannot open a GPU context): the
    search stops on it, as it does when compiling in its own process."""

    seconds: float
    error: str = ""
    resources: dict | None = None
    fatal: str = ""


class CompileAheadFailed(OSError):
    """Compiling ahead cannot go on; the message says why and what to do."""


@dataclass
class _Worker:
    process: subprocess.Popen
    job: str | None = None  # the key of the configuration it is compiling
    started: float = 0.0


@dataclass
class CompilePool:
    """`workers` compiling processes for one backend, dtype and kernel family, fed in submission order.

    `simulated`: the measuring process runs on the simulator, so the workers compile to PTX
    instead of into Numba's disk cache. `kernels`: the kernel directory the measuring process
    loads from. `counts`: on a GPU, the static resource report is made beside the disk cache.
    """

    backend: str
    dtype: str
    kernels: str
    simulated: bool
    workers: int
    timeout: float = TIMEOUT_SECONDS
    family: str = "matmul"
    counts: bool = False
    _idle: list = field(default_factory=list)
    _busy: list = field(default_factory=list)
    _waiting: deque = field(default_factory=deque)  # (key, config) not yet handed to a worker
    _done: dict = field(default_factory=dict)  # key -> Compiled

    def submit(self, key: str, config: dict) -> None:
        """Compile `config` (known by `key`) as soon as a worker is free; once per key."""
        if key in self._done or key in (job for job, _ in self._waiting) or key in (w.job for w in self._busy):
            return
        self._waiting.append((key, config))
        self._dispatch()

    def result(self, key: str) -> Compiled:
        """The outcome for the submitted `key`, waiting for it; asked again, the same outcome."""
        while key not in self._done:
            if key not in (job for job, _ in self._waiting) and key not in (w.job for w in self._busy):
                raise KeyError(f"{key} was never submitted")
            self._collect(wait=True)
        return self._done[key]

    def close(self) -> None:
        """Stop every worker, at once."""
        for worker in self._idle + self._busy:
            _stop(worker.process)
        self._idle.clear()
        self._busy.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self) -> _Worker:
        environment = dict(os.environ)
        if self.simulated:
            environment.pop("NUMBA_ENABLE_CUDASIM", None)  # the workers compile for real, to PTX
        process = subprocess.Popen(
            [*python_module("tuner.compile_ahead"), self.backend, self.dtype, self.kernels,
             "ptx" if self.simulated else "count" if self.counts else "cache", self.family],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
            env={**environment, **worker_environment()}, start_new_session=True)
        return _Worker(process)

    def _dispatch(self) -> None:
        while self._waiting and (self._idle or len(self._busy) < self.workers):
            worker = self._idle.pop() if self._idle else self._start()
            key, config = self._waiting.popleft()
            try:
                worker.process.stdin.write(json.dumps(config) + "\n")
                worker.process.stdin.flush()
            except OSError:  # it died idle: its replacement takes the job
                _stop(worker.process)
                self._waiting.appendleft((key, config))
                continue
            worker.job, worker.started = key, time.monotonic()
            self._busy.append(worker)

    def _collect(self, wait: bool) -> None:
        """Take the answers ready (waiting for one if `wait`), and fail the jobs of workers that
        died or ran past the timeout."""
        now = time.monotonic()
        for worker in [w for w in self._busy if now - w.started > self.timeout]:
            self._fail(worker, f"compile timed out after {self.timeout:.0f} s")
        if not self._busy:
            self._dispatch()
            return
        with selectors.DefaultSelector() as selector:
            for worker in self._busy:
                selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
            soonest = min(worker.started for worker in self._busy) + self.timeout
            ready = selector.select(max(0.0, soonest - time.monotonic()) if wait else 0)
        for key, _ in ready:
            worker = key.data
            line = worker.process.stdout.readline()
            if not line:
                status = worker.process.wait()
                self._fail(worker, f"the compile worker died ({_exit(status)})")
                continue
            try:
                answer = Compiled(**json.loads(line))
            except (ValueError, TypeError):
                self._fail(worker, f"the compile worker answered {line[:80]!r}, not a result")
                continue
            self._done[worker.job] = answer
            self._busy.remove(worker)
            worker.job = None
            self._idle.append(worker)
        self._dispatch()

    def _fail(self, worker: _Worker, reason: str) -> None:
        self._done[worker.job] = Compiled(time.monotonic() - worker.started, reason)
        self._busy.remove(worker)
        _stop(worker.process)


def _exit(status: int) -> str:
    if status < 0:
        name = signal.Signals(-status).name
        return f"killed by {name}{', likely out of memory' if name == 'SIGKILL' else ''}"
    return f"exit status {status}"


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        with contextlib.suppress(OSError):  # a line still buffered for a dead worker: a broken pipe
            stream.close()


def _compile(backend: str, dtype: str, kernels: str, mode: str, family: str, config: dict) -> dict:
    """One job in a worker: compile `config` into the disk cache ("cache"), also counting its
    resources ("count"), or to PTX and through ptxas ("ptx")."""
    from pathlib import Path

    from .backends import get_backend
    from .kernel import load
    from .resources import CountUnavailable, compile_ptx, count
    from .space import Space

    space, start = Space.of(get_backend(backend), dtype, family), time.perf_counter()
    resources = None
    try:
        config = space.config_type(**config)
        if mode == "count" and not space.precision.tensor_cores:
            resources = compile_and_count(space, config, Path(kernels))
        elif mode == "cache" and not space.precision.tensor_cores:
            load(space, config, Path(kernels)).compile()
        else:
            try:
                resources = count(space, config, directory=Path(kernels)).as_dict()
            except CountUnavailable:  # no ptxas here: PTX alone (a tensor-core kernel's would link nothing)
                if not space.precision.tensor_cores:
                    compile_ptx(space, config, directory=Path(kernels))
    except OSError as error:  # the kernel directory or the disk, not the variant
        return {"seconds": time.perf_counter() - start, "fatal": str(error)}
    except Exception as error:  # the variant's failure, reported with its reason
        return {"seconds": time.perf_counter() - start, "error": error_line(error)}
    return {"seconds": time.perf_counter() - start, "resources": resources}


def compile_and_count(space, config, kernels) -> dict | None:
    """Compile `config`'s kernel into the disk cache in the kernel directory `kernels`, then make
    its static resource report from the kernel Numba compiled (on an sm_90 GPU, from its IR): what
    a counting worker does for one job, and the measuring process where none compiles ahead. None
    where the report cannot be made, which costs the variant nothing: it is measured, unpruned. A
    kernel that does not compile raises, as Numba does."""
    from .kernel import load
    from .resources import count
    from .sass import NoDisassembler

    compiled = load(space, config, kernels).compile()
    try:
        return count(space, config, directory=kernels, compiled=compiled).as_dict()
    except NoDisassembler:
        return None
    except OSError:
        raise  # the kernel directory or the disk: fatal, as for the compile
    except Exception:  # no ptxas, or ptxas or nvdisasm failed
        return None


def _context_problem(backend: str) -> str:
    """Why this worker cannot compile for the GPU (it needs a context of its own), or ""."""
    from .backends import get_backend

    try:
        get_backend(backend).load().current_context()
    except Exception as error:  # the driver's refusal, such as a GPU in exclusive-process mode
        return (f"a compile worker cannot open a {backend} context ({type(error).__name__}: {error}); the GPU may "
                "allow one process only: rerun with --compile-workers 0")
    return ""


def main() -> None:
    """A worker: a lower priority, in a session of its own (the terminal's Ctrl-C reaches the
    search alone, which stops the pool), gone with the search; then one answer per job line."""
    os.nice(NICENESS)
    follow_parent()
    backend, dtype, kernels, mode, family = sys.argv[1:6]
    unavailable = _context_problem(backend) if mode != "ptx" else ""
    for line in sys.stdin:
        answer = {"seconds": 0.0, "fatal": unavailable} if unavailable else _compile(
            backend, dtype, kernels, mode, family, json.loads(line))
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
