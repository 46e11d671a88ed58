"""Turn rendered source into a launchable kernel: a file named by its content hash, imported.

Numba's on-disk cache (`cache=True`) needs the kernel to live in a real file, so every rendered
variant is written once under the kernel directory and imported from there.
"""
import contextlib
import hashlib
import importlib.util
import os
import sys
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import numpy as np

from .config import Config
from .runtime import simulating
from .source import render
from .space import Space

# jit options that only steer register allocation; the simulator's jit does not accept them.
_CODEGEN_ONLY_OPTIONS = ("launch_bounds", "max_registers")


def kernel_dir() -> Path:
    """Where rendered kernel files live: $TUNER_KERNEL_DIR, else the user's cache directory."""
    if "TUNER_KERNEL_DIR" in os.environ:
        return Path(os.environ["TUNER_KERNEL_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "tuner" / "kernels"


def write_source(source: str, directory: Path | None = None) -> Path:
    """The file holding `source`, named by its content hash; written atomically if new."""
    directory = directory or kernel_dir()
    path = directory / f"matmul_{hashlib.sha256(source.encode()).hexdigest()[:20]}.py"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=directory, suffix=".tmp", delete=False) as tmp:
            tmp.write(source)
        os.replace(tmp.name, path)
    return path


@contextlib.contextmanager
def _simulated_as(module_name: str):
    """While a kernel file imports: `from numba import <module_name>` yields the simulated
    numba.cuda, whose jit then ignores the options that only steer register allocation."""
    import numba
    from numba import cuda

    simulated_jit = cuda.jit

    def jit(*args, **options):
        for name in _CODEGEN_ONLY_OPTIONS:
            options.pop(name, None)
        return simulated_jit(*args, **options)

    with mock.patch.dict(sys.modules, {f"numba.{module_name}": cuda}), \
            mock.patch.object(numba, module_name, cuda, create=True), \
            mock.patch.object(cuda, "jit", jit):
        yield


def import_source(path: Path, module_name: str) -> types.ModuleType:
    """Import a rendered kernel file once per process (its name is its content hash); on the
    simulator, bind its GPU module to the simulator."""
    if path.stem in sys.modules:
        return sys.modules[path.stem]
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    with _simulated_as(module_name) if simulating() else contextlib.nullcontext():
        spec.loader.exec_module(module)
    sys.modules[path.stem] = module
    return module


@dataclass(frozen=True)
class Kernel:
    """A compiled-on-demand matmul kernel with what it takes to launch it."""

    space: Space
    config: Config
    path: Path
    function: object  # the Numba dispatcher: function[grid, block](A, B, C, alpha, beta)

    def grid(self, m: int, n: int) -> tuple[int, int]:
        """Blocks per grid for an m x n result: (column tiles, row tiles)."""
        rows, most = -(-m // self.config.block_m), self.space.backend.limits.grid_rows
        if rows > most:
            raise ValueError(f"{m} rows make {rows} row tiles of {self.config.block_m}, over the {most} a grid "
                             "may have; split the product by rows")
        return (-(-n // self.config.block_n), rows)

    @property
    def block(self) -> int:
        """Threads per block."""
        return self.config.threads

    def __call__(self, A, B, C, alpha=1.0, beta=0.0):
        """Launch on arrays already shaped and typed for this kernel: C = alpha*A@B + beta*C."""
        self.check_operands(A, B, C)
        self.bind(A, B, C, alpha, beta)()

    def bind(self, A, B, C, alpha=1.0, beta=0.0, stream=0):
        """A no-argument launch on checked operands, on `stream` (0: the default one), with the
        grid and scalars worked out once, so that repeated launches pay only Numba's dispatch."""
        scalar = np.dtype(self.space.precision.accumulate).type
        alpha, beta = scalar(alpha), scalar(beta)
        configured = self.function[self.grid(*C.shape), self.block, stream]
        return lambda: configured(A, B, C, alpha, beta)

    def compile(self):
        """Compile now for C-contiguous operands, so compile errors surface apart from launch
        errors: Numba's compiled kernel (registers, shared and local memory), or None on the
        simulator, which interprets the Python source and has nothing to compile."""
        if simulating():
            return None
        precision = self.space.precision
        operand = f"{precision.input}[:, ::1]"
        return self.function.compile(f"void({operand}, {operand}, {precision.output}[:, ::1], "
                                     f"{precision.accumulate}, {precision.accumulate})")

    def check_operands(self, A, B, C) -> None:
        """ValueError unless A is (m, k), B is (k, n) and C is (m, n) in this kernel's dtypes.

        The kernel takes M and N from C and K from A; anything else would read out of bounds.
        """
        precision = self.space.precision
        for name, array, dtype in (("A", A, precision.input), ("B", B, precision.input), ("C", C, precision.output)):
            if len(array.shape) != 2:
                raise ValueError(f"{name} must be 2-D, not {len(array.shape)}-D")
            if np.dtype(array.dtype) != np.dtype(dtype):
                raise ValueError(f"{name} must be {dtype} for this {precision.name} kernel, not {array.dtype}")
        (m, k), (k_b, n), (m_c, n_c) = A.shape, B.shape, C.shape
        if k != k_b or (m, n) != (m_c, n_c):
            raise ValueError(f"shapes do not chain: A {A.shape} @ B {B.shape} -> C {C.shape}")


def load(space: Space, config: Config, directory: Path | None = None) -> Kernel:
    """Render, write and import the kernel for `config` in `space`."""
    path = write_source(render(space, config, simulated=simulating()), directory)
    module = import_source(path, space.backend.module)
    return Kernel(space, config, path, module.matmul)
