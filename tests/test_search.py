"""The Optuna search on the simulator: measurements, failures, duplicates, resuming, the cache."""
import dataclasses
import json
import os
import re
import signal
import zlib

import numpy as np
import optuna
import pytest
from records import make_record

import tuner.kernel
import tuner.measure
from tuner import cache
from tuner.backends import CUDA, ROC
from tuner.cli import main
from tuner.config import Config
from tuner.families.batched import BatchedProblem
from tuner.problem import Problem
from tuner.runtime import open_runtime
from tuner.sampler import Options, make_sampler
from tuner.search import Search
from tuner.space import FLAGSHIPS, SEED, Space
from tuner.stopping import stop_on_sigterm
from tuner.trials import config_key

FIRST = Config()  # what a search with nothing cached measures first

PROBLEM = Problem(16, 16, 16, "float32")


def _search(tmp_path, backend=CUDA, **options) -> Search:
    return Search(open_runtime(backend, simulate=True), PROBLEM, root=tmp_path, **options)


def _sampler_options(monkeypatch, **options) -> None:
    """Make the searches' `local` sampler take `options` (tuner.sampler.Options fields)."""
    monkeypatch.setattr("tuner.search.make_sampler",
                        lambda *args, **keywords: make_sampler(*args, Options(**options), **keywords))


def _measured(search: Search) -> list:
    return [trial for trial in search.study.trials if trial.user_attrs.get("kind") == "measured"]


def _modelled(monkeypatch) -> None:
    """Make the searches' measurements a fixed rate per configuration, made up, for tests of what the
    search asks and counts rather than what it measures: a sampled configuration may take 1,024
    simulated threads, several seconds a launch."""
    from tuner.measure import Measured
    from tuner.record import Measurement

    def measure(runtime, space, problem, config, operands, protocol, directory):
        gflops = 1.0 + zlib.crc32(config_key(config.as_dict()).encode()) % 1000 / 1000
        return Measured(Measurement("ok", relative_error=0.0, seconds=problem.flops / gflops / 1e9, spread=0.0,
                                    reps=2, gflops=gflops, clock=runtime.clock))

    monkeypatch.setattr(tuner.search, "measure", measure)


class _Launches:
    """Stands in for a Numba dispatcher: kernel[grid, block](A, B, C, alpha, beta) runs `body`."""

    def __init__(self, body):
        self.body = body

    def __getitem__(self, launch_configuration):
        return self.body


def _plant(monkeypatch, planted: Config, function) -> None:
    """Make `planted`'s kernel run `function` instead of the generated code."""
    real_load = tuner.measure.load

    def load(space, config, directory):
        kernel = real_load(space, config, directory)
        return dataclasses.replace(kernel, function=function) if config == planted else kernel

    monkeypatch.setattr(tuner.measure, "load", load)


@pytest.mark.parametrize("backend", [CUDA, ROC], ids=["cuda", "roc"])
def test_search_caches_the_best_measured_variant(tmp_path, backend):
    search = _search(tmp_path, backend)
    outcome = search.run(trials=2, timeout=None)
    assert outcome.measured == 2 and not outcome.interrupted
    record = cache.read_record(outcome.record_path)
    measured = _measured(search)
    assert record.best.config.as_dict() in [t.params for t in measured]
    assert record.best.measurement.gflops == max(t.value for t in measured)
    assert record.best.measurement.clock == "simulated CPU time"
    assert record.device.backend == backend.name and record.budget.measured == 2
    # With nothing cached, the warm start comes first: the default configuration, then the seed's.
    assert [Config(**t.params) for t in measured] == [Config(), SEED]


def test_a_wrong_answer_never_wins(tmp_path, monkeypatch):
    # The default configuration is measured first; planted, it writes zeros at once: the fastest
    # kernel of all if it were timed, and wrong.
    _plant(monkeypatch, FIRST, _Launches(lambda A, B, C, alpha, beta: C.copy_to_device(np.zeros(C.shape, C.dtype))))
    search = _search(tmp_path)
    outcome = search.run(trials=3, timeout=None)
    planted = [t for t in _measured(search) if Config(**t.params) == FIRST]
    assert len(planted) == 1 and planted[0].value == 0.0
    assert planted[0].user_attrs["measurement"]["status"] == "wrong"
    assert "relative error" in planted[0].user_attrs["measurement"]["reason"]
    assert planted[0].system_attrs["constraints:feasible"] > 0
    record = outcome.record
    assert FIRST.as_dict() not in [entry.config.as_dict() for entry in record.ranked]
    assert record.budget.failed == 1


def test_an_output_left_unwritten_fails_verification(tmp_path, monkeypatch):
    _plant(monkeypatch, FIRST, _Launches(lambda A, B, C, alpha, beta: None))
    search = _search(tmp_path)
    search.run(trials=1, timeout=None)
    measurement = _measured(search)[0].user_attrs["measurement"]
    assert measurement["status"] == "wrong" and "nan" in measurement["reason"]


@pytest.mark.parametrize("dtype, bound", [("float32", "1e-04"), ("float64", "1e-11")])
def test_a_result_off_by_a_tenth_of_a_percent_fails_verification(tmp_path, monkeypatch, dtype, bound):
    """Correct kernels err by about eps times sqrt(k); one that drops or doubles a tile errs by far more
    than this planted one, which a bound of 1e-2 would pass."""
    def nearly(A, B, C, alpha, beta):
        C.copy_to_device((1.001 * (A.copy_to_host() @ B.copy_to_host())).astype(C.dtype))

    _plant(monkeypatch, FIRST, _Launches(nearly))
    search = Search(open_runtime(CUDA, simulate=True), Problem(16, 16, 16, dtype), root=tmp_path)
    search.run(trials=1, timeout=None)
    measurement = _measured(search)[0].user_attrs["measurement"]
    assert measurement["status"] == "wrong" and measurement["reason"] == f"relative error 0.001 exceeds {bound}"


