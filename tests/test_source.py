"""Rendering: one template for both backends, plain readable source, content-hashed files."""
import ast
import re

import pytest

from tuner.backends import CUDA, ROC
from tuner.config import Config
from tuner.kernel import load, write_source
from tuner.source import render
from tuner.space import SEED, InvalidConfig, Space


def test_one_template_serves_both_backends():
    cuda = render(Space.of(CUDA, "float32"), Config())
    roc = render(Space.of(ROC, "float32"), Config())
    assert "from numba import cuda\n" in cuda and "cuda." in cuda and "hip" not in cuda
    assert "from numba import hip\n" in roc and "hip.syncthreads()" in roc and "cuda" not in roc
    # Everything but the module name and the options numba-hip lacks is identical.
    def neutral(text):
        return re.sub(r"\b(cuda|hip|roc)\b", "gpu", text).replace(", launch_bounds=256", "").replace(
            " max_registers=0 vector_fragments=False min_blocks=0", "")  # in the docstring

    assert neutral(cuda) == neutral(roc)


@pytest.mark.parametrize("backend, dtype", [(CUDA, "float32"), (CUDA, "float64"), (CUDA, "float16"), (ROC, "float64")])
def test_rendered_source_is_python_with_scalar_accumulators(backend, dtype):
    config = Config(block_m=64, block_n=32, thread_m=4, thread_n=2, unroll_k=8)
    source = render(Space.of(backend, dtype), config)
    ast.parse(source)
    assert "{{" not in source and "{%" not in source
    assert "local.array" not in source  # accumulators are scalars, never a run-time indexed array
    assert len(re.findall(r"^    c\d+_\d+ = ", source, re.M)) == 8
    assert source.count("syncthreads()") == 2


@pytest.mark.parametrize("config", [
    SEED, Config(prefetch=True), Config(prefetch=False, transpose_a=True),
    Config(block_k=16, thread_m=2, thread_n=2, unroll_k=16),
    Config(block_m=128, block_n=128, thread_m=8, thread_n=8, unroll_k=1, double_buffer=True),
    Config(block_m=128, block_n=128, thread_m=8, thread_n=8, unroll_k=1, double_buffer=True, prefetch=False),
], ids=["seed", "prefetch", "transposed", "full-unroll", "double-buffered", "double-buffered-no-prefetch"])
def test_every_thread_reaches_every_barrier(config):
    """No early return, and barriers sit in the k loop's body (two), or one before it and one in
    it when double-buffered, outside any condition."""
    source = render(Space.of(CUDA, "float32"), config)
    body = source.split('"""', 2)[2]
    assert "return" not in body
    barriers = re.findall(r"^( *)cuda\.syncthreads\(\)$", body, re.M)
    assert barriers == [" " * 4 if config.double_buffer else " " * 8, " " * 8]
    assert re.search(r"^    for kt in range\(\(K \+ \d+\) // \d+\):$", body, re.M)


def test_double_buffering_reads_one_buffer_and_writes_the_other():
    config = Config(block_m=128, block_n=128, thread_m=8, thread_n=8, unroll_k=1, double_buffer=True)
    source = render(Space.of(CUDA, "float32"), config)
    assert "a_tile = cuda.shared.array(shape=(2, 128, 17)" in source
    assert "s = uint64(kt & 1)\n        t = s ^ uint64(1)" in source
    reads, writes = re.findall(r"= a_tile\[(\w), ", source), re.findall(r"a_tile\[(\w), [^\]]*\] = ", source)
    assert set(reads) == {"s"} and set(writes) == {"t"}


def test_unroll_and_prefetch_shape_the_k_loop():
    space = Space.of(CUDA, "float32")
    full = render(space, Config(block_k=16, thread_m=2, thread_n=2, unroll_k=16))
    assert "for kk in range" not in full and "b_tile[15, tc]" in full
    assert "for kk in range(uint64(16)):" in render(space, Config(unroll_k=1))
    assert "for kk in range(uint64(0), uint64(16), uint64(4)):" in render(space, Config(unroll_k=4))
    assert "pa0 = " in render(space, Config(prefetch=True))
    assert "pa0 = " not in render(space, Config(prefetch=False))


def test_float16_reads_half_and_accumulates_single():
    source = render(Space.of(CUDA, "float16"), Config())
    assert "dtype=float16" in source and "c0_0 = float32(0)" in source and "a0 = float32(a_tile[" in source


def test_jit_options():
    space = Space.of(CUDA, "float32")
    assert "@cuda.jit(cache=True, launch_bounds=256)" in render(space, Config())
    # ptxas drops a register cap when launch bounds are present, so a capped kernel has none.
    assert "@cuda.jit(cache=True, max_registers=128)" in render(space, Config(max_registers=128))
    assert "@hip.jit(cache=True)\n" in render(Space.of(ROC, "float32"), Config())


VECTOR_TILE = Config(block_m=128, block_n=128, thread_m=8, thread_n=8, unroll_k=16, transpose_a=True, pad=4,
                     vector_fragments=True)


def test_vector_fragments_are_groups_of_four_in_aligned_tiles():
    source = render(Space.of(CUDA, "float32"), VECTOR_TILE)
    assert "tr = uint64(tid // 16) * uint64(4)" in source
    # Thread rows tr..tr+3, then 64 rows on: one 16-byte group each, read from the k-major A tile.
    assert "a0 = a_tile[15, tr]" in source and "a3 = a_tile[15, tr + uint64(3)]" in source
    assert "a4 = a_tile[15, tr + uint64(64)]" in source and "b7 = b_tile[15, tc + uint64(67)]" in source
    assert source.count(", alignment=16)") == 2
    assert "alignment" not in render(Space.of(CUDA, "float32"), Config())


def test_simulated_source_drops_only_the_alignment_hint():
    """Numba's simulator refuses alignment= ("not supported in cudasim"); nothing else may change."""
    space = Space.of(CUDA, "float32")
    compiled, simulated = render(space, VECTOR_TILE), render(space, VECTOR_TILE, simulated=True)
    assert "alignment" not in simulated and compiled.replace(", alignment=16", "") == simulated


def test_min_blocks_goes_into_the_launch_bounds():
    space = Space.of(CUDA, "float32")
    config = Config(block_m=128, block_n=64, thread_m=8, thread_n=4, unroll_k=2, min_blocks=2)
    assert "@cuda.jit(cache=True, launch_bounds=(256, 2))" in render(space, config)


def test_invalid_config_never_reaches_the_template():
    with pytest.raises(InvalidConfig):
        render(Space.of(CUDA, "float32"), Config(block_m=24))


def test_a_kernel_file_is_imported_once_per_process():
    space = Space.of(CUDA, "float32")
    assert load(space, Config()).function is load(space, Config()).function


def test_source_file_is_named_by_content_hash(tmp_path):
    first = write_source("x = 1\n", tmp_path)
    assert write_source("x = 1\n", tmp_path) == first
    second = write_source("x = 2\n", tmp_path)
    assert second != first and second.read_text() == "x = 2\n"
    assert sorted(p.name for p in tmp_path.glob("*.py")) == sorted([first.name, second.name])
