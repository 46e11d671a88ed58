"""Turn rendered source into a launchable kernel: a file named by the hash of its content and of
the compile settings (Backend.compile_settings, which Numba's cache does not key by), imported.

Numba's on-disk cache (`cache=True`) needs the kernel to live in a real file, so every rendered
variant is written under the kernel directory and executed from the source rendered now. The
file is only where Numba's cache finds the kernel: its bytes are checked against that source
before each use, and a file that differs (edited, planted, a symbolic link, another user's) is
replaced, never run. A file is written under a lock of its own (matmul_<hash>.lock), so the next
writer removes the temporary file of one killed mid-write. The directory, and the `__pycache__`
beside the files where Numba keeps its compiled kernels, must be writable by this user alone, and
a .numba_config.yaml in the current directory may name no code for Numba to load; where
numba.cuda compiles (not on the simulator), FORCE_CUDA_CC is refused too (see docs/security.md).
"""
import contextlib
import grp
import hashlib
import importlib
import json
import os
import pwd
import stat
import sys
import threading
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import cache, disk, simulator
from .arrays import compiled_layout, scalar, sharing
from .backends import by_module
from .callers import user_stacklevel
from .config import Tiling
from .source import render
from .space import Space

_replaced: set[Path] = set()  # kernel files already reported as replaced in this process


class KernelFileWarning(UserWarning):
    """A kernel file that did not hold its rendered source was replaced before use."""


class UnsafeKernelDirectory(OSError):
    """The kernel directory, or the Numba configuration file beside this process, cannot be trusted
    or written, or Numba's configuration would compile for another GPU; the message says what to do."""


def kernel_dir(cache_root: Path | None = None) -> Path:
    """Where rendered kernel files live: $TUNER_KERNEL_DIR, else <cache directory>/kernels
    (the cache directory being --cache-dir, else $TUNER_CACHE_DIR, else the user's)."""
    if os.environ.get("TUNER_KERNEL_DIR"):
        return disk.user_path(os.environ["TUNER_KERNEL_DIR"], "TUNER_KERNEL_DIR")
    return (cache_root or cache.cache_dir()) / "kernels"


_OWN_KERNEL_DIR = "set TUNER_KERNEL_DIR to a directory of your own (tuner creates it with mode 700)"
# Where TUNER_KERNEL_DIR is unset, the kernel directory is the cache directory's kernels/.
_OWN_CACHE_DIR = ("set TUNER_CACHE_DIR (or --cache-dir, tuner.get_kernel's cache_dir=) to a directory of your own, "
                  "whose kernels/ tuner creates with mode 700, or set TUNER_KERNEL_DIR to one")
_OWN_NUMBA_CACHE = ("unset NUMBA_CACHE_DIR (and the cache_dir of a .numba_config.yaml in the current directory), "
                    "or set it to a directory of your own")


def private_dir(directory: Path, remedy: str = "", what: str = "the kernel directory") -> Path:
    """`directory` (`what` it is, in words), created with mode 700 if new, once checked to be a real
    directory that no other user can write; UnsafeKernelDirectory saying what is wrong and `remedy`
    otherwise (by default, what sets the kernel directory: TUNER_KERNEL_DIR, else the cache directory)."""
    remedy = remedy or (_OWN_KERNEL_DIR if os.environ.get("TUNER_KERNEL_DIR") else _OWN_CACHE_DIR)
    try:
        disk.make_dirs(directory)
        info = os.lstat(directory)
    except OSError as error:
        if isinstance(error, (FileExistsError, NotADirectoryError)) and Path(error.filename) == directory:
            raise UnsafeKernelDirectory(f"{directory} exists and is not a directory; {remedy}") from None
        blocker = f": {error.filename}" if error.filename and Path(error.filename) != directory else ""
        raise UnsafeKernelDirectory(f"cannot create {what} {directory} ({error.strerror or error}{blocker}); "
                                    f"{remedy}") from None
    problem = ("is a symbolic link" if stat.S_ISLNK(info.st_mode) else
               "is not a directory" if not stat.S_ISDIR(info.st_mode) else
               f"belongs to user {info.st_uid}, not to you ({os.geteuid()})" if info.st_uid != os.geteuid() else
               f"can be written by other users (mode {stat.S_IMODE(info.st_mode):o})" if _others_can_write(info) else
               _unsafe_ancestor(directory))
    if problem:
        raise UnsafeKernelDirectory(f"{what} {directory} {problem}; tuner runs generated code only "
                                    f"from a directory that no one else can write: {remedy}")
    return directory