def test_one_wrong_element_fails_verification_where_the_whole_result_is_within_the_bound(tmp_path, monkeypatch):
    """An error in one tile or element hides in the Frobenius norm of a large result; each element
    is also bounded by its own scale, |A|·|B|."""
    seen = {}

    def one_off(A, B, C, alpha, beta):
        a, b = A.copy_to_host().astype(np.float64), B.copy_to_host().astype(np.float64)
        product, scale = a @ b, np.abs(a) @ np.abs(b)
        product[0, 0] += 3e-4 * scale[0, 0]
        seen["whole"] = 3e-4 * scale[0, 0] / np.linalg.norm(a @ b)
        C.copy_to_device(product.astype(C.dtype))

    _plant(monkeypatch, FIRST, _Launches(one_off))
    search = _search(tmp_path)
    search.run(trials=1, timeout=None)
    measurement = _measured(search)[0].user_attrs["measurement"]
    assert seen["whole"] < 1e-4  # the whole result is within the bound
    assert measurement["status"] == "wrong" and measurement["reason"].startswith("an element errs by 0.0003")


def _plus_beta_c(beta, c):
    """beta * C as a kernel adds it: C is not read where beta is 0 (a NaN-poisoned C stays unread)."""
    return beta * c if beta else 0.0


@pytest.mark.parametrize("kernel, wrong", [
    (lambda a, b, c, alpha, beta: alpha * (a @ b) + _plus_beta_c(beta, c), ""),
    (lambda a, b, c, alpha, beta: alpha * (a @ b), "at 65x66x67 with alpha -0.75 and beta 0.5: relative error"),
    (lambda a, b, c, alpha, beta: a @ b + _plus_beta_c(beta, c),
     "at 65x66x67 with alpha -0.75 and beta 0: relative error"),
], ids=["right", "beta-ignored", "alpha-ignored"])
def test_the_gpu_protocol_verifies_edge_tiles_alpha_and_beta_too(tmp_path, monkeypatch, kernel, wrong):
    """A kernel right on the searched product (alpha 1, beta 0, whole tiles) may still be wrong on
    the shapes and scalars tuner.matmul serves: the GPU protocol verifies it on a product with edge
    tiles, alpha and beta as well (the simulator's skips it for time, so it is asked for here)."""
    def launch(A, B, C, alpha, beta):
        host = [array.copy_to_host().astype(np.float64) for array in (A, B, C)]
        C.copy_to_device(kernel(*host, alpha, beta).astype(C.dtype))

    _plant(monkeypatch, FIRST, _Launches(launch))
    runtime = open_runtime(CUDA, simulate=True)
    space = Space.of(CUDA, "float32")
    operands = tuner.measure.Operands.fresh(runtime, space, PROBLEM, seed=0)
    protocol = dataclasses.replace(tuner.measure.SIMULATOR_PROTOCOL, edges=True)
    measured = tuner.measure.measure(runtime, space, PROBLEM, FIRST, operands, protocol, tmp_path)
    status, reason = measured.measurement.status, measured.measurement.reason
    assert (status, reason[:len(wrong)]) == ("wrong" if wrong else "ok", wrong)
    assert not tuner.measure.measure(runtime, space, PROBLEM, FIRST, operands, tuner.measure.SIMULATOR_PROTOCOL,
                                     tmp_path).measurement.reason  # the simulator's protocol checks the product alone


def test_the_edge_check_reads_no_c_where_beta_is_0(tmp_path):
    """A kernel that reads C where beta is 0 turns garbage into NaN (0 * NaN): verify_edges, all that
    a record made under other software is checked with, runs that way too."""
    runtime = open_runtime(CUDA, simulate=True)
    space = Space.of(CUDA, "float32")

    def reads_c(A, B, C, alpha, beta):
        host = [array.copy_to_host().astype(np.float64) for array in (A, B, C)]
        C.copy_to_device((alpha * (host[0] @ host[1]) + beta * host[2]).astype(C.dtype))

    kernel = dataclasses.replace(tuner.measure.load(space, FIRST, tmp_path), function=_Launches(reads_c))
    assert tuner.measure.verify_edges(runtime, kernel) == (
        "at 65x66x67 with alpha -0.75 and beta 0: relative error nan exceeds 1e-04")


# Two warps' worth of threads (64) on 32x32 blocks: a cheap kernel for the simulator, with square blocks.
SQUARE = Config(block_m=32, block_n=32, block_k=8, thread_m=4, thread_n=4, unroll_k=4)


@pytest.mark.parametrize("bound, mutated, error", [
    (r"if (q\d+) < Nu:", r"if \1 < Mu:", "relative error nan"),
    (r"(cb(?: \+ uint64\(\d+\))?) < Nu else", r"\1 < Mu else", "relative error"),
], ids=["c-columns-stored-below-m", "b-columns-read-below-m"])
def test_a_kernel_that_bounds_one_dimension_by_anothers_size_fails_the_edge_check(tmp_path, monkeypatch, bound,
                                                                                 mutated, error):
    """A kernel that bounds C's (or B's) columns by M is right wherever M = N, as in the edge check's
    product for square blocks before (33x33x17 here), and wrong on products that tuner.matmul serves
    with fewer rows than columns. The edge check's sizes now all differ, in both orders, so it fails."""
    render = tuner.kernel.render

    def mutant(*args, **keywords):
        source, edits = re.subn(bound, mutated, render(*args, **keywords))
        assert edits
        return source

    monkeypatch.setattr(tuner.kernel, "render", mutant)
    runtime = open_runtime(CUDA, simulate=True)
    reason = tuner.measure.verify_config(runtime, Space.of(CUDA, "float32"), SQUARE, tmp_path)
    assert reason.startswith(f"at 33x34x35 with alpha -0.75 and beta 0: {error}")


@pytest.mark.parametrize("family", ["matmul", "batched"])
@pytest.mark.parametrize("config", [Config(), SQUARE,
                                    Config(block_m=16, block_n=16, block_k=16, thread_m=4, thread_n=2),
                                    Config(block_m=16, block_n=32, block_k=64, thread_m=4, thread_n=4)],
                         ids=["default", "square", "k-as-deep-as-the-block", "k-deeper-than-the-block"])
def test_the_edge_check_has_edge_tiles_sizes_all_different_and_three_k_tiles(family, config):
    """Whatever the block's shape (block_k as large as block_m or larger too), each product of the
    edge check has a partial tile in every dimension and sizes that all differ, and the first has
    three k-tiles or more, so that a double-buffered kernel's first buffer takes a second k-tile."""
    space = Space.of(CUDA, "float32", family)
    products = [problem for problem, _ in space.family.verifications(config, "float32")]
    for problem in products:
        sizes = {"m": problem.m, "n": problem.n, "k": problem.k}
        assert len(set(sizes.values())) == 3
        assert all(size % getattr(config, f"block_{name}") for name, size in sizes.items())
        assert problem.k > config.block_k
    assert products[0].k > 2 * config.block_k


