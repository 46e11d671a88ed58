"""Generated kernels give BLAS GEMM results on Numba's CUDA simulator, for both backends.

ROC source runs with the name `hip` bound to the simulated cuda module. The shapes are the ones
that break naive kernels: 1x1x1, primes, K below the k-tile, M or N below one block tile,
tall-skinny, alpha/beta, Fortran-ordered inputs (correct) and strided ones (a clear error).

The simulator runs threads as Python threads and does not detect shared-memory races; the
barrier placement is checked on the source instead (test_source.py).
"""
import random
import re
import threading
import zlib

import numpy as np
import pytest

from tuner.backends import CUDA, ROC
from tuner.config import Config
from tuner.kernel import load
from tuner.space import FLAGSHIPS, SEED, Space

# Relative error bounds against a float64 reference (float16: inputs rounded, float32 accumulation).
TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "float16": 1e-5}

SHAPES = [(1, 1, 1), (7, 13, 11), (20, 18, 3), (5, 3, 40), (67, 2, 17), (2, 71, 5), (33, 31, 37)]
# Every shape for the seed and the default configuration in float32 on cuda; for the others, one
# block-crossing odd shape and one with K below the k-tile. One template renders every backend and
# dtype, and they differ in names and element types alone (the module, zero_in, the tiles' dtype,
# the conversion to the accumulator), never in the index and guard code that the odd shapes test:
# the seed and the default in the other backend and dtypes take the few shapes (their 256 threads
# through all seven took a minute), the default also one whose first 64-row tile lies inside the
# product, with a partial last k-tile (the few shapes copy its A tiles through the guarded path alone).
FEW_SHAPES = [(33, 31, 37), (20, 18, 3)]


def _sample(space: Space, count: int) -> list[Config]:
    """A fixed random pick of valid small-block configurations (the simulator runs a thread per
    thread), drawn from the parameter domains: listing the valid space would take a minute."""
    draws = random.Random(zlib.crc32(f"{space.backend.name}-{space.precision.name}".encode()))
    picked = []
    while len(picked) < count:
        config = space.config_type(**{name: draws.choice(domain) for name, domain in space.domains().items()})
        if config.threads <= 128 and not space.violations(config) and config not in picked:
            picked.append(config)
    return picked


def _cases():
    named = {
        "seed": SEED,
        "default": Config(),
        "transposed-full-unroll": Config(block_m=32, block_n=32, block_k=16, thread_m=2, thread_n=2,
                                         unroll_k=16, transpose_a=True),
        "8x8-register-tile": Config(block_m=64, block_n=64, block_k=8, thread_m=8, thread_n=8, unroll_k=1),
        "no-pad-no-prefetch": Config(pad=0, prefetch=False, unroll_k=1),
        # Fewer threads (64) than block_n (128): B-tile copies step along columns as well as rows.
        "wide-block-few-threads": Config(block_m=16, block_n=128, block_k=8, thread_m=4, thread_n=8,
                                         unroll_k=2, transpose_a=True, prefetch=True),
        "block_k-32": Config(block_m=32, block_n=64, block_k=32, thread_m=2, thread_n=4, unroll_k=8, pad=0),
        # Vector fragments (the simulator runs them without the alignment hint): groups of 4 rows
        # and columns, fully unrolled or rolled, in aligned and unpadded tiles, with launch bounds.
        "vector-full-unroll": Config(block_m=32, block_n=32, block_k=8, thread_m=4, thread_n=4, unroll_k=8,
                                     transpose_a=True, pad=4, vector_fragments=True),
        "vector-8x4-rolled": Config(block_m=64, block_n=32, block_k=8, thread_m=8, thread_n=4, unroll_k=1,
                                    transpose_a=True, pad=0, vector_fragments=True, prefetch=False, min_blocks=1),
        # One barrier per k-tile: K of 37 and 3 run several k-tiles through both buffers, and one.
        "double-buffered": Config(block_m=64, block_n=32, block_k=8, thread_m=8, thread_n=4, unroll_k=2,
                                  double_buffer=True),
        "double-buffered-vector": Config(block_m=32, block_n=64, block_k=8, thread_m=4, thread_n=8, unroll_k=8,
                                         transpose_a=True, pad=4, vector_fragments=True, double_buffer=True,
                                         prefetch=False),
    }
    cases = [(CUDA, "float32", config, name) for name, config in named.items()]
    cases += [(CUDA, dtype, named["vector-full-unroll"], "vector-full-unroll") for dtype in ("float64", "float16")]

    cases += [(ROC, "float32", named["seed"], "seed"), (ROC, "float64", named["default"], "default"),
              (ROC, "float32", named["double-buffered"], "double-buffered"),
              (CUDA, "float64", named["double-buffered-vector"], "double-buffered-vector"),
              (ROC, "float32", named["wide-block-few-threads"], "wide-block-few-threads")]
    cases += [(CUDA, "float16", named["default"], "default"), (CUDA, "float64", named["8x8-register-tile"], "8x8")]
    for backend in (CUDA, ROC):
        for dtype in backend.dtypes:
            space = Space.of(backend, dtype)
            cases += [(backend, dtype, c, f"sample{i}") for i, c in enumerate(_sample(space, 2))]
    # The flagships (docs/kernels.md): 256 simulated threads through 1,024 multiply-adds per k-tile
    # take about 45 s each, so they run with -m sweep; the small vector tiles above run the same code.
    return [pytest.param(b, d, c, id=f"{b.name}-{d}-{n}") for b, d, c, n in cases] + [
        pytest.param(CUDA, dtype, config, id=f"cuda-{dtype}-flagship", marks=pytest.mark.sweep)
        for dtype, config in FLAGSHIPS.items()]


