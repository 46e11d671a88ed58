"""Warp-level tensor-core multiply-adds (mma.sync) for generated CUDA kernels: the one place for them.

Two shapes, each D = A @ B + D on one warp, with float32 accumulators:

- "tf32": m16n8k8, float32 A and B rounded to TF32 (cvt.rna: 10 mantissa bits, ties away from zero);
- "float16": m16n8k16, float16 A and B.

Every thread of the warp calls `mma(d, a, b)` (from `functions()`) with its own fragments, local
arrays laid out as the PTX ISA's "Matrix Fragments for mma.m16n8k8 / mma.m16n8k16" define
(`a_layout`, `b_layout`, `c_layout`): a of A's elements, b of B's, d of C's, updated in place.

On a GPU the calls go to the CUDA C wrappers in templates/mma.cu (inline PTX), declared to Numba
with the C ABI. Kernels calling them should be compiled with link-time optimisation
(`cuda.jit(lto=True)`, or `cubin` here), which inlines the calls so the fragments stay in registers;
without it (not tried: making PTX of the wrappers needs a driver) each call goes through local
memory. On Numba's simulator, which cannot run CUDA C, `functions()` gives Python emulations with
the same per-thread semantics.
"""
import threading
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np
from numba import cuda

from .simulator import simulating

SOURCE = "mma.cu"  # in tuner.templates
_lane_calls = threading.local()  # the emulation's calls per simulated thread


@dataclass(frozen=True)
class Shape:
    """One mma.sync shape: its sizes, input dtype, the C wrapper's name and fragment lengths."""

    name: str
    m: int
    n: int
    k: int
    dtype: str  # of A and B as the kernel holds them
    symbol: str  # the function in templates/mma.cu

    @property
    def packed(self) -> int:
        """Elements of A or B in one 32-bit register: consecutive k of a fragment (2 for float16)."""
        return 4 // np.dtype(self.dtype).itemsize

    @property
    def a_count(self) -> int:
        return self.m * self.k // 32

    @property
    def b_count(self) -> int:
        return self.k * self.n // 32

    @property
    def c_count(self) -> int:
        return self.m * self.n // 32


SHAPES = {
    "tf32": Shape("tf32", 16, 8, 8, "float32", "tuner_mma_tf32_m16n8k8"),
    "float16": Shape("float16", 16, 8, 16, "float16", "tuner_mma_f16_m16n8k16"),
}


def a_layout(shape: Shape, lane: int) -> list[tuple[int, int]]:
    """(row, col) in A of each element of `lane`'s a fragment."""
    group, thread = lane >> 2, lane % 4
    if shape.name == "tf32":  # a0..a3: rows g, g+8, g, g+8; cols t, t, t+4, t+4
        return [(group + 8 * (i & 1), thread + 4 * (i >> 1)) for i in range(4)]
    # a0..a7: rows g, g, g+8, g+8, g, g, g+8, g+8; cols 2t + (i & 1), plus 8 for a4..a7
    return [(group + 8 * ((i >> 1) & 1), 2 * thread + (i & 1) + 8 * (i >> 2)) for i in range(8)]


def b_layout(shape: Shape, lane: int) -> list[tuple[int, int]]:
    """(row, col) in B of each element of `lane`'s b fragment."""
    group, thread = lane >> 2, lane % 4
    if shape.name == "tf32":  # b0, b1: rows t, t+4; col g
        return [(thread + 4 * i, group) for i in range(2)]
    # b0..b3: rows 2t, 2t+1, 2t+8, 2t+9; col g
    return [(2 * thread + (i & 1) + 8 * (i >> 1), group) for i in range(4)]


def c_layout(shape: Shape, lane: int) -> list[tuple[int, int]]:
    """(row, col) in C and D of each element of `lane`'s d fragment (both shapes)."""
    group, thread = lane >> 2, lane % 4
    return [(group + 8 * (i >> 1), 2 * thread + (i & 1)) for i in range(4)]


def round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded as cvt.rna.tf32.f32 does: 10 mantissa bits, ties away from zero."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    rounded = np.where(finite, (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000), bits)
    return rounded.astype(np.uint32).view(np.float32)


def source() -> str:
    """The CUDA C of the wrappers, as shipped with the templates."""
    return resources.files("tuner.templates").joinpath(SOURCE).read_text()


