"""The search space: domains, validity rules with their reasons, and the seed's place in it."""
from pathlib import Path

import pytest

from tuner.backends import CUDA, ROC, get_backend
from tuner.config import Config, parse_assignments
from tuner.space import DOMAINS, FLAGSHIPS, SEED, InvalidConfig, Space


@pytest.fixture(scope="module")
def cuda32():
    return Space.of(CUDA, "float32")


def test_sizes_must_be_powers_of_two_for_the_tile_copies():
    import tuner.space as space_module

    space = Space.of(CUDA, "float32")
    widened = dict(space_module.DOMAINS, block_n=(16, 32, 48, 64, 128))
    config = Config(block_m=64, block_n=48, block_k=16, thread_m=4, thread_n=4)
    original = space_module.DOMAINS
    space_module.DOMAINS = widened
    try:
        assert space.violations(config) == ["block and thread tile sizes must be powers of two"]
    finally:
        space_module.DOMAINS = original


def test_seed_kernel_is_a_point_of_both_spaces():
    for backend in (CUDA, ROC):
        assert Space.of(backend, "float32").violations(SEED) == []
    assert (SEED.block_m, SEED.block_n, SEED.block_k, SEED.threads) == (16, 16, 16, 256)


def test_default_config_is_valid_everywhere():
    for backend in (CUDA, ROC):
        for dtype in backend.dtypes:
            assert Space.of(backend, dtype).violations(Config()) == []


@pytest.mark.parametrize("changes, reason", [
    (dict(block_m=48), "block_m=48 is not one of"),
    (dict(thread_m=8, thread_n=8, block_m=16, block_n=16), "not a multiple of the 32-wide warp"),
    (dict(thread_m=1, thread_n=1, block_m=64, block_n=64), "exceeds the limit of 1024"),
    (dict(block_k=8, unroll_k=16), "does not divide block_k"),
    (dict(thread_m=8, thread_n=2, block_m=128, block_n=32), "elongated beyond 2:1"),
    (dict(thread_m=2, thread_n=8, block_m=32, block_n=128), "elongated beyond 2:1"),
    (dict(block_m=16, block_n=128, block_k=16, thread_m=4, thread_n=8), "copy 32 elements of a tile"),
    (dict(thread_m=8, thread_n=8, block_m=128, block_n=128, unroll_k=2), "multiply-adds per k-loop trip"),
    (dict(block_m=16, block_n=16, thread_m=1, thread_n=1, block_k=8, unroll_k=1), "do not split evenly"),
    (dict(thread_m=8, thread_n=8, block_m=128, block_n=128, unroll_k=1, max_registers=64), "below the about"),
    (dict(block_m=16, block_n=16, block_k=32, thread_m=2, thread_n=4, unroll_k=1, pad=0, max_registers=64),
     "max_registers=64 is below the about 70 registers"),
    (dict(block_m=32, block_n=32, block_k=32, thread_m=1, thread_n=1, unroll_k=1, pad=0, prefetch=False,
          max_registers=128), "max_registers=128 x 1024 threads exceeds the 65536 registers of a block"),
    (dict(block_m=64, block_n=128, block_k=32, thread_m=4, thread_n=8, unroll_k=1, prefetch=False,
          double_buffer=True), "49920 bytes of shared memory exceeds the limit of 49152"),
    (dict(vector_fragments=True, pad=0), "needs transpose_a=true"),
    (dict(vector_fragments=True, transpose_a=True, pad=1), "misaligns the vector loads"),
    (dict(vector_fragments=True, transpose_a=True, pad=0, block_n=32, thread_n=2), "multiples of 4"),
    (dict(pad=4), "pad=4 is for vector fragments"),
    (dict(thread_m=8, thread_n=8, block_m=128, block_n=128, unroll_k=16, transpose_a=True, pad=0),
     "multiply-adds per k-loop trip"),
    (dict(thread_m=8, thread_n=8, block_m=128, block_n=128, block_k=32, unroll_k=32, transpose_a=True, pad=4,
          vector_fragments=True), "unrolls the k-tile into 2048 multiply-adds"),
    (dict(block_m=128, thread_m=8, min_blocks=1, max_registers=128), "min_blocks needs launch bounds"),
    (dict(min_blocks=1), "min_blocks is for register tiles of 32 or more accumulators, not 4x4"),
    (dict(double_buffer=True), "double_buffer is for register tiles of 32 or more"),
    (dict(thread_m=8, thread_n=8, block_m=128, block_n=128, block_k=32, unroll_k=1, min_blocks=2),
     "registers of an SM"),
])
def test_invalid_configs_are_rejected_with_the_reason(cuda32, changes, reason):
    config = Config(**{**Config().as_dict(), **changes})
    with pytest.raises(InvalidConfig, match=reason):
        cuda32.check(config)


def test_a_block_may_not_take_more_registers_than_the_limit():
    config = Config(block_m=128, block_n=128, block_k=8, thread_m=4, thread_n=4, unroll_k=1, pad=0, prefetch=False)
    assert Space.of(CUDA, "float32").violations(config) == []
    with pytest.raises(InvalidConfig, match="1024 threads x about 72 registers exceed the 65536 registers of a block"):
        Space.of(CUDA, "float64").check(config)


