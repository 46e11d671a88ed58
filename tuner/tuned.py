"""Tuned kernels for programs: `tuner.get_kernel` and `tuner.matmul`, served from the cache.

For the device in use, a product gets the best configuration of the record of this device's
fingerprint whose shape is nearest its own. Where this device has none for the dtype, a record of
the same GPU model under other software (driver, runtime, Numba, templates), of a shape's the
newest, serves, once its configuration passes verification here, with one warning that says so
and how to re-time it. The configuration is rendered from the installed templates and compiled
once per process, and, through Numba's on-disk cache (`cache=True`), once per machine. A record of
another GPU model is never used. With nothing tuned for this model, a default configuration runs,
after one warning that names the command to tune it, and `tuner regenerate` where the user's cache
holds what was tuned on another GPU model.
"""
import numbers
import os
import shlex
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import arrays, cache, record
from .config import Tiling
from .devices import software_changes
from .dtypes import PRECISIONS
from .family import DEFAULT
from .kernel import Kernel, kernel_dir, load
from .measure import verify_config
from .problem import Problem
from .runtime import SPAWN, NoGPU, Runtime, RuntimeUnavailable, detect_runtime
from .space import InvalidConfig, Space


# Products whose kernel choice is remembered; a program of many shapes recomputes the oldest.
SHAPES_KEPT = 4096


class UntunedWarning(UserWarning):
    """Nothing is tuned for this device and dtype, so an untuned default configuration runs."""


class OtherSoftwareWarning(UserWarning):
    """A configuration tuned on this GPU model under other software was verified here."""


class SkippedRecordWarning(UserWarning):
    """A cache record that cannot be used; the message names the file and says why."""


@dataclass(frozen=True)
class TunedKernel:
    """A compiled kernel for one product, and where its configuration came from."""

    kernel: Kernel
    problem: Problem  # the product asked for
    record: Path | None  # the record (of this device) whose configuration this is; None if untuned
    tuned_for: Problem | None  # the product that record was tuned for

    @property
    def tuned(self) -> bool:
        return self.record is not None

    @property
    def config(self) -> Tiling:
        return self.kernel.config

    @property
    def source_path(self) -> Path:
        """The generated Numba source this kernel was compiled from."""
        return self.kernel.path

    @property
    def grid(self) -> tuple[int, ...]:
        """Blocks per grid that cover this product. Past a grid's limits (65,535 row tiles or
        products) calling the kernel launches it in several grids, each within them; past ROC's
        2**32 - 1 threads along a row of tiles it is refused."""
        return self.kernel.grid(self.problem.shapes[2])

    @property
    def block(self) -> int:
        """Threads per block."""
        return self.kernel.block

    def __call__(self, A, B, C, alpha=1.0, beta=0.0) -> None:
        """Launch on device arrays of this product's shape: C = alpha*A@B + beta*C."""
        self.kernel(A, B, C, alpha, beta)


@dataclass(frozen=True)
class Choice:
    """A configuration some record offers for the products of its dtype."""

    tuned_for: Problem
    path: Path
    config: Tiling
    record: record.Record
    other_software: bool  # tuned on this GPU model under another driver, runtime, Numba or templates