def _inputs(rng, m, n, k, dtype):
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    return a, b


def _relative_error(result, reference):
    scale = np.linalg.norm(reference) or 1.0
    return np.linalg.norm(result.astype(np.float64) - reference) / scale


@pytest.mark.parametrize("backend, dtype, config", _cases())
def test_matches_float64_reference(backend, dtype, config):
    space = Space.of(backend, dtype)
    kernel = load(space, config)
    rng = np.random.default_rng(7)
    if config in (SEED, Config()) and (backend, dtype) == (CUDA, "float32"):
        shapes = SHAPES
    else:
        shapes = FEW_SHAPES + ([(67, 2, 17)] if config == Config() else [])
    for index, (m, n, k) in enumerate(shapes):
        a, b = _inputs(rng, m, n, k, space.precision.input)
        reference = a.astype(np.float64) @ b.astype(np.float64)
        if index % 2:
            alpha, beta = -0.5, 2.0
            c = rng.standard_normal((m, n)).astype(space.precision.output)
            reference = alpha * reference + beta * c.astype(np.float64)
        else:
            alpha, beta = 1.0, 0.0
            c = np.full((m, n), np.nan, dtype=space.precision.output)  # poisoned: every element must be written
        kernel(a, b, c, alpha, beta)
        error = _relative_error(c, reference)
        assert error < TOLERANCE[dtype], f"{m}x{n}x{k} alpha={alpha} beta={beta}: relative error {error}"


@pytest.mark.parametrize("backend", [CUDA, ROC], ids=["cuda", "roc"])
def test_alpha_beta(backend):
    space = Space.of(backend, "float64")
    kernel = load(space, Config(block_k=8, unroll_k=2))
    rng = np.random.default_rng(3)
    a, b = _inputs(rng, 37, 21, 19, np.float64)
    c = rng.standard_normal((37, 21))
    expected = 0.5 * (a @ b) - 2.0 * c
    kernel(a, b, c, alpha=0.5, beta=-2.0)
    assert _relative_error(c, expected) < 1e-12


def test_beta_zero_ignores_garbage_in_c():
    kernel = load(Space.of(CUDA, "float32"), Config())
    rng = np.random.default_rng(5)
    a, b = _inputs(rng, 19, 23, 29, np.float32)
    c = np.full((19, 23), np.inf, dtype=np.float32)
    kernel(a, b, c, alpha=2.0, beta=0.0)
    assert _relative_error(c, 2.0 * (a.astype(np.float64) @ b)) < 1e-5


@pytest.mark.parametrize("order", ["fortran", "strided"])
def test_inputs_of_another_layout_get_a_clear_error(order):
    """Numba would compile the kernel again for their layout, a kernel never verified."""
    kernel = load(Space.of(CUDA, "float32"), Config(transpose_a=True))
    rng = np.random.default_rng(11)
    a = rng.standard_normal((90, 72)).astype(np.float32)
    a = np.asfortranarray(a[:45, :24]) if order == "fortran" else a[::2, ::3]
    b = rng.standard_normal((24, 33)).astype(np.float32)
    with pytest.raises(ValueError, match=r"^A is not C-contiguous .*; pass a C-contiguous copy"):
        kernel(a, b, np.zeros((45, 33), dtype=np.float32))


def test_the_error_check_can_fail():
    """One wrong element or one NaN in a correct result breaks the bound."""
    rng = np.random.default_rng(1)
    reference = rng.standard_normal((20, 20))
    wrong = reference.astype(np.float32)
    wrong[3, 4] += 0.01 * np.linalg.norm(reference)
    assert not _relative_error(wrong, reference) < TOLERANCE["float32"]
    wrong[3, 4] = np.nan
    assert not _relative_error(wrong, reference) < TOLERANCE["float32"]