def _others_can_write(info: os.stat_result) -> bool:
    """Whether users other than this one can write the file or folder `info` describes: anyone may,
    or its group may and is not this user's private group (named as the user, this user's primary
    group and no other user's, naming no other member), which a umask of 002 leaves writable on
    every folder a user makes. This is the rule of Debian's OpenSSH for the files it trusts; what
    cannot be shown (a user or group the system cannot name) counts as writable."""
    if info.st_mode & 0o002:
        return True
    if not info.st_mode & 0o020:
        return False
    try:
        user, group = pwd.getpwuid(os.geteuid()), grp.getgrgid(info.st_gid)
    except KeyError:
        return True
    return (group.gr_name != user.pw_name or info.st_gid != user.pw_gid or not set(group.gr_mem) <= {user.pw_name}
            or any(other.pw_gid == info.st_gid and other.pw_name != user.pw_name for other in pwd.getpwall()))


def _unsafe_ancestor(directory: Path) -> str:
    """Why another user could swap `directory` for one of their own, or ""; through a folder on the
    way to it that they own or can write (a sticky one, such as /tmp, excepted), or a symbolic link
    on the way that is theirs. Each link is followed as the system follows it, so that the folders
    of the path as given and of every link's target are checked, not only those of the real path."""
    folder, ahead = Path("/"), list((Path.cwd() / directory).parts[1:])
    while ahead:
        name = ahead.pop(0)
        if name == "..":
            folder = folder.parent
            continue
        info = os.stat(folder)
        if info.st_uid not in (0, os.geteuid()):
            return f"lies in {folder}, which belongs to user {info.st_uid}"
        if _others_can_write(info) and not info.st_mode & stat.S_ISVTX:
            return f"lies in {folder}, which other users can write (mode {stat.S_IMODE(info.st_mode):o})"
        entry = folder / name
        link = os.lstat(entry)
        if not stat.S_ISLNK(link.st_mode):
            folder = entry
            continue
        if link.st_uid not in (0, os.geteuid()):
            return f"is reached through the symbolic link {entry}, which belongs to user {link.st_uid}"
        target = Path(os.readlink(entry))
        folder, ahead = (Path("/") if target.is_absolute() else folder), [*target.parts[target.is_absolute():], *ahead]
    return ""


_NUMBA_CONFIG = ".numba_config.yaml"  # Numba reads it from the current directory, at import and before each compile
# The options of that file that name code for Numba or numba-cuda to load, and what they name.
_LOADS_CODE = {"CUDA_DRIVER": "a driver library to load", "CUDA_MEMORY_MANAGER": "a module to import",
               "CUDA_INCLUDE_PATH": "headers to compile into kernels", "CACHE_LOCATOR_CLASSES": "classes to import",
               "GDB_BINARY": "a program to run"}


def check_numba_config() -> None:
    """UnsafeKernelDirectory, saying what to do, unless the .numba_config.yaml that Numba reads
    from the current directory is a file that only this user (or root) can have written, in a
    directory where no one else can replace it, and names no code to load (_LOADS_CODE); where
    there is none, no one else may be able to put one. NUMBA_* variables are the user's own."""
    try:
        info = os.lstat(_NUMBA_CONFIG)  # as Numba opens it: relative to the current directory
    except FileNotFoundError:
        info = None
    present, path = info is not None and stat.S_ISREG(info.st_mode), Path.cwd() / _NUMBA_CONFIG
    problem = "is a symbolic link" if info is not None and stat.S_ISLNK(info.st_mode) else present and _foreign(info)
    if problem:
        raise UnsafeKernelDirectory(f"{path}, which Numba reads, {problem}; make it a file of yours that only you "
                                    "can write, or remove it")
    here = os.stat(".")
    problem = _foreign(here)
    if problem and not (present and here.st_mode & stat.S_ISVTX and here.st_uid in (0, os.geteuid())):
        remedy = (f"run `chmod go-w {path.parent}`" if here.st_uid == os.geteuid() and not here.st_mode & stat.S_ISVTX
                  else "run tuner from a directory of your own")
        raise UnsafeKernelDirectory(f"the current directory {path.parent} {problem}, so someone else could put there "
                                    f"the {_NUMBA_CONFIG} that Numba reads; {remedy}")
    if not present:
        return
    try:
        import yaml
    except ImportError:  # Numba then ignores the file too
        return
    try:
        with open(_NUMBA_CONFIG) as file:  # as Numba opens it
            options = yaml.safe_load(file) or {}
    except (OSError, ValueError, yaml.YAMLError) as error:  # ValueError: not in the locale's encoding
        options = error
    if not isinstance(options, dict) or not all(isinstance(option, str) for option in options):
        raise UnsafeKernelDirectory(f"{path}, which Numba reads, is not a YAML mapping of option names "
                                    f"({type(options).__name__}); fix it or remove it")
    named = [option for option in options if option.upper() in _LOADS_CODE]  # Numba reads NUMBA_ + name.upper()
    if named:
        raise UnsafeKernelDirectory(
            f"{path} sets " + ", ".join(f"{option} ({_LOADS_CODE[option.upper()]})" for option in named)
            + ": tuner loads no code that a file names; remove it there, or set "
            + ", ".join(f"NUMBA_{option.upper()}" for option in named) + " in the environment if it is meant")