@dataclass
class Library:
    """The tuned configurations of one device, from the user's cache and the shipped one: those
    measured under this device's fingerprint, else those of the same GPU model under other
    software, each verified here on first use."""

    runtime: Runtime
    kernels: Path  # the kernel directory
    choices: list[Choice]
    options: str = ""  # what a suggested tuner command needs to use this library's cache (--cache-dir)
    chosen: OrderedDict = field(default_factory=OrderedDict)  # Problem -> TunedKernel, most recent last
    compiled: dict = field(default_factory=dict)  # (Space, configuration) -> Kernel
    warned: set = field(default_factory=set)  # (family, dtype) pairs warned about
    verified: dict = field(default_factory=dict)  # (record path, configuration) -> whether it passed verification here
    # (family, dtype) -> the names of the other GPU models whose records in the user's cache `tuner regenerate`
    # would re-tune here
    elsewhere: dict = field(default_factory=dict)

    @classmethod
    def load(cls, runtime: Runtime, root: Path, named: bool = False) -> "Library":
        """The records of `runtime`'s device, or of its model, under `root` (`named` by the caller,
        so that the commands suggested name it too) and in the shipped cache; a record that cannot
        be used is skipped with a SkippedRecordWarning naming it."""
        options = f" --cache-dir {shlex.quote(str(root.absolute()))}" if named else ""
        device, simulate = runtime.device, " --simulate" if runtime.simulated else ""
        catalog = cache.Catalog.read(root)
        skipped, choices, usable = [str(error) for error in catalog.skipped], [], set()
        for stored in catalog.select(model=device.model):  # the user's first: a shipped one of the same id gives way
            valid = stored.record.valid_configs()
            if stored.shipped and stored.id in usable:
                continue
            if valid:
                usable.add(stored.id)
                # Under other software each ranked configuration is a choice, tried in turn until one
                # passes verification here; under this fingerprint the best is the choice.
                other_software = stored.record.fingerprint != device.fingerprint
                choices += [Choice(stored.record.problem, stored.path, config, stored.record, other_software)
                            for config in (valid if other_software else valid[:1])]
            elif stored.record.fingerprint == device.fingerprint:
                skipped.append(f"{stored.path}: none of its configurations is valid in this version of tuner; "
                               f"run: tuner regenerate --backend {runtime.backend.name}{simulate}{options}")
        for reason in skipped:
            warnings.warn(f"tuner: skipping cache record {reason}", SkippedRecordWarning, stacklevel=4)
        return cls(runtime, kernel_dir(root), choices, options, elsewhere=_elsewhere(catalog, runtime))

    def kernel(self, problem: Problem) -> TunedKernel:
        """The compiled kernel for `problem`: tuned for the nearest shape, or the default."""
        tuned = self.chosen.get(problem)
        if tuned is not None:
            self.chosen.move_to_end(problem)
            return tuned
        space = Space.of(self.runtime.backend, problem.dtype, problem.family)
        choice = self._choose(space, problem)
        if choice is None:
            self._warn_untuned(problem)
            tuned = TunedKernel(self._compile(space, space.default()), problem, None, None)
        else:
            tuned = TunedKernel(self._compile(space, choice.config), problem, choice.path, choice.tuned_for)
        self.chosen[problem] = tuned
        if len(self.chosen) > SHAPES_KEPT:
            self.chosen.popitem(last=False)
        return tuned

    def _choose(self, space: Space, problem: Problem) -> Choice | None:
        """The choice of the nearest shape among this device's records of `problem`'s dtype, else
        among those of its model under other software that pass verification here: of one shape's
        records there, one per software version, the newest first (as `tuner show` shows it), its
        configurations in their rank."""
        for other_software in (False, True):
            candidates = [choice for choice in self.choices if choice.other_software == other_software
                          and choice.tuned_for.family == problem.family and choice.tuned_for.dtype == problem.dtype]
            if other_software:
                candidates.sort(key=lambda choice: choice.record.finished_at, reverse=True)
            candidates.sort(key=lambda choice: problem.distance(choice.tuned_for))  # stable: the newest first
            for choice in candidates:
                if not other_software or self._verified(space, choice):
                    return choice
        return None

    def _verified(self, space: Space, choice: Choice) -> bool:
        """Whether a configuration tuned under other software computes correctly here, checked once
        on small products with edge tiles in every dimension; said in a warning either way."""
        key = (choice.path, choice.config)
        if key not in self.verified:
            check = verify_config(self.runtime, space, choice.config, self.kernels)
            self.verified[key] = not check
            changes = ", ".join(software_changes(choice.record.device, self.runtime.device)) or "other versions"
            regenerate = (f"tuner regenerate --backend {self.runtime.backend.name}"
                          f"{' --simulate' if self.runtime.simulated else ''}{self.options}")
            outcome = (f"it passed verification here, and runs as tuned; to re-time it: {regenerate}" if not check
                       else f"it fails verification here ({check}), so it is not used; to re-tune its product here: "
                            f"{regenerate}")
            warnings.warn(f"tuner: {choice.path} was tuned for {record.file_stem(choice.tuned_for)} on this GPU model "
                          f"under other software ({changes}); its configuration "
                          f"{choice.config.describe(self.runtime.backend)}: {outcome}",
                          OtherSoftwareWarning, stacklevel=5)
        return self.verified[key]

    def _compile(self, space: Space, config: Tiling) -> Kernel:
        key = (space, config)
        if key not in self.compiled:
            kernel = load(space, config, self.kernels)
            kernel.compile()
            self.compiled[key] = kernel
        return self.compiled[key]

    def _warn_untuned(self, problem: Problem) -> None:
        if (problem.family, problem.dtype) in self.warned:
            return
        self.warned.add((problem.family, problem.dtype))
        device, backend = self.runtime.device, self.runtime.backend.name
        simulate = " --simulate" if self.runtime.simulated else ""
        what = problem.dtype if problem.family == DEFAULT else f"{problem.family} {problem.dtype}"
        others = self.elsewhere.get((problem.family, problem.dtype))
        regenerate = (f" (or re-tune here what was tuned on {', '.join(others)}, another GPU model, with: tuner "
                      f"regenerate --backend {backend}{simulate}{self.options})" if others else "")
        warnings.warn(
            f"tuner: nothing is tuned for {what} on {device.name} [{device.fingerprint}], so an untuned "
            f"default configuration runs; tune it once with: tuner search --backend {backend}{simulate} --dtype "
            f"{problem.dtype} {problem.options}{self.options}{regenerate}", UntunedWarning, stacklevel=4)