@pytest.mark.parametrize("a_shape, b_shape, c_shape, dtype, error, message", [
    ((20, 19), (20, 20), (20, 20), np.float32, ValueError, "shapes do not chain"),
    ((20, 20), (20, 20), (20, 21), np.float32, ValueError, "shapes do not chain"),
    ((20, 20, 1), (20, 20), (20, 20), np.float32, ValueError, "A must be 2-D"),
    ((20, 20), (20, 20), (20, 20), np.float64, TypeError, "A must be float32 for this float32 kernel, not float64"),
])
def test_operands_that_would_read_out_of_bounds_are_refused(a_shape, b_shape, c_shape, dtype, error, message):
    """A wrong dtype is a TypeError, as tuner.matmul's for an out of the wrong dtype."""
    kernel = load(Space.of(CUDA, "float32"), Config())
    a, b = np.ones(a_shape, dtype), np.ones(b_shape, np.float32)
    with pytest.raises(error, match=message):
        kernel(a, b, np.zeros(c_shape, np.float32))


@pytest.mark.parametrize("config, m", [
    (Config(block_m=32, block_n=32, block_k=8, thread_m=4, thread_n=4, unroll_k=4, prefetch=True), 38),
    (Config(block_m=32, block_n=32, block_k=8, thread_m=4, thread_n=4, unroll_k=2, prefetch=False, transpose_a=True),
     38),
    (Config(block_m=64, block_n=32, block_k=8, thread_m=8, thread_n=4, unroll_k=2, double_buffer=True), 70),
], ids=["prefetch", "no-prefetch-transposed", "double-buffered"])
def test_interior_tiles_take_the_unguarded_copy_and_edge_tiles_the_guarded_one(config, m):
    """m x 35 x 21 with m taking 2 row tiles (38 on 32-row tiles, 70 on 64-row ones): 2 x 2 blocks,
    one inside and three across the edges, and a partial last k-tile.

    Each line of the kernel file that the simulated threads run is recorded, so the test knows
    that both copies of each tile ran, besides the result being right."""
    kernel = load(Space.of(CUDA, "float32"), config)
    lines = kernel.path.read_text().splitlines()
    def copies(name, guarded):
        """Numbers of the lines that copy an element of A (or B) into a register or the tile."""
        copy = re.compile(rf"^ +(p{name}\d+|{name}_tile\[.*\]) = {name.upper()}\[")
        return {n for n, line in enumerate(lines, 1) if copy.search(line) and (" if " in line) == guarded}

    paths = {(name, guarded): copies(name, guarded) for name in ("a", "b") for guarded in (False, True)}
    assert all(paths.values())
    ran = set()

    def trace(frame, event, arg):
        if frame.f_code.co_filename != str(kernel.path):
            return None
        if event == "line":
            ran.add(frame.f_lineno)
        return trace

    rng = np.random.default_rng(13)
    a, b = _inputs(rng, m, 35, 21, np.float32)
    c = np.full((m, 35), np.nan, dtype=np.float32)
    threading.settrace(trace)
    try:
        kernel(a, b, c)
    finally:
        threading.settrace(None)
    assert _relative_error(c, a.astype(np.float64) @ b) < 1e-5
    for (name, guarded), numbers in paths.items():
        assert numbers & ran, f"the {'guarded' if guarded else 'unguarded'} copy of the {name.upper()} tile never ran"


@pytest.mark.parametrize("batch, m, n, k, refused", [
    (1, 128, 128, 128, False), (1, 256, 256, 1, False), (16, 4, 4, 4, False),  # 8 s each
    (1, 129, 128, 128, True), (1, 16, 16, 8192, True), (1, 1400, 1400, 1, True), (64, 4, 4, 4, True),
], ids=["128 cubed", "thin", "16 small", "past 128 cubed", "deep", "wide and thin", "64 small"])
def test_the_simulator_refuses_work_beyond_a_128_cubed_products_however_it_is_shaped(batch, m, n, k, refused):
    """Thin products and stacks of small ones cost the simulator per block and k-step, not per
    multiply-add: each refused one here has fewer than 128**3 multiply-adds, or about as many."""
    from tuner import simulator
    from tuner.families.batched import BatchedProblem

    message = simulator.too_slow(BatchedProblem(m, n, k, batch=batch))
    assert bool(message) == refused and (not refused or "too large for the simulator" in message)


def test_a_module_imported_while_a_kernel_source_runs_stays_imported():
    """tuner.matmul's callers may use threads: what another thread imports while a kernel's source
    runs (simulator.bound) stays in sys.modules, and numba.hip is put back as it was."""
    import sys
    import types

    from numba import cuda

    from tuner import simulator

    hip = sys.modules.get("numba.hip")
    with simulator.bound("hip"):
        assert sys.modules["numba.hip"] is cuda
        sys.modules["imported_meanwhile"] = types.ModuleType("imported_meanwhile")
    try:
        assert "imported_meanwhile" in sys.modules and sys.modules.get("numba.hip") is hip
    finally:
        sys.modules.pop("imported_meanwhile", None)