def _foreign(info: os.stat_result) -> str:
    """Why another user could have written the file or folder `info` describes, or ""."""
    if info.st_uid not in (0, os.geteuid()):
        return f"belongs to user {info.st_uid}"
    if _others_can_write(info):
        return f"can be written by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return ""


def _numba_cache_dir(directory: Path, module: str) -> Path:
    """Where Numba keeps the compiled kernels of the files in the private `directory`, checked
    private too: its cache directory if one is set ($NUMBA_CACHE_DIR, else the cache_dir of a
    .numba_config.yaml in the current directory, which Numba reads too), else the `__pycache__`
    beside the files. numba-cuda keeps a configuration of its own beside Numba's; both are read
    again, as their compilers read them before each compile, and each one set is checked, once
    the configuration file is (check_numba_config). Where numba.`module` compiles the kernels (not
    in the simulator's process), its backend's forced_target (numba.cuda's FORCE_CUDA_CC) in the
    configuration it reads (numba-cuda's, else that of the numba.cuda built into Numba, which is
    Numba's own) is refused: it would compile for that compute capability, not the one tuner
    compiles and counts for, and cache the kernels as the GPU's. numba-hip has no such setting."""
    check_numba_config()
    configs = []
    for name in ("numba.cuda.core.config", "numba.core.config"):
        with contextlib.suppress(ImportError):
            config = importlib.import_module(name)
            config.reload_config()
            configs.append(config)
    forced = by_module(module).forced_target
    if forced and getattr(configs[0], forced) and not simulator.simulating():
        raise UnsafeKernelDirectory(
            f"Numba's configuration sets {forced} (NUMBA_{forced}, or {forced.lower()} in "
            f"{Path.cwd() / _NUMBA_CONFIG}), so numba.{module} would compile the kernels for that compute "
            "capability, not the one tuner compiles and counts them for; unset it")
    chosen = [private_dir(Path(config.CACHE_DIR), _OWN_NUMBA_CACHE, "Numba's cache directory")
              for config in configs if config.CACHE_DIR]
    return chosen[0] if chosen else private_dir(directory / "__pycache__")