def _elsewhere(catalog: cache.Catalog, runtime: Runtime) -> dict[tuple[str, str], list[str]]:
    """Of each (family, dtype), the names of the other GPU models of the backend whose records in the
    user's cache `tuner regenerate` would re-tune on `runtime`'s device (Stored.regenerated_on; a
    product too large here is one it skips)."""
    names: dict[tuple[str, str], set[str]] = {}
    for stored in catalog.select(backend=runtime.backend.name):
        device, problem = stored.record.device, stored.record.problem
        if (stored.regenerated_on(runtime.device) and device.model != runtime.device.model
                and not runtime.refuses(problem)):
            names.setdefault((stored.record.family, problem.dtype), set()).add(device.name)
    return {key: sorted(found) for key, found in names.items()}


_lock = threading.Lock()
_runtimes: dict[str | None, Runtime] = {}  # backend asked for -> the runtime first opened for it
_on_device: dict[tuple[str, int | None], Runtime] = {}  # (backend, device id) -> the runtime of that device
_libraries: dict[tuple[tuple[str, int | None], Path], Library] = {}  # (device key, cache root) -> its records
_roots: dict[tuple[str | None, str | None], Path] = {}  # ($TUNER_CACHE_DIR, $HOME) -> the cache root they name


def _device_id(runtime: Runtime) -> int | None:
    """The id of the program's current device in `runtime`'s module (None on the simulator)."""
    return None if runtime.simulated else getattr(runtime.module.get_current_device(), "id", None)


def _runtime(backend: str | None) -> tuple[tuple[str, int | None], Runtime]:
    """The runtime of `backend` on the program's current device, with its key (backend, device id):
    a program may switch GPUs (cuda.select_device, `with cuda.gpus[1]`), and each has its own
    records. Under _lock."""
    just_opened = backend not in _runtimes
    if just_opened:
        try:
            _runtimes[backend] = detect_runtime(backend)
        except NoGPU as reason:
            raise NoGPU(f"no GPU here ({reason}); tuner.matmul needs one, or, to try it on Numba's CUDA simulator "
                        "(slow: small matrices only), set NUMBA_ENABLE_CUDASIM=1 before starting Python") from None
    opened = _runtimes[backend]
    key = (opened.backend.name, _device_id(opened))
    if key not in _on_device:  # a runtime just opened describes the current device already
        _on_device[key] = opened if just_opened else Runtime(opened.backend, opened.module,
                                                             opened.backend.describe(opened.module))
    return key, _on_device[key]


def _refuse_forked() -> None:
    """RuntimeUnavailable, saying what to do, in a process forked from one where tuner had opened a
    GPU: its driver, initialised before the fork, cannot be used in the child (numba-cuda raises
    "CUDA initialized before forking" at the child's first driver call). Asked before _lock, which
    a thread of the parent may have held when it forked."""
    process = os.getpid()
    for runtime in list(_runtimes.values()):
        if runtime.opened_in != process and not runtime.simulated:
            raise RuntimeUnavailable(
                f"this process was forked from process {runtime.opened_in} after tuner had opened its "
                f"{runtime.backend.name} GPU, whose driver cannot be used in a process forked after it started; "
                f"{SPAWN}")