def test_a_double_buffered_kernel_whose_buffer_index_does_not_wrap_fails_the_edge_check(tmp_path, monkeypatch):
    """A double-buffered kernel that takes k-tile kt's buffer as kt, not kt % 2, is right on two
    k-tiles and indexes a third buffer on the third: the edge check's first product has three."""
    render = tuner.kernel.render

    def mutant(*args, **keywords):
        source = render(*args, **keywords)
        assert "s = uint64(kt & 1)" in source
        return source.replace("s = uint64(kt & 1)", "s = uint64(kt)")

    monkeypatch.setattr(tuner.kernel, "render", mutant)
    runtime = open_runtime(CUDA, simulate=True)
    deep = Config(block_m=16, block_n=16, block_k=16, thread_m=4, thread_n=2, double_buffer=True)  # 32 threads
    assert "index 2 is out of bounds" in tuner.measure.verify_config(runtime, Space.of(CUDA, "float32"), deep, tmp_path)


@pytest.mark.parametrize("mutant, reason", [
    ("", ""),
    ("B3[z if A3.shape[0] > 1 else 0]",
     "at 3x17x18x33 (A one matrix, broadcast) with alpha -0.75 and beta 0: relative error"),
], ids=["right", "b-layer-chosen-by-a-stack"])
def test_the_batched_edge_check_broadcasts_an_operand(tmp_path, monkeypatch, mutant, reason):
    """tuner.matmul passes a 2-D operand to a batched kernel as a stack of one, which the kernel
    broadcasts; a kernel that picks B's layer by A's stack is right on two full stacks, as the edge
    check had them, and wrong there. The check's first product has A one matrix, its second B."""
    render = tuner.kernel.render

    def rendered(*args, **keywords):
        source = render(*args, **keywords)
        assert "B3[z if B3.shape[0] > 1 else 0]" in source
        return source.replace("B3[z if B3.shape[0] > 1 else 0]", mutant) if mutant else source

    monkeypatch.setattr(tuner.kernel, "render", rendered)
    runtime = open_runtime(CUDA, simulate=True)
    small = Config(block_m=16, block_n=16, thread_m=4, thread_n=2)  # 32 threads: cheap to simulate
    found = tuner.measure.verify_config(runtime, Space.of(CUDA, "float32", "batched"), small, tmp_path)
    assert found.startswith(reason) and bool(found) == bool(reason)


def _past_the_end(C) -> np.ndarray:
    """The elements after C's last in the simulated device buffer C is a view of (none where C is
    the whole buffer): where a kernel's store bound of one too many writes, on a GPU, unchecked.
    The simulator's device arrays wrap NumPy arrays, which know their buffer."""
    view = C._ary
    buffer = view
    while isinstance(buffer.base, np.ndarray):
        buffer = buffer.base
    end = view.__array_interface__["data"][0] + view.nbytes - buffer.__array_interface__["data"][0]
    return buffer.reshape(-1).view(np.uint8)[end:].view(view.dtype)


def _writes_past_the_end(elements):
    """A launch that writes the right product into C, and 1.0 into the `elements(C)` elements after it."""
    def launch(A, B, C, alpha, beta):
        host = [array.copy_to_host().astype(np.float64) for array in (A, B, C)]
        C.copy_to_device((alpha * np.matmul(host[0], host[1]) + _plus_beta_c(beta, host[2])).astype(C.dtype))
        _past_the_end(C)[:elements(C)] = 1.0
    return launch


# How far past C a store bound of one too many writes: a row (r <= M), or C[M - 1, N] alone (q <= N at the last row).
_OVERRUNS = {"row": lambda C: tuple(C.shape)[-1], "element": lambda C: 1}


@pytest.mark.parametrize("family, shape", [("matmul", "65x66x67"), ("batched", "3x65x66x67 (A one matrix, broadcast)")])
@pytest.mark.parametrize("overrun", ["row", "element", "none"])
def test_verification_fails_a_kernel_that_writes_past_the_end_of_c(tmp_path, family, shape, overrun):
    """A GPU does not check bounds: a kernel whose store bound is one too many writes past C, after
    a stack's last matrix, over whatever memory follows, while C itself is right. Verification's C
    is the front of a buffer whose tail is a guard band, and a change there fails the kernel."""
    runtime = open_runtime(CUDA, simulate=True)
    space = Space.of(CUDA, "float32", family)
    elements = _OVERRUNS.get(overrun, lambda C: 0)
    kernel = dataclasses.replace(tuner.measure.load(space, FIRST, tmp_path),
                                 function=_Launches(_writes_past_the_end(elements)))
    written = {"row": 66, "element": 1, "none": 0}[overrun]
    assert tuner.measure.verify_edges(runtime, kernel) == (
        f"at {shape} with alpha -0.75 and beta 0: wrote past the end of C: {written} of the "
        f"{66 + tuner.measure.GUARD_ELEMENTS} elements after it" if written else "")


def test_the_search_fails_a_kernel_that_writes_past_the_end_of_c(tmp_path, monkeypatch):
    """The search's own verification, at the searched shape, has the guard band too."""
    _plant(monkeypatch, FIRST, _Launches(_writes_past_the_end(_OVERRUNS["row"])))
    runtime = open_runtime(CUDA, simulate=True)
    space = Space.of(CUDA, "float32")
    operands = tuner.measure.Operands.fresh(runtime, space, PROBLEM, seed=0)
    measured = tuner.measure.measure(runtime, space, PROBLEM, FIRST, operands, tuner.measure.SIMULATOR_PROTOCOL,
                                     tmp_path).measurement
    assert (measured.status, measured.reason) == (
        "wrong", f"wrote past the end of C: 16 of the {16 + tuner.measure.GUARD_ELEMENTS} elements after it")


class _Watched:
    """Stands in for a Numba dispatcher: runs the real one, keeping each C it is launched on."""

    def __init__(self, function):
        self.function, self.seen = function, []

    def __getitem__(self, launch_configuration):
        def launch(A, B, C, alpha, beta):
            self.seen.append(C)
            self.function[launch_configuration](A, B, C, alpha, beta)
        return launch


@pytest.mark.parametrize("family, problem", [("matmul", Problem(17, 18, 19, "float32")),
                                             ("batched", BatchedProblem(17, 18, 19, "float32", batch=2))])