def _difference(path: Path, expected: bytes) -> str:
    """How the file at `path` differs from `expected`: "" if it holds exactly those bytes."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "a symbolic link" if path.is_symlink() else "unreadable"
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_uid != os.geteuid():
            return f"owned by user {info.st_uid}"
        return "" if file.read(len(expected) + 1) == expected else "not the source rendered now"


def _write_atomically(path: Path, content: bytes) -> None:
    """Replace `path` with `content` in one rename, under its lock, so that the temporary files of
    writers killed before their rename can be removed; on failure no temporary file is left. The
    error names what chose the folder: TUNER_KERNEL_DIR, else the cache directory."""
    try:
        with disk.locked(path):
            disk.write_atomically(path, content)
    except OSError as error:
        elsewhere = ("set TUNER_KERNEL_DIR to another directory" if os.environ.get("TUNER_KERNEL_DIR") else
                     "give another cache directory (--cache-dir, TUNER_CACHE_DIR, tuner.get_kernel's cache_dir=), "
                     "whose kernels/ holds them, or set TUNER_KERNEL_DIR to another directory")
        raise UnsafeKernelDirectory(f"cannot write the kernel file {path} ({error.strerror or error}); check the "
                                    f"disk space and what is at that path, or {elsewhere}") from None


def check_kernel_dir(directory: Path, module: str) -> None:
    """Check the kernel directory `directory` private, creating it if new, and Numba's cache of its
    kernels (of the Numba `module`, "cuda" or "hip") too; UnsafeKernelDirectory saying what to do otherwise."""
    _numba_cache_dir(private_dir(directory), module)


def write_source(source: str, directory: Path | None = None, settings: dict[str, str] | None = None,
                 module: str = "cuda") -> Path:
    """The file holding exactly `source`, named by the hash of its content and of the compiler
    `settings` it is to be compiled under (Backend.compile_settings, which Numba's cache of the
    file's kernels does not key by), in a private kernel directory, for the Numba `module` ("cuda"
    or "hip") to compile. A file there that differs is replaced (and said so once); Numba's compiled
    kernels of the replaced file go with it."""
    directory = private_dir(directory or kernel_dir())
    compiled = _numba_cache_dir(directory, module)
    named = source + (json.dumps(settings, sort_keys=True) if settings else "")
    path = directory / f"matmul_{hashlib.sha256(named.encode()).hexdigest()[:20]}.py"
    expected = source.encode()
    difference = _difference(path, expected)
    if not difference:
        return path
    if difference != "missing":
        for stale in compiled.rglob(f"{path.stem}.*.nb[ic]"):  # Numba's index and compiled kernels
            stale.unlink(missing_ok=True)
        if path not in _replaced:
            _replaced.add(path)
            warnings.warn(f"tuner: the kernel file {path} was {difference}; it was not run, and was rendered "
                          "again from the installed templates", KernelFileWarning, stacklevel=user_stacklevel())
    _write_atomically(path, expected)
    return path


def import_source(source: str, module_name: str, directory: Path | None = None,
                  settings: dict[str, str] | None = None) -> types.ModuleType:
    """The module of rendered `source` compiled under `settings`, once per process (its name is
    their hash): the checked file is written (write_source), then `source` itself runs as that
    file's code, so nothing read back from disk runs. On the simulator, its GPU module is bound to
    the simulator (simulator.bound)."""
    path = write_source(source, directory, settings, module_name)
    if path.stem in sys.modules:
        return sys.modules[path.stem]
    module = types.ModuleType(path.stem)
    module.__file__ = str(path)
    code = compile(source, str(path), "exec")
    with simulator.bound(module_name):
        exec(code, module.__dict__)
    sys.modules[path.stem] = module
    return module


# numba-cuda warns (NumbaPerformanceWarning) when a launch is configured with under 128 blocks, as
# its dispatcher module's config.CUDA_LOW_OCCUPANCY_WARNINGS says; a small product's grid is small,
# which the caller cannot change, so that setting is off while tuner configures its launches, one
# thread at a time. (Filtering the warning instead would touch the process's warning state, which
# Numba's compiler in another thread uses too.)
_configuring = threading.Lock()


@dataclass(frozen=True)
class Kernel:
    """A compiled-on-demand kernel of one family with what it takes to launch it."""

    space: Space
    config: Tiling
    path: Path
    function: object  # the Numba dispatcher: function[grid, block](A, B, C, alpha, beta)

    def grid(self, c_shape: tuple) -> tuple[int, ...]:
        """Blocks per grid for a result of shape `c_shape` (one launch of it)."""
        return self.space.family.grid(self.config, c_shape)

    @property
    def block(self) -> int:
        """Threads per block."""
        return self.config.threads

    def __call__(self, A, B, C, alpha=1.0, beta=0.0):
        """Launch on arrays already shaped and typed for this kernel: C = alpha*A@B + beta*C."""
        self.bind(A, B, C, alpha, beta)()

    def bind(self, A, B, C, alpha=1.0, beta=0.0, stream=0, *, checked=False):
        """A no-argument launch on `stream` (0: the default one), with the operands and scalars
        checked (unless the caller has: `checked`) and the grids worked out once, so that repeated
        launches pay only Numba's dispatch. A product with more rows than one grid covers runs as
        several launches (Family.parts); one wider than a grid covers (on ROC: Backend.grid_columns)
        is a ValueError."""
        if not checked:
            accumulate = np.dtype(self.space.precision.accumulate).type
            alpha, beta = scalar("alpha", alpha, accumulate), scalar("beta", beta, accumulate)
            self.check_operands(A, B, C)
        if 0 in tuple(C.shape):
            return lambda: None  # nothing to compute, and a grid with no blocks is no launch
        backend = self.space.backend
        columns = self.config.block_n * backend.grid_columns(self.config.threads)
        if tuple(C.shape)[-1] > columns:  # a block of C's columns is not C-contiguous: another, unverified kernel
            raise ValueError(f"C is {tuple(C.shape)[-1]} columns wide, more than one {backend.name} launch of this "
                             f"kernel covers; multiply B's columns in blocks of at most {columns}")
        parts = self.space.family.parts(A, B, C, self.config, backend.limits.grid_rows)
        grids = [self.grid(C_part.shape) for _, _, C_part in parts]
        if len(parts) == 1 and not simulator.simulating():
            configured = self._configured(grids[0], stream)
            return lambda: configured(A, B, C, alpha, beta)

        def launch():  # configured at each launch: the simulator's kernel keeps only its last configuration
            with simulator.one_launch_at_a_time():
                for grid, (A_part, B_part, C_part) in zip(grids, parts):
                    self._configured(grid, stream)(A_part, B_part, C_part, alpha, beta)
        return launch

    def _configured(self, grid: tuple[int, ...], stream):
        """The kernel configured for one launch of `grid` on `stream`, without numba-cuda's warning
        of a small grid (see _configuring)."""
        config = getattr(sys.modules.get(type(self.function).__module__), "config", None)
        if not hasattr(config, "CUDA_LOW_OCCUPANCY_WARNINGS"):  # the simulator's, or a Numba without it
            return self.function[grid, self.block, stream]
        with _configuring:
            warns, config.CUDA_LOW_OCCUPANCY_WARNINGS = config.CUDA_LOW_OCCUPANCY_WARNINGS, 0
            try:
                return self.function[grid, self.block, stream]
            finally:
                config.CUDA_LOW_OCCUPANCY_WARNINGS = warns

    def compile(self):
        """Compile now for C-contiguous operands, so compile errors surface apart from launch
        errors: Numba's compiled kernel (registers, shared and local memory), or None on the
        simulator, which interprets the Python source and has nothing to compile."""
        if simulator.simulating():
            return None
        return self.function.compile(self.space.family.signature(self.space.precision))

    def check_operands(self, A, B, C) -> None:
        """ValueError unless A, B and C have the dimensions and shapes of one product of this
        kernel's family, are C-contiguous, and C shares no memory with A or B; TypeError for what
        is not an array or not of the kernel's dtypes, as tuner.matmul. The kernel takes the sizes
        from C and A; anything else would read out of bounds, an array of another layout would
        make Numba compile another kernel, never verified (compiled_layout), and a C over an
        operand would be read after it was overwritten."""
        precision, family = self.space.precision, self.space.family
        for name, array, dtype in (("A", A, precision.input), ("B", B, precision.input), ("C", C, precision.output)):
            if not (hasattr(array, "shape") and hasattr(array, "dtype")):
                raise TypeError(f"{name} must be a device array, not {type(array).__name__}")
            if len(array.shape) != family.operand_dims:
                raise ValueError(f"{name} must be {family.operand_dims}-D, not {len(array.shape)}-D")
            if np.dtype(array.dtype) != np.dtype(dtype):
                raise TypeError(f"{name} must be {dtype} for this {precision.name} kernel, not {array.dtype}")
            if not compiled_layout(array):
                raise ValueError(f"{name} is not C-contiguous (a transposed, strided or broadcast view), the layout "
                                 f"this kernel is compiled and verified for; pass a C-contiguous copy (tuner.matmul "
                                 f"makes one itself)")
        try:
            _, c_shape = family.sizes(tuple(A.shape), tuple(B.shape))
        except ValueError:
            c_shape = None
        if c_shape != tuple(C.shape):
            raise ValueError(f"shapes do not chain: A {A.shape} @ B {B.shape} -> C {C.shape}")
        for name, shares in zip("AB", sharing(C, A, B)):
            if shares:
                raise ValueError(f"C shares memory with {name}, which the kernel would overwrite while reading it; "
                                 f"pass a separate C (tuner.matmul copies such an operand itself)")


def load(space: Space, config: Tiling, directory: Path | None = None) -> Kernel:
    """Render, write and import the kernel for `config` in `space` (kernel files in `directory`,
    by default kernel_dir()), named for the backend's compile settings too (none on the simulator)."""
    source = render(space, config, simulated=simulator.simulating())
    module = import_source(source, space.backend.module, directory, file_settings(space))
    return Kernel(space, config, Path(module.__file__), module.matmul)


def file_settings(space: Space) -> dict[str, str]:
    """The compile settings a kernel file of `space` is named for: its backend's, none on the simulator."""
    return {} if simulator.simulating() else space.backend.compile_settings()