def _emulate(shape: Shape, d, a, b):
    """One lane's part of the warp's mma on the simulator, where a block's threads are Python
    threads: each lane writes its A and B fragments into the warp's shared scratch, the block
    synchronises, and each lane computes its D elements from the whole (rounded) A and B in float64
    plus its own C, rounded to float32. Successive calls alternate between two scratch arrays, so
    one barrier per call suffices: a lane can write a scratch again only after the next call's
    barrier, which every lane reaches only once done reading it. So every warp of the block must
    make the same number of calls (on a GPU, all lanes of a warp must)."""
    block = cuda.blockDim
    linear = cuda.threadIdx.x + block.x * (cuda.threadIdx.y + block.y * cuda.threadIdx.z)
    warp, lane = linear // 32, linear % 32
    warps = -(-block.x * block.y * block.z // 32)
    calls = getattr(_lane_calls, "count", 0)  # this simulated thread's calls so far (a thread per block)
    _lane_calls.count = calls + 1
    if calls % 2:  # the simulator tells shared arrays apart by the line that declares them
        scratch = cuda.shared.array((warps, 2, 16, 16), np.float64)[warp]
    else:
        scratch = cuda.shared.array((warps, 2, 16, 16), np.float64)[warp]
    a_at, b_at, c_at = (np.asarray(layout(shape, lane)) for layout in (a_layout, b_layout, c_layout))
    inputs = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    if shape.name == "tf32":
        inputs = tuple(round_tf32(x) for x in inputs)
    scratch[0][a_at[:, 0], a_at[:, 1]] = inputs[0]
    scratch[1][b_at[:, 0], b_at[:, 1]] = inputs[1]
    cuda.syncthreads()
    whole_a, whole_b = scratch[0][:shape.m, :shape.k], scratch[1][:shape.k, :shape.n]
    product = whole_a[c_at[:, 0]] * whole_b[:, c_at[:, 1]].T
    result = (product.sum(axis=1) + np.asarray(d, dtype=np.float64)[:shape.c_count]).astype(np.float32)
    for i in range(shape.c_count):
        d[i] = result[i]


def _declared(shape: Shape):
    """`mma(d, a, b)` on a GPU: a Numba intrinsic calling the C wrapper with the arrays' addresses
    (an intrinsic, because device functions compile only for the current GPU, and there may be none)."""
    from numba import types
    from numba.cuda import CUSource, cgutils
    from numba.cuda.extending import intrinsic

    dtypes = types.float32, getattr(types, shape.dtype), getattr(types, shape.dtype)
    wrapper_signature = types.int32(*map(types.CPointer, dtypes))
    wrapper = cuda.declare_device(shape.symbol, wrapper_signature, link=[CUSource(source())], abi="c")

    @intrinsic
    def mma(typingctx, d, a, b):
        arrays = d, a, b
        if not all(isinstance(t, types.Array) and t.ndim == 1 and t.layout == "C" and t.dtype == dtype
                   for t, dtype in zip(arrays, dtypes)):
            return None  # a typing error: d, a, b must be contiguous 1-D arrays of float32, dtype, dtype

        def codegen(context, builder, signature, args):
            data = [cgutils.create_struct_proxy(t)(context, builder, value=v).data for t, v in zip(arrays, args)]
            context.get_function(wrapper, wrapper_signature)(builder, data)
            return context.get_dummy_value()
        return types.void(*arrays), codegen
    return mma


def _emulated(shape: Shape):
    """`mma(d, a, b)` on the simulator."""
    @cuda.jit(device=True)
    def mma(d, a, b):
        _emulate(shape, d, a, b)
    return mma


@cache
def _functions(simulated: bool) -> dict:
    if simulated:
        return {name: _emulated(shape) for name, shape in SHAPES.items()}
    return {name: _declared(shape) for name, shape in SHAPES.items()}


def functions() -> dict:
    """The device function `mma(d, a, b)` of each shape, by name ("tf32", "float16"): the CUDA C
    wrapper on a GPU, its emulation on the simulator."""
    return _functions(simulating())


def cubin(kernel, signature, arch: tuple[int, int] = (9, 0), launch_bounds=None) -> tuple[bytes, str]:
    """A kernel calling `functions()` (its Python function), compiled to LTO-IR, linked with the
    wrappers by nvJitLink for `arch` and so inlined: the cubin and the linker's log (registers,
    spills). NVRTC and nvJitLink need no GPU; `cuda.jit(lto=True)` does the same on one."""
    from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions

    target = f"sm_{arch[0]}{arch[1]}"
    ltoir, _ = cuda.compile(kernel, signature, cc=arch, device=False, abi="numba", output="ltoir",
                            launch_bounds=launch_bounds)
    wrappers = Program(source(), "c++", ProgramOptions(arch=target, link_time_optimization=True,
                                                       relocatable_device_code=True)).compile("ltoir")
    linker = Linker(ObjectCode.from_ltoir(ltoir), wrappers,
                    options=LinkerOptions(arch=target, link_time_optimization=True, verbose=True))
    return linker.link("cubin").code, linker.get_info_log()