def test_a_right_kernel_passes_verification_on_a_view_typed_as_the_timed_c(tmp_path, family, problem):
    """The guard band fails no right kernel, and the C the kernel gets is a C-contiguous view of
    C's shape, of the Numba type of the C it is timed on (a whole device array): no other machine
    code is verified than is timed."""
    runtime = open_runtime(CUDA, simulate=True)
    space = Space.of(CUDA, "float32", family)
    small = Config(block_m=16, block_n=16, thread_m=4, thread_n=2)  # 32 threads: cheap to simulate
    kernel = tuner.measure.load(space, small, tmp_path)
    watched = _Watched(kernel.function)
    operands = tuner.measure.Operands.fresh(runtime, space, problem, seed=0)
    _, wrong = tuner.measure.verify(runtime, dataclasses.replace(kernel, function=watched), operands,
                                    space.family.tolerance(space.precision))
    timed = runtime.module.device_array(operands.reference.shape, dtype=space.precision.output)
    assert wrong == "" and watched.seen
    assert all(C.is_c_contiguous() and tuple(C.shape) == operands.reference.shape
               and C._numba_type_ == timed._numba_type_ for C in watched.seen)


@pytest.mark.parametrize("where, status", [("load", "compile"), ("launch", "launch")])
def test_build_and_launch_failures_are_recorded_with_the_reason(tmp_path, monkeypatch, where, status):
    def broken(*args):
        raise RuntimeError(f"planted {where} failure")

    if where == "load":
        monkeypatch.setattr(tuner.measure, "load", broken)
    else:
        _plant(monkeypatch, FIRST, _Launches(broken))
    search = _search(tmp_path)
    search.run(trials=1, timeout=None)
    measurement = _measured(search)[0].user_attrs["measurement"]
    assert measurement["status"] == status and measurement["reason"] == f"RuntimeError: planted {where} failure"
    assert _measured(search)[0].state.name == "COMPLETE"  # learnt from, not an ignored FAIL


def test_rerunning_resumes_without_measuring_again(tmp_path, monkeypatch):
    _modelled(monkeypatch)
    first = _search(tmp_path).run(trials=2, timeout=None)
    search = _search(tmp_path)
    trials_before = len(search.study.trials)
    search.run(trials=2, timeout=None)
    assert len(search.study.trials) > trials_before
    keys = [json.dumps(t.params, sort_keys=True) for t in _measured(search)]
    assert len(keys) == 4 and len(set(keys)) == 4
    assert cache.read_record(first.record_path).budget.measured == 4


def test_a_search_goes_through_every_turn_of_the_default_sampler(tmp_path, monkeypatch):
    """The warm start (2), TPE's turn (2) and the local search (3), each measuring only
    configurations not measured before."""
    _sampler_options(monkeypatch, startup=2, tpe_first=4)
    _modelled(monkeypatch)
    search = _search(tmp_path)
    outcome = search.run(trials=7, timeout=None)
    measured = [trial.params for trial in _measured(search)]
    assert outcome.measured == len(measured) == 7 and not outcome.stopped
    assert len({json.dumps(params, sort_keys=True) for params in measured}) == 7


def test_a_repeated_suggestion_is_answered_from_the_history(tmp_path, monkeypatch):
    _sampler_options(monkeypatch, tpe_first=0)  # the local search repeats nothing: one repeat, the queued one
    search = _search(tmp_path)
    search.run(trials=1, timeout=None)
    done = _measured(search)[0]
    search.study.enqueue_trial(done.params)  # queued behind the warm start's default config
    outcome = search.run(trials=2, timeout=None)
    repeats = [t for t in search.study.trials if t.user_attrs.get("kind") == "duplicate"]
    assert len(repeats) == outcome.duplicates == 1
    assert repeats[0].user_attrs["duplicate_of"] == done.number and repeats[0].value == done.value
    assert len(_measured(search)) == 3


def test_invalid_suggestions_are_never_measured(tmp_path, monkeypatch):
    compiled = []
    real_load = tuner.measure.load
    monkeypatch.setattr(tuner.measure, "load",
                        lambda space, config, directory: compiled.append(config) or real_load(space, config, directory))
    search = _search(tmp_path)
    invalid = Config(block_m=16, block_n=16, thread_m=8, thread_n=8)  # 4 threads: not a warp
    search.study.enqueue_trial(invalid.as_dict())
    outcome = search.run(trials=1, timeout=None)
    told = [t for t in search.study.trials if t.user_attrs.get("kind") == "invalid"]
    assert outcome.invalid == len(told) == 1 and compiled == [FIRST]
    broken, pruned = search.space.reasons(invalid)
    assert (told[0].user_attrs["reasons"], told[0].user_attrs["pruned"]) == (broken, pruned) and broken
    assert told[0].system_attrs["constraints:feasible"] == len(broken) + len(pruned)
    assert told[0].state.name == "COMPLETE" and told[0].value == 0.0


def test_warm_start_takes_the_best_of_other_shapes(tmp_path):
    other = Search(open_runtime(CUDA, simulate=True), Problem(16, 32, 16), root=tmp_path)
    other.study.enqueue_trial(Config(block_m=32, block_n=32, thread_m=2, thread_n=2).as_dict())
    other.run(trials=1, timeout=None)
    best = cache.read_record(other.path).best.config
    # Cached bests come first, ahead of the default configuration and the seed's (and, on a GPU, the flagship).
    assert best not in (SEED, Config()) and _search(tmp_path).warm_start() == [best, Config(), SEED]
    assert _search(tmp_path).space.starts(simulated=False) == (Config(), SEED, FLAGSHIPS["float32"])


def test_a_gpus_warm_start_takes_nothing_from_the_simulators_records(tmp_path):
    """Simulated CPU time ranks no configuration for a GPU (nor, queued from a record, would the
    static ceiling prune it)."""
    from records import H100

    from tuner.runtime import Runtime
    from tuner.study_record import warm_start_configs

    other = Search(open_runtime(CUDA, simulate=True), Problem(16, 32, 16), root=tmp_path)
    other.run(trials=1, timeout=None)
    space, problem = Space.of(CUDA, "float32"), Problem(16, 16, 16)
    on_a_gpu = Runtime(CUDA, None, H100)
    assert warm_start_configs(space, tmp_path, on_a_gpu, problem) == ([], [Config(), SEED, FLAGSHIPS["float32"]])
    simulated = warm_start_configs(space, tmp_path, other.runtime, problem)[0]
    assert simulated == [cache.read_record(other.path).best.config]


