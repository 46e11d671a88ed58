"""Generated kernels give BLAS GEMM results on Numba's CUDA simulator, for both backends.

ROC source runs with the name `hip` bound to the simulated cuda module. The shapes are the ones
that break naive kernels: 1x1x1, primes, K below the k-tile, M or N below one block tile,
tall-skinny, alpha/beta, Fortran-ordered inputs (correct) and strided ones (a clear error).
"""
import random

import numpy as np
import pytest

from tuner.backends import CUDA, ROC
from tuner.config import Config
from tuner.kernel import load
from tuner.space import SEED, Space

# Relative error bounds against a float64 reference (float16: inputs rounded, float32 accumulation).
TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "float16": 1e-5}

SHAPES = [(1, 1, 1), (7, 13, 11), (20, 18, 3), (5, 3, 40), (67, 2, 17), (2, 71, 5), (33, 31, 37)]
# Every shape for the seed and the default configuration; for the others, one block-crossing odd
# shape and one with K below the k-tile.
FEW_SHAPES = [(33, 31, 37), (20, 18, 3)]


def _sample(space: Space, count: int, seed: int) -> list[Config]:
    configs = [c for c in space if c.threads <= 128]
    return random.Random(seed).sample(configs, count)


def _cases():
    named = {
        "seed": SEED,
        "default": Config(),
        "transposed-full-unroll": Config(block_m=32, block_n=32, block_k=16, thread_m=2, thread_n=2,
                                         unroll_k=16, transpose_a=True),
        "8x8-register-tile": Config(block_m=64, block_n=64, block_k=8, thread_m=8, thread_n=8, unroll_k=1),
        "no-pad-no-prefetch": Config(pad=0, prefetch=False, unroll_k=1),
    }
    cases = [(CUDA, "float32", config, name) for name, config in named.items()]
    cases += [(ROC, "float32", named["seed"], "seed"), (ROC, "float64", named["default"], "default")]
    cases += [(CUDA, "float16", named["default"], "default"), (CUDA, "float64", named["8x8-register-tile"], "8x8")]
    for backend in (CUDA, ROC):
        for dtype in backend.dtypes:
            space = Space.of(backend, dtype)
            cases += [(backend, dtype, c, f"sample{i}") for i, c in enumerate(_sample(space, 1, seed=len(dtype)))]
    return [pytest.param(b, d, c, id=f"{b.name}-{d}-{n}") for b, d, c, n in cases]


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
    shapes = SHAPES if config in (SEED, Config()) else FEW_SHAPES
    for m, n, k in shapes:
        a, b = _inputs(rng, m, n, k, space.precision.input)
        c = np.full((m, n), np.nan, dtype=space.precision.output)  # poisoned: every element must be written
        kernel(a, b, c)
        reference = a.astype(np.float64) @ b.astype(np.float64)
        error = _relative_error(c, reference)
        assert error < TOLERANCE[dtype], f"{m}x{n}x{k}: relative error {error}"


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


def test_fortran_ordered_inputs_give_the_right_result():
    kernel = load(Space.of(CUDA, "float32"), Config(transpose_a=True))
    rng = np.random.default_rng(11)
    a = np.asfortranarray(rng.standard_normal((45, 24)).astype(np.float32))
    b = np.asfortranarray(rng.standard_normal((24, 33)).astype(np.float32))
    c = np.full((45, 33), np.nan, dtype=np.float32)
    kernel(a, b, c)
    assert _relative_error(c, a.astype(np.float64) @ b) < 1e-5


def test_strided_inputs_get_a_clear_error():
    kernel = load(Space.of(CUDA, "float32"), Config())
    rng = np.random.default_rng(11)
    a = rng.standard_normal((90, 72)).astype(np.float32)[::2, ::3]
    b = rng.standard_normal((24, 33)).astype(np.float32)
    with pytest.raises(ValueError, match="non-contiguous.*ascontiguousarray"):
        kernel(a, b, np.zeros((45, 33), dtype=np.float32))


def test_wrong_result_is_caught():
    """The check above can fail: a kernel given a shorter K leaves a visible error."""
    kernel = load(Space.of(CUDA, "float32"), Config())
    rng = np.random.default_rng(1)
    a, b = _inputs(rng, 20, 20, 20, np.float32)
    c = np.zeros((20, 20), dtype=np.float32)
    kernel(np.ascontiguousarray(a[:, :19]), b[:19], c)
    assert _relative_error(c, a.astype(np.float64) @ b) > 1e-3