def test_launch_bounds_and_double_buffering_start_at_32_accumulators(cuda32):
    for changes in (dict(min_blocks=1), dict(double_buffer=True)):
        assert cuda32.violations(Config(block_m=16, block_n=64, block_k=8, thread_m=4, thread_n=8, unroll_k=1,
                                        pad=0, prefetch=False, **changes)) == []


def test_shared_memory_limit_differs_by_backend():
    # 128x128x32 float64 tiles take 64 KiB: over numba-cuda's 48 KiB, within ROC's 64 KiB of LDS.
    config = Config(block_m=128, block_n=128, block_k=32, thread_m=8, thread_n=8, unroll_k=1, pad=0)
    assert Space.of(CUDA, "float64").shared_memory(config) == 65536
    assert any("shared memory" in r for r in Space.of(CUDA, "float64").violations(config))
    assert not any("shared memory" in r for r in Space.of(ROC, "float64").violations(config))


def test_wavefront_of_64_on_roc():
    config = Config(block_m=16, block_n=32, block_k=8, thread_m=2, thread_n=4, unroll_k=1)
    assert config.threads == 64 and Space.of(CUDA, "float32").violations(config) == []
    half = Config(block_m=16, block_n=16, block_k=16, thread_m=2, thread_n=4, unroll_k=1)
    assert half.threads == 32
    assert Space.of(CUDA, "float32").violations(half) == []
    assert "64-wide warp of roc" in Space.of(ROC, "float32").violations(half)[0]


def test_vector_fragments_fully_unrolled_are_in_the_cuda_space(cuda32):
    """The unroll cap is lifted for them: the full unroll is where they reach an 85% FMA share."""
    config = Config(block_m=128, block_n=128, thread_m=8, thread_n=8, unroll_k=16, transpose_a=True, pad=4,
                    vector_fragments=True, min_blocks=1)
    assert cuda32.violations(config) == []


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_docs_name_the_flagships_of_the_code(dtype):
    """docs/kernels.md names each flagship on a line of its own, as the command line writes it."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "kernels.md").read_text()
    assert f"\nflagship {dtype}: {FLAGSHIPS[dtype].describe()}\n" in text
    assert Space.of(CUDA, dtype).violations(FLAGSHIPS[dtype]) == []


def test_roc_has_no_vector_fragments_and_no_launch_bounds():
    space = Space.of(ROC, "float32")
    assert space.domains()["vector_fragments"] == (False,) and space.domains()["min_blocks"] == (0,)
    with pytest.raises(InvalidConfig, match="shared arrays take no alignment"):
        space.check(Config(vector_fragments=True, transpose_a=True, pad=4))
    with pytest.raises(InvalidConfig, match="no launch bounds"):
        space.check(Config(min_blocks=1))


def test_roc_has_no_float16_and_no_register_cap():
    with pytest.raises(InvalidConfig, match="float16"):
        Space.of(ROC, "float16")
    assert Space.of(ROC, "float32").domains()["max_registers"] == (0,)
    with pytest.raises(InvalidConfig, match="no register cap"):
        Space.of(ROC, "float32").check(Config(max_registers=128))


def test_iteration_yields_only_valid_distinct_configs():
    space = Space.of(ROC, "float64")
    configs = list(space)
    assert len(configs) == len(set(configs)) > 1000
    assert all(space.violations(c) == [] for c in configs[::97])
    assert {c.block_m for c in configs} == set(DOMAINS["block_m"])


def test_config_accepts_only_integers_and_booleans():
    with pytest.raises(TypeError):
        Config(block_m="64")
    with pytest.raises(TypeError):
        Config(block_m=True)
    with pytest.raises(TypeError):
        Config(prefetch=1)


def test_parse_assignments():
    config = parse_assignments(["block_m=32", "prefetch=false", "transpose_a=True"])
    assert (config.block_m, config.prefetch, config.transpose_a) == (32, False, True)
    with pytest.raises(ValueError, match="valid names: block_m"):
        parse_assignments(["tile=3"])
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_assignments(["block_m"])
    with pytest.raises(ValueError, match="true or false"):
        parse_assignments(["prefetch=maybe"])


def test_unknown_backend():
    with pytest.raises(ValueError, match="choose one of: cuda, roc"):
        get_backend("opencl")


def test_heuristics_prune_apart_from_the_hard_rules_and_a_pruned_config_still_renders(cuda32):
    from tuner.source import render

    elongated = Config(thread_m=8, thread_n=2)
    assert cuda32.broken_rules(elongated) == [] and "elongated beyond 2:1" in cuda32.pruned_by(elongated)[0]
    assert cuda32.violations(elongated) == cuda32.pruned_by(elongated)
    assert "def matmul(" in render(cuda32, elongated)
    too_big = Config(block_m=128, block_n=128, thread_m=1, thread_n=1)
    assert "exceeds the limit of 1024" in cuda32.broken_rules(too_big)[0]
    with pytest.raises(InvalidConfig, match="exceeds the limit of 1024"):
        render(cuda32, too_big)