def test_warm_start_takes_nothing_cached_for_another_dtype(tmp_path):
    device, float64 = open_runtime(CUDA, simulate=True).device, Problem(16, 32, 16, "float64")
    tuned = make_record(device, float64, [(Config(block_m=32, block_n=32, thread_m=2, thread_n=2), 1.0)])
    cache.write_record(cache.record_path(tmp_path, device.slug, float64.key), tuned)
    assert _search(tmp_path).warm_start() == [Config(), SEED]


def test_ctrl_c_right_after_a_measurement_keeps_it(tmp_path):
    def interrupt(outcome, measurement, best):
        raise KeyboardInterrupt

    search = _search(tmp_path)
    outcome = search.run(trials=5, timeout=None, progress=interrupt)
    assert outcome.interrupted and outcome.measured == 1
    assert [t.state.name for t in search.study.trials if t.user_attrs.get("kind")] == ["COMPLETE"]
    assert cache.read_record(outcome.record_path).budget.measured == 1


def test_a_configuration_another_worker_measured_is_known_as_measured(tmp_path):
    """tuner regenerate asks whether a configuration was measured; a search beside it may have."""
    mine, theirs = _search(tmp_path), _search(tmp_path)
    theirs.run(trials=1, timeout=None)
    [done] = _measured(theirs)
    assert mine.measured(mine.space.config_type(**done.params)).number == done.number


def test_a_study_name_is_bound_to_its_device_and_problem(tmp_path):
    _search(tmp_path, name="shared").run(trials=1, timeout=None)
    with pytest.raises(ValueError, match="holds float32-16x16x16 on device .*; choose another --study name"):
        Search(open_runtime(CUDA, simulate=True), Problem(32, 32, 32), root=tmp_path, name="shared")


@pytest.mark.parametrize("directions, trials", [(["minimize"], 0), (["maximize"], 1), (["maximize", "minimize"], 0)],
                         ids=["minimized", "with trials", "two objectives"])
def test_a_study_that_is_not_a_tuner_search_is_refused_and_left_as_it_was(tmp_path, directions, trials):
    storage = f"sqlite:///{tmp_path / 'theirs.db'}"
    theirs = optuna.create_study(storage=storage, study_name="theirs", directions=directions)
    for value in range(trials):
        theirs.add_trial(optuna.trial.create_trial(value=float(value), params={}, distributions={}))
    with pytest.raises(ValueError, match="study .theirs. in this storage is not a tuner search .*; choose another"):
        _search(tmp_path, storage=storage, name="theirs")
    assert len(optuna.load_study(study_name="theirs", storage=storage).trials) == trials


def test_a_database_storage_gets_heartbeats_and_claims(tmp_path):
    search = _search(tmp_path, storage=f"sqlite:///{tmp_path / 'study.db'}", heartbeat=3)
    outcome = search.run(trials=None, timeout=None, budget=2)
    assert outcome.spent and outcome.measured == 2 and search.shared.heartbeat == 3
    assert all(t.user_attrs["claim"] == json.dumps(t.params, sort_keys=True) for t in _measured(search))
    assert search.shared.storage.grace_period == 12  # four silent heartbeats
    assert cache.read_record(outcome.record_path).budget.measured == 2


def test_a_trial_taken_for_dead_is_dropped_without_an_error(tmp_path):
    search = _search(tmp_path)
    trial = search.study.ask()
    search._asked[trial.number] = trial
    search.study.tell(trial.number, state=optuna.trial.TrialState.FAIL)  # as another worker would
    search._tell(trial, "invalid", 0.0, 1.0, reasons=["planted"])
    assert not search._asked and search.study.trials[trial.number].state.name == "FAIL"


def test_a_budget_already_spent_measures_nothing(tmp_path):
    _search(tmp_path).run(trials=None, timeout=None, budget=1)
    outcome = _search(tmp_path).run(trials=None, timeout=None, budget=1)
    assert outcome.spent and outcome.measured == 0 and outcome.record.budget.measured == 1


def test_a_search_writes_only_what_its_study_measured(tmp_path):
    """The record a search replaces is re-measured, never copied; a record of another device or
    shape moved to its path is neither used nor merged."""
    runtime = open_runtime(CUDA, simulate=True)
    path = cache.record_path(tmp_path, runtime.device.slug, PROBLEM.key)
    path.parent.mkdir(parents=True)
    from records import H100, make_record

    invented = Config(block_m=32, block_n=32, thread_m=2, thread_n=2)
    path.write_text(json.dumps(make_record(H100, PROBLEM, [(SEED, 1e9)]).as_dict()))  # another device's, moved here
    record = _search(tmp_path).run(trials=1, timeout=None).record
    assert record.fingerprint == runtime.device.fingerprint and record.best.measurement.gflops < 1e8
    cache.write_record(path, make_record(runtime.device, PROBLEM, [(invented, 1e9), (SEED, 1e8)]))  # edited
    search = _search(tmp_path, name="another")
    with pytest.warns(UserWarning, match="replaces the cache record made by study 'test'"):
        outcome = search.run(trials=3, timeout=None)
    measured = {json.dumps(t.params, sort_keys=True): t.value for t in _measured(search)}
    ranked = list(outcome.record.ranked)
    assert [Config(**t.params) for t in _measured(search)][:2] == [invented, SEED]  # re-measured first
    assert all(entry.measurement.gflops == measured[json.dumps(entry.config.as_dict(), sort_keys=True)]
               for entry in ranked)
    assert max(entry.measurement.gflops for entry in ranked) < 1e8


def test_another_studys_record_is_replaced_though_this_studys_worker_died_measuring_one_of_its_configurations(
        tmp_path):
    """A configuration that this study's worker died measuring each time is never measured here
    again: it must not keep the other study's record, which tuner.matmul serves it from, for good."""
    from processes import died_measuring

    from tuner.storage import MAX_RETRIES

    runtime = open_runtime(CUDA, simulate=True)
    killer = Config(block_m=32, block_n=32, thread_m=2, thread_n=2)
    cache.write_record(cache.record_path(tmp_path, runtime.device.slug, PROBLEM.key),
                       make_record(runtime.device, PROBLEM, [(killer, 1e9), (SEED, 1e8)]))
    died_measuring(_search(tmp_path, name="another"), killer, MAX_RETRIES + 1)
    search = _search(tmp_path, name="another")
    with (pytest.warns(UserWarning, match="is not queued again: its worker died while measuring it"),
          pytest.warns(UserWarning, match="made by study 'test' in test .*, having measured its configurations again, "
                                          "but 1 configuration that this study's worker died measuring each time")):
        outcome = search.run(trials=2, timeout=None)
    assert outcome.record.study["name"] == "another" and search.kept_record() == (None, [])
    assert killer not in [entry.config for entry in outcome.record.ranked]