def _library(backend: str | None, cache_dir) -> Library:
    """The records of `backend`'s current device under `cache_dir`, else under $TUNER_CACHE_DIR (or
    the user's cache directory): that directory is worked out and checked once per value of the
    variable (and of $HOME, which a leading ~ names), not at each call of tuner.matmul."""
    _refuse_forked()
    with _lock:
        key, runtime = _runtime(backend)
        if cache_dir is None:
            setting = os.environ.get("TUNER_CACHE_DIR"), os.environ.get("HOME")
            if setting not in _roots:
                _roots[setting] = cache.cache_dir()
            root = _roots[setting]
        else:
            root = cache.cache_dir(cache_dir, option="cache_dir=")
        if (key, root) not in _libraries:
            _libraries[key, root] = Library.load(runtime, root, named=cache_dir is not None)
        return _libraries[key, root]


def reload() -> None:
    """Forget the records read so far, so that the next call reads the cache again (after a
    search in this process, say)."""
    with _lock:
        _libraries.clear()
        _roots.clear()


def get_kernel(m: int, n: int, k: int, dtype: str = "float32", *, backend: str | None = None,
               cache_dir=None) -> TunedKernel:
    """The compiled kernel for an (m x k) @ (k x n) product on this machine's GPU, with its
    configuration, source path and launch geometry, for programs that launch it themselves.

    `backend` is "cuda" or "roc" (default: $TUNER_BACKEND, else the GPU found); `cache_dir`
    defaults to $TUNER_CACHE_DIR, else the user cache directory.
    """
    library = _library(backend, cache_dir)
    dtype = _dtype_name(dtype)
    m, n, k = (int(size) if isinstance(size, numbers.Integral) and not isinstance(size, bool) else size
               for size in (m, n, k))  # NumPy's integers too; Problem refuses the rest in one line
    try:
        space = Space.of(library.runtime.backend, dtype)
    except InvalidConfig as error:  # a dtype the backend lacks: a TypeError, as tuner.matmul's and NumPy's
        raise TypeError(str(error)) from None
    lacks = library.runtime.lacks(space.precision)
    if lacks:
        raise TypeError(lacks)
    with _lock:
        return library.kernel(Problem(m, n, k, dtype))


def _dtype_name(dtype) -> str:
    """The name of a dtype given as a precision's name ('tf32'), a NumPy dtype, its name or code
    ('single', 'f4'), or a scalar type (np.float32); a string NumPy does not know is returned as
    given, for Problem to refuse by name."""
    if isinstance(dtype, str) and dtype in PRECISIONS:
        return dtype
    if dtype is None:  # NumPy would take it as float64
        raise TypeError("dtype must be a NumPy dtype or its name, such as 'float32', not None")
    try:
        return np.dtype(dtype).name
    except TypeError:
        if isinstance(dtype, str):
            return dtype
        raise TypeError(f"dtype must be a NumPy dtype or its name, such as 'float32', not {dtype!r}") from None


def matmul(A, B, out=None, *, alpha=1.0, beta=0.0, precision=None):
    """alpha * A @ B (+ beta * out), with the kernel tuned for this GPU.

    A and B are 2-D matrices of one dtype (float32, float64, or float16 with a float32 result), or
    3-D stacks of them, (b, m, k) @ (b, k, n), one of which may be a single matrix (or a stack of
    one), broadcast as np.matmul broadcasts it.
    `precision` opts into NVIDIA's tensor cores: "tf32" for float32 matrices (TF32 multiplies, as
    cuBLAS with TF32 allowed: a relative error near 3e-4) or "float16-tc" for float16 ones (float32
    accumulation and result); by default the product runs in the matrices' own precision.
    NumPy arrays (and lists, anything numpy.asarray takes) are copied to the device and the result
    comes back as NumPy; Numba device arrays and CUDA Array Interface exporters (CuPy, PyTorch) are
    used in place (one not C-contiguous, the layout the kernel is verified for, is copied into one
    on the device first), and the result is of their kind. With `out`, the result is written there and
    `out` is returned; beta scales out's previous values and needs `out`. Records are read from
    $TUNER_CACHE_DIR, else the user cache directory, and from those shipped with tuner. Operands it
    cannot take are a one-line TypeError or ValueError (a MemoryError where the device has no room
    for them), before anything is launched; a MemoryError too where the launch finds no room left.
    """
    library = _library(None, None)
    with arrays.memory_named():
        call = arrays.prepare(library.runtime, A, B, out, alpha, beta, precision)
        if call.problem is not None:
            with _lock:
                kernel = library.kernel(call.problem).kernel
            kernel.bind(*call.family.kernel_operands(call.A, call.B), call.C, call.alpha, call.beta, call.stream,
                        checked=True)()
        return call.result()