def test_a_configuration_whose_static_ceiling_is_below_half_the_best_is_never_measured(tmp_path, monkeypatch):
    """Ceilings stand in for fma_fraction (the simulator compiles nothing): the seed kernel's 1x1
    tile, queued by the warm start, is told invalid with the reason and costs no device time."""
    from tuner.ceiling import Ceilings

    _modelled(monkeypatch)
    counted = []

    def count(config):
        counted.append(config)
        return 0.8 if config == FIRST else 0.2 if config.thread_m == 1 else 0.6

    search = _search(tmp_path)
    search.ceilings = Ceilings(tmp_path / "ceilings.json", count)
    search.run(trials=3, timeout=None)
    measured = [Config(**trial.params) for trial in _measured(search)]
    assert FIRST in measured and all(config.thread_m != 1 for config in measured)
    pruned = [trial for trial in search.study.trials if "static ceiling 0.20" in str(trial.user_attrs.get("pruned"))]
    assert SEED in [Config(**trial.params) for trial in pruned]
    assert len(counted) == len(set(counted))  # counted once each, then read from the file
    assert Ceilings(tmp_path / "ceilings.json", count).of(SEED) == 0.2 and counted.count(SEED) == 1


def test_the_count_made_in_the_measuring_process_is_in_its_variants_seconds_and_the_records(tmp_path):
    """With no compile worker the count compiles the kernel (compile_and_count), and the measurement
    takes it from memory: the count's seconds are the measuring process's, on the trial and in the
    record's measuring_seconds, not lost."""
    import time

    from tuner.ceiling import Ceilings

    search = _search(tmp_path)
    search.ceilings = Ceilings(tmp_path / "ceilings.json", lambda config: time.sleep(0.3) or 0.5)
    search.run(trials=1, timeout=None, warm=False)
    [trial] = _measured(search)
    assert trial.user_attrs["seconds"]["compile_and_count"] >= 0.3
    assert cache.read_record(search.path).budget.measuring_seconds >= 0.3


def test_the_count_of_a_variant_its_ceiling_rules_out_is_in_its_seconds_and_the_records(tmp_path, monkeypatch):
    """A variant counted in the measuring process and then ruled out by its static ceiling cost that
    process the count: the seconds are on its trial and in the record's measuring_seconds (`tuner
    show`'s seconds compiling, counting, verifying and timing), not dropped with the variant."""
    import time

    from tuner.ceiling import Ceilings

    _modelled(monkeypatch)
    search = _search(tmp_path)
    search.ceilings = Ceilings(tmp_path / "ceilings.json", lambda config: 0.8 if config == FIRST else
                               time.sleep(0.3) or 0.2)
    search.enqueue([FIRST, SEED])
    search.run(trials=2, timeout=None, warm=False, from_queue=[FIRST, SEED])
    [pruned] = [trial for trial in search.study.trials if trial.user_attrs.get("pruned")]
    assert pruned.params == SEED.as_dict() and pruned.user_attrs["seconds"]["compile_and_count"] >= 0.3
    assert cache.read_record(search.path).budget.measuring_seconds >= 0.3


def test_a_ceiling_already_known_costs_its_variant_no_compile_and_count_phase(tmp_path):
    """Read from the ceilings file, a ceiling compiled nothing: the measurement compiles the kernel
    itself (its compile phase), and the trial has no compile_and_count that was never made."""
    from tuner.ceiling import Ceilings

    search = _search(tmp_path)
    search.ceilings = Ceilings(tmp_path / "ceilings.json", lambda config: 0.5)
    search.ceilings.known = {config_key(SEED.as_dict()): 0.5}
    search.enqueue([SEED])
    search.run(trials=1, timeout=None, warm=False)
    [trial] = _measured(search)
    assert trial.params == SEED.as_dict() and "compile_and_count" not in trial.user_attrs["seconds"]


def test_searches_on_one_host_keep_each_others_ceilings(tmp_path):
    """Two searches (--devices workers) that opened the file before either counted: both counts stay."""
    from tuner.ceiling import Ceilings

    path = tmp_path / "ceilings.json"
    first, second = Ceilings(path, lambda config: 0.5), Ceilings(path, lambda config: 0.25)
    first.of(SEED)
    second.of(FIRST)
    assert Ceilings(path, lambda config: pytest.fail("counted again")).known == {
        config_key(SEED.as_dict()): 0.5, config_key(FIRST.as_dict()): 0.25}


@pytest.mark.parametrize("content", ['{"a": 0.5', "[1, 2]", '{"a": "high", "b": true, "c": 0.5, "d": null}'])
def test_a_broken_ceilings_file_counts_as_empty_and_is_written_over(tmp_path, content):
    from tuner.ceiling import Ceilings, CeilingsFileWarning

    path = tmp_path / "ceilings.json"
    path.write_text(content)
    if content.startswith('{"a": "'):  # the file is read: only its entries that are no ceiling are dropped
        ceilings = Ceilings(path, lambda config: 0.5)
    else:
        with pytest.warns(CeilingsFileWarning, match=f"the ceilings file {path} cannot be read"):
            ceilings = Ceilings(path, lambda config: 0.5)
    assert ceilings.known == ({"c": 0.5, "d": None} if content.startswith('{"a": "') else {})
    assert ceilings.of(SEED) == 0.5 and json.loads(path.read_text())[config_key(SEED.as_dict())] == 0.5
    assert not list(tmp_path.glob("*.tmp"))


def _fifo(path, monkeypatch):
    os.mkfifo(path)


def _device(path, monkeypatch):
    path.symlink_to("/dev/zero")


def _over_the_cap(path, monkeypatch):
    monkeypatch.setattr("tuner.ceiling.MAX_BYTES", 16)
    path.write_text('{"c": 0.5, "d": 0.25}')  # a sound file of 21 bytes, whole if read past the cap


@pytest.mark.parametrize("make, reason", [
    (_fifo, "not a regular file"), (_device, "not a regular file"), (_over_the_cap, "over 16 bytes"),
], ids=["fifo", "device", "over-the-cap"])
def test_a_fifo_a_device_or_a_file_over_the_cap_at_the_ceilings_path_is_ignored_and_written_over(
        tmp_path, monkeypatch, make, reason):
    """Read without blocking and within MAX_BYTES (disk.read_regular_file), it cannot hang or
    exhaust a search: it is named in a warning, and the next count replaces it with a ceilings file."""
    from tuner.ceiling import Ceilings, CeilingsFileWarning

    path = tmp_path / "ceilings.json"
    make(path, monkeypatch)
    with pytest.warns(CeilingsFileWarning, match=f"the ceilings file {path} cannot be read .* {reason}"):
        ceilings = Ceilings(path, lambda config: 0.5)
    assert ceilings.known == {} and ceilings.of(SEED) == 0.5
    assert path.is_file() and not path.is_symlink()
    assert json.loads(path.read_text()) == {config_key(SEED.as_dict()): 0.5}


def test_the_temporary_ceilings_file_of_a_writer_killed_before_its_rename_is_removed(tmp_path):
    """Writers of a ceilings file name their temporary file after it and hold its lock until the
    rename, so the next one removes what a killed writer left, and nothing of another file."""
    from tuner.ceiling import Ceilings

    path = tmp_path / "ceilings.json"
    left = tmp_path / "ceilings.json.k1ll3d.tmp"
    left.write_text('{"a": 0.')
    others = [tmp_path / "other-ceilings.json.x1y2z3.tmp", tmp_path / "tmpx1y2z3.tmp"]
    for other in others:
        other.write_text("")
    assert Ceilings(path, lambda config: 0.5).of(SEED) == 0.5
    assert not left.exists() and sorted(tmp_path.glob("*.tmp")) == sorted(others)


def test_the_prune_threshold_follows_the_fastest_variant_not_the_highest_ceiling(tmp_path, monkeypatch):
    """For a thin product a small tile with a low ceiling wins: it, not a slower tile with a higher
    ceiling, sets the threshold, so that small tiles stay in play."""
    from tuner.ceiling import Ceilings, why_not_measure
    from tuner.measure import Measured
    from tuner.record import Measurement

    def tile(config):
        return config.thread_m * config.thread_n

    def measure(runtime, space, problem, config, operands, protocol, directory):  # small tiles fastest
        gflops = 100.0 / tile(config)
        return Measured(Measurement("ok", relative_error=0.0, seconds=problem.flops / gflops / 1e9, reps=1,
                                    gflops=gflops))

    monkeypatch.setattr(tuner.search, "measure", measure)
    search = _search(tmp_path)
    search.ceilings = Ceilings(tmp_path / "ceilings.json", lambda config: 0.05 + 0.1 * tile(config))
    # Valid tiles of 8, 16 and 4 elements per thread (finding the first of 16 in the space took 6 s).
    small, big, smaller = (Config(block_m=16, block_n=n, block_k=8, thread_m=m, thread_n=t, unroll_k=1, pad=0,
                                  prefetch=False) for n, m, t in ((16, 2, 4), (32, 4, 4), (16, 2, 2)))
    assert [tile(config) for config in (small, big, smaller) if not search.space.violations(config)] == [8, 16, 4]
    for config in (small, big, smaller):  # ceilings 0.85, 1.65 and 0.45, measured in this order
        search.study.enqueue_trial(config.as_dict())
    search.run(trials=3, timeout=None, warm=False)
    # When the 4 per thread's turn came, the fastest (8 per thread, ceiling 0.85) set the threshold,
    # 0.425, so it was measured; the highest ceiling, also the last measured (1.65), would have pruned it.
    assert sorted(tile(Config(**trial.params)) for trial in _measured(search)) == [4, 8, 16]
    assert why_not_measure(0.45, 0.85, 0) == "" and why_not_measure(0.45, 1.65, 0)


def test_a_configuration_queued_from_a_record_is_measured_whatever_its_ceiling(tmp_path):
    """A warm start or a regeneration queues what a record holds, measured before: the static
    ceiling does not prune it (a regeneration would measure the sampler's suggestions instead)."""
    from tuner.ceiling import Ceilings

    search = _search(tmp_path)
    search.ceilings = Ceilings(tmp_path / "ceilings.json", lambda config: 1.0 if config == SEED else 0.1)
    search.study.enqueue_trial(SEED.as_dict())
    search.run(trials=1, timeout=None, warm=False)
    low = next(config for config in search.space if config != SEED)
    assert search.enqueue([low]) == [low] and search.enqueue([low], recorded=True) == []  # waiting: now marked
    search.run(trials=1, timeout=None, warm=False)
    assert search.measured(low) is not None and search.measured(low).user_attrs["ceiling"] == 0.1


def test_with_nothing_better_left_the_ceiling_no_longer_prunes():
    from tuner.ceiling import NOTHING_BETTER_LEFT, why_not_measure

    assert "below half of 0.80, the ceiling of the fastest variant measured" in why_not_measure(0.3, 0.8, 0)
    assert why_not_measure(0.5, 0.8, 0) == "" and why_not_measure(None, 0.8, 0) == ""
    assert why_not_measure(0.3, 0.8, NOTHING_BETTER_LEFT) == ""


FORGERIES = {
    "a value that is not its rate": lambda measurement: ({**measurement}, 9e9),
    "a rate that is not the product over the time": lambda measurement: ({**measurement, "gflops": 9e9}, 9e9),
    "a measurement lacking its time": lambda measurement: (
        {name: value for name, value in measurement.items() if name != "seconds"}, measurement["gflops"] * 2),
}


@pytest.mark.parametrize("forge", FORGERIES.values(), ids=FORGERIES.keys())
def test_a_forged_trial_in_the_journal_reaches_neither_the_record_nor_the_prune_threshold(tmp_path, monkeypatch,
                                                                                          forge):
    """A trial appended to a study's journal by hand, claiming a rate the tuner did not measure, is
    left out of the record, with a warning, and of the best that sets the prune threshold, and its
    configuration is queued and measured again."""
    _modelled(monkeypatch)
    search = _search(tmp_path)
    search.run(trials=1, timeout=None, warm=False)
    honest = _measured(search)[0]
    other = next(config for config in search.space if config_key(config.as_dict()) != config_key(honest.params))
    measurement, value = forge(honest.user_attrs["measurement"])
    search.study.add_trial(optuna.trial.create_trial(
        params=other.as_dict(), distributions=honest.distributions, value=value,
        user_attrs={**honest.user_attrs, "measurement": measurement}, system_attrs=honest.system_attrs))
    with pytest.warns(UserWarning, match=f"trial {honest.number + 1} of the study is left out: its measurement is "
                                         "not one the tuner made"):
        stored, _ = search.save()
    assert stored.configs == [Config(**honest.params)] and stored.best.measurement.gflops == honest.value
    assert (stored.budget.measured, stored.budget.failed) == (1, 0)  # the forgery is no failed variant either
    with pytest.warns(UserWarning, match="is left out"):
        again = _search(tmp_path)
        assert again.best_gflops() == honest.value
        assert not again.study.sampler.counts(again.study.trials[honest.number + 1])  # nor steers the sampler
        assert again.enqueue([other]) == [other]  # the warm start queues it again, as not measured
        again.run(trials=1, timeout=None, warm=False)
        assert again.measured(other).number == honest.number + 2
    assert [trial.number for trial in _measured(again) if trial.params == other.as_dict()] == [
        honest.number + 1, honest.number + 2]


def test_a_trial_whose_kind_tuner_does_not_tell_is_named_as_left_out_and_measured_again(tmp_path, monkeypatch):
    from tuner.studies import StudyTrials

    _modelled(monkeypatch)
    search = _search(tmp_path)
    search.run(trials=1, timeout=None, warm=False)
    honest = _measured(search)[0]
    other = next(config for config in search.space if config_key(config.as_dict()) != config_key(honest.params))
    for odd in ("weird", ["measured"]):  # a list too: a journal can hold anything
        search.study.add_trial(optuna.trial.create_trial(
            params=other.as_dict(), distributions=honest.distributions, value=honest.value,
            user_attrs={**honest.user_attrs, "kind": odd}, system_attrs=honest.system_attrs))
    with pytest.warns(UserWarning) as caught:
        again = _search(tmp_path)
        assert again.measured_count() == 1 and again.measured(other) is None
        assert again.enqueue([other]) == [other]
        again.run(trials=1, timeout=None, warm=False)
        assert again.measured(other).number == honest.number + 3  # measured again
        runs = StudyTrials.of(again.study, cache.Catalog.read(tmp_path))
    assert honest.number + 1 not in [trial.number for trial in runs.trials]
    assert [trial.number for trial in runs.measured] == [honest.number, honest.number + 3]
    said = {str(warning.message) for warning in caught}
    assert {f"tuner: trial {honest.number + 1} of the study is left out: its kind 'weird' is not one tuner tells",
            f"tuner: trial {honest.number + 2} of the study is left out: its kind ['measured'] is not one tuner "
            "tells"} == said


def test_a_forged_trial_does_not_count_in_the_budget(tmp_path, monkeypatch):
    _modelled(monkeypatch)
    search = _search(tmp_path)
    search.run(trials=1, timeout=None, warm=False)
    honest = _measured(search)[0]
    search.study.add_trial(optuna.trial.create_trial(
        params=honest.params, distributions=honest.distributions, value=9e9, user_attrs=honest.user_attrs,
        system_attrs=honest.system_attrs))
    with pytest.warns(UserWarning, match="is left out"):
        outcome = _search(tmp_path).run(trials=None, timeout=None, warm=False, budget=2)
    assert outcome.measured == 1 and outcome.spent


def test_a_measurement_this_search_makes_that_fails_the_records_check_is_a_failed_variant(tmp_path, monkeypatch):
    """A rate the record would refuse (say over twice a nominal peak that a new architecture
    outgrew) is told as a failure with the reason: it counts in the budget and answers for its
    configuration, as the run counts it, instead of being left out as a measurement not the tuner's."""
    from tuner.measure import Measured
    from tuner.record import Measurement
    from tuner.studies import failure_reasons

    def measure(runtime, space, problem, config, operands, protocol, directory):
        return Measured(Measurement("ok", relative_error=0.0, seconds=1.0, reps=1, gflops=9e9))

    monkeypatch.setattr(tuner.search, "measure", measure)
    search = _search(tmp_path)
    outcome = search.run(trials=2, timeout=None, warm=False, budget=1)  # the budget, not the trials, stops it
    assert (outcome.measured, outcome.failed, search.measured_count()) == (1, 1, 1) and outcome.spent
    [trial] = _measured(search)
    assert search.measured(Config(**trial.params)).number == trial.number
    assert failure_reasons(search.counted_trials())[
        "implausible: its rate 9,000,000,000 GFLOP/s is not the product's operations over its median 1,000 ms"] == 1


def test_the_command_line_counts_a_forged_trial_neither_in_its_budget_nor_as_measured(tmp_path, capsys, monkeypatch):
    _modelled(monkeypatch)
    args = ["search", "--backend", "cuda", "--simulate", "--shape", "16", "16", "16", "--cache-dir", str(tmp_path)]
    assert main(args + ["--trials", "1"]) == 0
    search = _search(tmp_path)  # the command's study: PROBLEM's on the simulator
    honest = _measured(search)[0]
    search.study.add_trial(optuna.trial.create_trial(
        params=honest.params, distributions=honest.distributions, value=9e9, user_attrs=honest.user_attrs,
        system_attrs=honest.system_attrs))
    capsys.readouterr()
    with pytest.warns(UserWarning, match="is left out"):
        assert main(args + ["--trials", "2"]) == 0
    captured = capsys.readouterr()
    assert "1 measured of a budget of 2" in captured.err
    assert "this run: measured 1 " in captured.out and "2 measured (its budget: 2)" in captured.out
    assert "already measured its budget" not in captured.out


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the "Exception ignored in"
def test_a_stop_that_a_finalizer_swallowed_stops_the_search_before_its_next_variant(tmp_path):
    # A signal taken while a __del__ runs raises there, and Python prints "Exception ignored in" and
    # goes on; the later stop signals are ignored, so without a second raise the search would run on.
    class Finalized:
        def __del__(self):
            signal.raise_signal(signal.SIGTERM)

    search = _search(tmp_path)
    previous = stop_on_sigterm(once=True)
    try:
        Finalized()
        outcome = search.run(trials=2, timeout=None, warm=False)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert outcome.terminated and outcome.measured == 0


def test_a_trial_whose_measurement_is_malformed_counts_as_a_failure():
    from tuner.studies import failure_reasons

    malformed = optuna.trial.create_trial(params={}, distributions={}, value=0.0,
                                          user_attrs={"kind": "measured", "measurement": "x", "reasons": 3})
    assert failure_reasons([malformed]) == {"malformed: the study's storage holds no measurement tuner writes": 1}
