"""Recorded spaces, the default sampler and `tuner replay`, on small spaces made here."""
import copy
import gzip
import itertools
import json
import re

import numpy as np
import optuna
import pytest

from tuner import recorded
from tuner.backends import get_backend
from tuner.cli import main
from tuner.config import Config
from tuner.gaussian_process import expected_improvement
from tuner.replay import replay, summarize
from tuner.sampler import LocalSearchSampler, Options
from tuner.space import Space
from tuner.trials import answer, suggest

DOMAINS = {"a": [1, 2, 4, 8, 16, 32, 64, 128], "b": [1, 2, 4, 8, 16, 32, 64, 128], "flag": [0, 1], "d": [8, 16, 32, 64]}
BEST = (16, 4, 1, 32)


def _time(a, b, flag, d) -> float:
    """A bowl in the log of each parameter, smallest at BEST, with a ridge along a*b."""
    position = {name: DOMAINS[name].index(value) for name, value in zip(DOMAINS, (a, b, flag, d))}
    best = {name: DOMAINS[name].index(value) for name, value in zip(DOMAINS, BEST)}
    return 1.0 + sum((position[name] - best[name]) ** 2 for name in DOMAINS) * 0.1 + 0.05 * abs(
        position["a"] - position["b"] - 2)


def _entry(values) -> dict:
    a, b, flag, d = values
    entry = {**dict(zip(DOMAINS, values)), "compile_time": 500.0, "verification_time": 10.0, "benchmark_time": 90.0}
    if a * b > 1024:
        return {**entry, "time": "InvalidConfig"}
    if a == 128 and d == 64:
        return {**entry, "time": "RuntimeFailedConfig"}
    return {**entry, "time": _time(*values), "times": [_time(*values)] * 3}


def write_cache(path, *, compress=True, left_open=False) -> None:
    """A Kernel Tuner cache file of the space above."""
    cache = {",".join(map(str, values)): _entry(values) for values in itertools.product(*DOMAINS.values())}
    document = {"device_name": "Made-up GPU", "kernel_name": "bowl", "problem_size": [64, 64],
                "tune_params_keys": list(DOMAINS), "tune_params": DOMAINS, "objective": "time", "cache": cache}
    text = json.dumps(document)
    if left_open:
        text = text[:-2] + ","  # as Kernel Tuner leaves a cache whose run was cut off
    path.write_bytes(gzip.compress(text.encode()) if compress else text.encode())


@pytest.fixture
def space_file(tmp_path):
    path = tmp_path / "bowl.json.gz"
    write_cache(path)
    return path


def test_a_kernel_tuner_cache_is_read_with_its_failures_and_without_its_invalid_combinations(space_file):
    space = recorded.load(space_file)
    valid = [values for values in itertools.product(*DOMAINS.values()) if values[0] * values[1] <= 1024]
    assert set(space.results) == set(valid)
    assert space.results[(128, 1, 0, 64)].failure == "RuntimeFailedConfig"
    assert space.results[(128, 1, 0, 64)].seconds is None
    assert space.results[BEST].seconds == pytest.approx(1e-3 * _time(*BEST))
    assert space.optimum == space.results[BEST].seconds
    assert space.results[BEST].cost == pytest.approx(0.6)


@pytest.mark.parametrize("compress", [True, False])
def test_a_cache_left_open_reads_like_a_closed_one(tmp_path, space_file, compress):
    path = tmp_path / "open.json"
    write_cache(path, compress=compress, left_open=True)
    assert recorded.load(path).results == recorded.load(space_file).results


def write_t4(path, *, unit=None, metadata_unit="miliseconds", scale=1.0, cost_scale=1.0) -> None:
    """The space above as a Kernel Tuner output file in the T4 format: its measured times in `unit`
    (else the file's `metadata_unit`) multiplied by `scale`, its compile and run times in the file's
    unit multiplied by `cost_scale`."""
    results = []
    for values in itertools.product(*DOMAINS.values()):
        entry = _entry(values)
        failure = {"InvalidConfig": "constraints", "RuntimeFailedConfig": "runtime"}.get(entry["time"], "correct")
        value = entry["time"] * scale if failure == "correct" else entry["time"]
        results.append({"configuration": dict(zip(DOMAINS, values)), "invalidity": failure,
                        "times": {"compilation": 500.0 * cost_scale, "validation": 10.0 * cost_scale,
                                  "runtimes": [90.0 * cost_scale]},
                        "measurements": [{"name": "GFLOP/s", "value": 1.0, "unit": ""},
                                         {"name": "time", "value": value, "unit": unit or ""}],
                        "objectives": ["time"]})
    document = {"results": results, "schema_version": "1.0.0"}
    if metadata_unit:
        document["metadata"] = {"timeunit": metadata_unit}
    path.write_bytes(gzip.compress(json.dumps(document).encode()))


@pytest.mark.parametrize("unit, metadata_unit, scale, cost_scale", [
    (None, "miliseconds", 1.0, 1.0), (None, None, 1.0, 1.0), ("ms", "seconds", 1.0, 1e-3),
    (None, "seconds", 1e-3, 1e-3), ("us", None, 1e3, 1.0), (None, "nanoseconds", 1e6, 1e6),
], ids=["file-in-ms", "no-unit-is-ms", "measurement-unit-first", "file-in-s", "measurement-in-us", "file-in-ns"])
def test_a_t4_output_file_reads_as_the_cache_of_the_same_space(tmp_path, space_file, unit, metadata_unit, scale,
                                                                cost_scale):
    path = tmp_path / "bowl_T4.json.gz"
    write_t4(path, unit=unit, metadata_unit=metadata_unit, scale=scale, cost_scale=cost_scale)
    space, cache = recorded.load(path), recorded.load(space_file)
    assert space.domains == cache.domains
    assert set(space.results) == set(cache.results)
    for key, result in cache.results.items():
        assert space.results[key].failure == result.failure
        assert space.results[key].seconds == pytest.approx(result.seconds)
        assert space.results[key].cost == pytest.approx(result.cost)


@pytest.mark.parametrize("change, message", [
    (lambda document: document.update(results={}), "its results are not a list"),
    (lambda document: document["results"][0]["measurements"].pop(), "has no measurement named 'time'"),
    (lambda document: document["results"][1]["configuration"].pop("a"), "name different parameters"),
    (lambda document: document["results"][0]["measurements"][1].update(unit="fortnights"),
     "its time unit 'fortnights' is not one of"),
    (lambda document: document["results"][0].pop("invalidity"), "a result lacks 'invalidity'"),
    (lambda document: document.update(metadata={"timeunit": "fortnights"}), "its time unit 'fortnights' is not one of"),
], ids=["results-not-a-list", "no-time", "other-parameters", "unknown-unit", "no-invalidity", "unknown-file-unit"])
def test_a_broken_t4_file_is_refused_in_one_line(tmp_path, change, message):
    path = tmp_path / "bowl_T4.json.gz"
    write_t4(path)
    document = json.loads(gzip.decompress(path.read_bytes()))
    change(document)
    path.write_text(json.dumps(document))
    with pytest.raises(recorded.RecordingError, match=message) as error:
        recorded.load(path)
    assert "\n" not in str(error.value)


def test_a_sweep_file_is_read_in_the_projects_own_parameters(tmp_path):
    header = {"header": {"device": {"backend": "cuda", "name": "Made-up GPU"}, "problem": "float32-64x64x64"}}
    fast, slow, broken = Config(), Config(block_m=32), Config(block_m=16)
    rows = [{"config": fast.as_dict(), "status": "ok", "median_seconds": 1e-3, "times": [1e-3] * 5,
             "compile_seconds": 0.5, "load_seconds": 0.1, "verification_seconds": 0.01},
            {"config": slow.as_dict(), "status": "ok", "median_seconds": 2e-3, "times": [2e-3] * 5,
             "compile_seconds": 0.5, "load_seconds": 0.1, "verification_seconds": 0.01},
            {"config": broken.as_dict(), "status": "wrong", "reason": "C differs", "compile_seconds": 0.5}]
    path = tmp_path / "sweep.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in [header, *rows]) + "\n")
    space = recorded.load(path)
    assert list(space.domains) == list(fast.as_dict())
    assert space.optimum == 1e-3
    assert space.results[tuple(broken.as_dict().values())].failure == "wrong"
    assert space.results[tuple(fast.as_dict().values())].cost == pytest.approx(0.61 + 5e-3)


@pytest.mark.parametrize("dtype", ["float32", "float16-tc"])
def test_a_sweep_file_is_read_in_its_precisions_space(tmp_path, dtype):
    space = Space.of(get_backend("cuda"), dtype)
    header = {"header": {"device": {"backend": "cuda", "name": "Made-up GPU"}, "problem": f"{dtype}-64x64x64"}}
    row = {"config": space.config_type().as_dict(), "status": "ok", "median_seconds": 1e-3, "times": [1e-3]}
    path = tmp_path / "sweep.jsonl"
    path.write_text(json.dumps(header) + "\n" + json.dumps(row) + "\n")
    assert list(recorded.load(path).domains) == list(space.domains())


@pytest.mark.parametrize("content, message", [
    (b"", "not a Kernel Tuner cache file"),
    (b"[1, 2]", "its top level is not an object"),
    (b'{"tune_params_keys": ["a"]}', "it lacks 'tune_params'"),
    (b'{"tune_params_keys": 5, "tune_params": {}, "cache": {}}', "its tune_params_keys must be a list of parameter"),
    (b'{"tune_params_keys": "ab", "tune_params": {}, "cache": {}}', "its tune_params_keys must be a list of parameter"),
    (b'{"tune_params_keys": [1], "tune_params": {}, "cache": {}}', "its tune_params_keys must be a list of parameter"),
    (b'{"tune_params_keys": ["a"], "tune_params": {"a": [1]}, "cache": []}', "its cache must be an object of "
                                                                            "configurations, not a list"),
    (b'{"tune_params_keys": ["a"], "tune_params": {"a": 5}, "cache": {}}',
     "parameter 'a' must take a list of numbers, strings, booleans or nulls, not 5"),
    (b'{"tune_params_keys": ["a"], "tune_params": {"a": "abc"}, "cache": {}}', "parameter 'a' must take a list"),
    (b'{"tune_params_keys": ["a"], "tune_params": {"a": [1, [2], 3]}, "cache": {}}', "parameter 'a' must take a list"),
    (b'{"tune_params_keys": ["a"], "tune_params": {"a": [1, NaN]}, "cache": {}}', "parameter 'a' must take a list"),
    (b'{"schema_version": "1.0.0", "results": [{"configuration": {"a": [1]}, "invalidity": "constraints"}]}',
     "parameter 'a' must take a list"),
    (b"\x1f\x8b not gzip", "neither JSON nor gzipped JSON"),
    (b'{"header": {}}\n', "not a tuner sweep file"),
    (b'{"header": {"device": {"backend": "cuda"}, "problem": "float32-8x8x8"}}\n', "not a tuner sweep file"),
    (b'{"header": {"device": {"backend": "cuda", "name": "x"}, "problem": 5}}\n', "not a tuner sweep file"),
    (b'{"header": {}}\n{}\ngarbage\n', "line 3 is not JSON .Expecting value.; not a tuner sweep file"),
])
def test_a_file_that_is_not_a_recording_is_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(recorded.RecordingError, match=message) as error:
        recorded.load(path)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("seconds", ["abc", 0, -1.0, float("nan"), True])
def test_a_sweep_row_without_a_positive_time_is_refused_by_its_line(tmp_path, seconds):
    header = {"header": {"device": {"backend": "cuda", "name": "Made-up GPU"}, "problem": "float32-64x64x64"}}
    row = {"config": Config().as_dict(), "status": "ok", "median_seconds": seconds, "times": [1e-3]}
    path = tmp_path / "sweep.jsonl"
    path.write_text(json.dumps(header) + "\n\n" + json.dumps(row) + "\n")  # the blank line counts
    with pytest.raises(recorded.RecordingError, match=r"^\S+: line 3: median_seconds must be a positive number of "
                                                      r"seconds, not"):
        recorded.load(path)


def test_a_kernel_tuner_file_naming_a_parameter_twice_or_a_time_that_rounds_to_zero_is_refused(tmp_path):
    path = tmp_path / "twice.json"
    path.write_text(json.dumps({"tune_params_keys": ["a", "a"], "tune_params": {"a": [1]}, "cache": {}}))
    with pytest.raises(recorded.RecordingError, match=r"its tune_params_keys name a parameter twice: \['a', 'a'\]"):
        recorded.load(path)
    path.write_text(json.dumps({"tune_params_keys": ["a"], "tune_params": {"a": [1, 2]},
                                "cache": {"1": {"a": 1, "time": 5e-324}, "2": {"a": 2, "time": 1.0}}}))
    space = recorded.load(path)
    assert space.optimum == 1e-3 and space.results[(1,)].seconds is None


def test_a_file_too_large_to_replay_names_what_to_replay_instead(tmp_path, monkeypatch):
    monkeypatch.setattr(recorded, "MAX_BYTES", 100)
    path = tmp_path / "export.json.gz"
    path.write_bytes(gzip.compress(b" " * 200))
    with pytest.raises(recorded.RecordingError, match="for a tuner sweep, replay its .jsonl file"):
        recorded.load(path)


def test_a_broken_sweep_file_is_refused_as_a_sweep_file(tmp_path):
    path = tmp_path / "sweep.jsonl"
    path.write_text('not json\n')
    with pytest.raises(recorded.RecordingError, match="not a tuner sweep file"):
        recorded.load(path)


def test_configurations_outside_the_domains_are_left_out_and_numeric_domains_are_ordered(tmp_path):
    path = tmp_path / "odd.json"
    fast = {"a": 4, "b": "x", "time": 1.0}  # a=4 is not in a's domain: no search could suggest it
    document = {"tune_params_keys": ["a", "b"], "tune_params": {"a": [2, 1], "b": ["y", "x"]},
                "cache": {"1,y": {"a": 1, "b": "y", "time": 3.0}, "2,x": {"a": 2, "b": "x", "time": 2.0}, "4,x": fast}}
    path.write_text(json.dumps(document))
    space = recorded.load(path)
    assert space.left_out == 1 and space.optimum == 2e-3
    assert space.domains == {"a": (1, 2), "b": ("y", "x")}


def test_a_sweep_cut_off_mid_line_is_read_up_to_its_last_whole_line(tmp_path):
    header = {"header": {"device": {"backend": "cuda", "name": "Made-up GPU"}, "problem": "float32-64x64x64"}}
    row = {"config": Config().as_dict(), "status": "ok", "median_seconds": 1e-3, "times": [1e-3]}
    path = tmp_path / "sweep.jsonl"
    path.write_text(json.dumps(header) + "\n" + json.dumps(row) + "\n" + json.dumps(row)[:40])
    assert len(recorded.load(path).results) == 1
    path.write_text(json.dumps(header) + "\n" + json.dumps(row) + "\n   ")  # a whole last row, then spaces
    assert len(recorded.load(path).results) == 1


def _new_valid_suggestions(study, space, trials: int) -> list:
    """The configurations `study` suggests in `trials` asks, each checked to be valid in the recorded
    `space` and new, and answered with its recorded speed."""
    seen = []
    for _ in range(trials):
        trial = study.ask()
        key = tuple(suggest(trial, DOMAINS).values())
        assert key in space.results and key not in seen
        seen.append(key)
        answer(study, trial, "measured", 1.0 / (space.results[key].seconds or float("inf")), 0.0)
    return seen


def test_the_local_search_suggests_only_new_valid_configurations_and_finds_the_optimum(space_file):
    space = recorded.load(space_file)
    for seed in range(5):
        study = optuna.create_study(direction="maximize", sampler=LocalSearchSampler(
            DOMAINS, lambda values: values in space.results, seed, Options(tpe_first=0)))  # TPE's turn: below
        seen = _new_valid_suggestions(study, space, 60)
        # Random search would find it within 60 of the 432 valid configurations one time in seven.
        assert BEST in seen, f"seed {seed}"


@pytest.mark.parametrize("moves", [{"global_share": 1.0}, {"global_share": 0.0, "wide_share": 1.0}, {"gp_share": 1.0}],
                         ids=["global", "wide local", "gaussian process"])
def test_each_kind_of_move_alone_finds_the_optimum_without_repeating_or_leaving_the_valid_space(space_file, moves):
    space = recorded.load(space_file)
    for seed in range(5):
        run = replay(space, 60, "local", seed, options=Options(**moves))
        assert len(run.best_seconds) == 60  # the replay counts only new recorded configurations
        # Random search would find the optimum within 60 of the 432 valid configurations one time in seven.
        assert run.fraction(space.optimum) == 1.0, f"seed {seed}"


def test_expected_improvement_favours_the_best_region_and_depends_only_on_the_order_of_the_values():
    points = np.array([[0.0], [0.25], [0.5], [0.75], [1.0]])
    values = np.array([-5.0, -3.0, -2.0, -1.0, -4.0])  # best at 0.75
    candidates = np.array([[0.1], [0.625], [0.875]])
    improvement = expected_improvement(points, values, candidates, length=0.5)
    assert improvement[0] < min(improvement[1:])
    # Normal scores of the ranks: a run a hundred times slower than the rest changes nothing.
    np.testing.assert_allclose(expected_improvement(points, values * [100, 1, 1, 1, 1], candidates, length=0.5),
                               improvement)


def test_a_gaussian_process_move_is_fitted_to_at_most_gp_points_of_the_best_that_succeeded(space_file, monkeypatch):
    space = recorded.load(space_file)
    sampler = LocalSearchSampler(DOMAINS, lambda values: values in space.results, 0, Options(gp_points=3))
    ranked = np.array([(4, 2, 1, 2), (0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 0, 1)])  # best first
    assert sampler._gaussian_process(ranked[:3], np.array([-1.0, -2.0, -np.inf]), set()) == []
    fitted = []
    monkeypatch.setattr("tuner.sampler.expected_improvement",
                        lambda points, *rest: fitted.append(len(points)) or expected_improvement(points, *rest))
    (suggestion,) = sampler._gaussian_process(ranked, np.array([-1.0, -2.0, -3.0, -4.0]), set(map(tuple, ranked)))
    assert fitted == [3] and sampler.grid.valid(suggestion) and suggestion not in set(map(tuple, ranked))


def test_a_wide_neighbour_differs_in_one_parameter_by_any_value_and_a_near_one_by_one_step(space_file):
    space = recorded.load(space_file)
    grid = LocalSearchSampler(DOMAINS, lambda values: values in space.results, 0).grid
    point = (4, 2, 1, 2)  # positions of (16, 4, 1, 32)
    positions = [range(len(domain)) for domain in DOMAINS.values()]
    differ = {other: [abs(a - b) for a, b in zip(point, other) if a != b] for other in itertools.product(*positions)
              if grid.valid(other)}
    assert set(grid.neighbours(point, wide=True)) == {other for other, steps in differ.items() if len(steps) == 1}
    assert set(grid.neighbours(point, wide=False)) == {other for other, steps in differ.items() if steps == [1]}


@pytest.mark.parametrize("doubling", [True, False])
def test_a_near_neighbour_may_double_or_halve_a_numeric_value_when_doubling_is_on(doubling):
    domains = {"x": (16, 32, 48, 64, 96), "flag": (0, 1)}
    point = (1, 0)  # positions of (32, 0): doubling adds 64, whose position is 3
    one_step = {(0, 0), (2, 0), (1, 1)}
    sampler = LocalSearchSampler(domains, lambda values: True, 0, Options(doubling=doubling))
    assert set(sampler._neighbourhood(np.array([point]), set(), wide=False)) == (
        one_step | {(3, 0)} if doubling else one_step)


def test_tpe_moves_suggest_only_new_valid_configurations(space_file, monkeypatch):
    space = recorded.load(space_file)
    sampler = LocalSearchSampler(DOMAINS, lambda values: values in space.results, 0,
                                 Options(tpe_first=0, tpe_share=1.0))
    proposals, tpe = [], sampler._tpe
    monkeypatch.setattr(sampler, "_tpe", lambda *args: proposals.append(tpe(*args)) or proposals[-1])
    study = optuna.create_study(direction="maximize", sampler=sampler)
    _new_valid_suggestions(study, space, 60)
    taken = [proposal for proposal in proposals if proposal is not None]
    assert len(proposals) == 60 - sampler.options.startup and len(taken) > len(proposals) / 2


def test_tpe_chooses_until_tpe_first_are_measured_and_then_only_new_valid_configurations_follow(space_file,
                                                                                                monkeypatch):
    space = recorded.load(space_file)
    sampler = LocalSearchSampler(DOMAINS, lambda values: values in space.results, 0, Options(tpe_first=20))
    tpe, asked_tpe = sampler._tpe_sampler(), []
    original = tpe.sample_relative
    monkeypatch.setattr(tpe, "sample_relative", lambda study, trial, search_space: asked_tpe.append(trial.number)
                        or original(study, trial, search_space))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    measured, unmeasured, measured_before = [], 0, {}
    while len(measured) < 60:
        trial = study.ask()
        measured_before[trial.number] = len(measured)
        key = tuple(suggest(trial, DOMAINS).values())
        speed = 1.0 / (space.results[key].seconds or float("inf")) if key in space.results else 0.0
        if key not in space.results or key in measured:  # free, as in a search: never measured
            assert len(measured) < 20, "after TPE's turn, only new valid configurations"
            if key in measured:
                answer(study, trial, "duplicate", speed, 0.0 if speed else 1.0)
            else:
                answer(study, trial, "invalid", 0.0, 1.0)
            unmeasured += 1
            continue
        measured.append(key)
        answer(study, trial, "measured", speed, 0.0 if speed else 1.0)
    assert asked_tpe == [number for number, before in measured_before.items() if before < 20]
    assert unmeasured > 0  # TPE's own start and proposals are taken as they are, invalid ones included


def test_gaussian_process_moves_in_tpe_turn_follow_its_random_start_and_suggest_only_new_valid_ones(space_file,
                                                                                                  monkeypatch):
    space = recorded.load(space_file)
    sampler = LocalSearchSampler(DOMAINS, lambda values: values in space.results, 0, Options(turn_gp_share=1.0))
    evaluated_then, gaussian = [], sampler._gaussian_process
    monkeypatch.setattr(sampler, "_gaussian_process", lambda ranked, values, seen: evaluated_then.append(len(ranked))
                        or gaussian(ranked, values, seen))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    seen, moves = [], 0
    for _ in range(40):
        calls = len(evaluated_then)
        trial = study.ask()
        key = tuple(suggest(trial, DOMAINS).values())
        if len(evaluated_then) > calls:  # a Gaussian-process move
            assert key in space.results and key not in seen
            moves += 1
        if key not in space.results or key in seen:  # TPE's random start may propose these
            answer(study, trial, "invalid" if key not in space.results else "duplicate", 0.0, 1.0)
            continue
        seen.append(key)
        answer(study, trial, "measured", 1.0 / (space.results[key].seconds or float("inf")), 0.0)
    assert min(evaluated_then) >= sampler.options.startup and moves >= 25


def test_gaussian_process_moves_after_a_stall_stop_at_a_better_configuration(space_file, monkeypatch):
    space = recorded.load(space_file)
    sampler = LocalSearchSampler(DOMAINS, lambda values: values in space.results, 0,
                                 Options(tpe_first=0, stalled_after=3, stalled_gp_share=1.0))
    gaussian, calls = sampler._gaussian_process, []
    monkeypatch.setattr(sampler, "_gaussian_process", lambda *args: calls.append(None) or gaussian(*args))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    moved = []
    for count in range(24):
        before = len(calls)
        trial = study.ask()
        assert tuple(suggest(trial, DOMAINS).values()) in space.results
        moved.append(len(calls) > before)
        answer(study, trial, "measured", {0: 100.0, 15: 200.0}.get(count, 1.0), 0.0)
    # The first is best until the 16th (a Gaussian-process move): stalled from the random start's
    # end, then again three measurements after the 16th.
    assert [count for count, move in enumerate(moved) if move] == [*range(sampler.options.startup, 16), *range(19, 24)]


def test_the_local_search_skips_what_other_workers_run_and_what_is_queued(space_file):
    space = recorded.load(space_file)
    sampler = LocalSearchSampler(DOMAINS, lambda values: values in space.results, 0, Options(tpe_first=0))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(12):
        trial = study.ask()
        seconds = space.results[tuple(suggest(trial, DOMAINS).values())].seconds
        answer(study, trial, "measured", 1.0 / seconds if seconds else 0.0, 0.0)
    search_space = sampler.infer_relative_search_space(study, None)

    def next_suggestion():
        return copy.deepcopy(sampler).sample_relative(study, None, search_space)

    running = next_suggestion()
    study.enqueue_trial(running)
    suggest(study.ask(), DOMAINS)  # another worker takes it: running, not complete
    assert next_suggestion() != running
    queued = next_suggestion()
    study.enqueue_trial(queued)
    assert next_suggestion() not in (running, queued)


def test_the_local_search_neither_learns_from_nor_skips_a_trial_the_search_does_not_count():
    """A search's doubted measurement (a forged rate in its journal) steers no move, and its
    configuration may be suggested, and measured, again."""
    domains = {"a": [1, 2, 3, 4]}
    sampler = LocalSearchSampler(domains, lambda values: True, 0, Options(startup=1, tpe_first=0, global_share=0,
                                                                          wide_share=0),
                                 counts=lambda trial: not trial.user_attrs.get("forged"))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for a, value, forged in ((1, 1.0, False), (2, 9e9, True)):
        study.enqueue_trial({"a": a})
        trial = study.ask()
        suggest(trial, domains)
        answer(study, trial, "measured", value, 0.0, forged=forged)
    assert sampler.sample_relative(study, None, sampler.infer_relative_search_space(study, None)) == {"a": 2}


def test_a_replay_counts_measured_configurations_only_and_charges_their_recorded_cost(space_file):
    space = recorded.load(space_file)
    for sampler in ("local", "tpe", "random"):
        run = replay(space, 40, sampler, seed=1)
        assert len(run.best_seconds) == 40
        assert run.best_seconds == sorted(run.best_seconds, reverse=True)
        assert run.cost_seconds == pytest.approx(40 * 0.6)
        assert 0 < run.fraction(space.optimum) <= 1


def test_a_replay_measures_its_starts_first_each_recorded_one_once_and_counts_them(space_file, monkeypatch):
    """As the warm start of `tuner search`: the queued configurations are measured before any
    suggestion, in order, and count as evaluations; one not recorded is left out, a repeat queued once."""
    space = recorded.load(space_file)
    measured = []
    monkeypatch.setattr("tuner.replay.answer", lambda study, trial, kind, *rest: (
        measured.append(tuple(trial.params[name] for name in DOMAINS)) if kind == "measured" else None)
        or answer(study, trial, kind, *rest))
    far, failed, unrecorded = (1, 1, 0, 8), (128, 1, 0, 64), (128, 128, 0, 8)
    assert space.results[failed].seconds is None and unrecorded not in space.results
    starts = [far, unrecorded, failed, BEST, far]
    for sampler in ("local", "tpe"):
        measured.clear()
        run = replay(space, 20, sampler, seed=3, starts=starts)
        assert measured[:3] == [far, failed, BEST] and len(set(measured)) == len(measured) == 20
        assert run.best_seconds[:3] == [space.results[far].seconds] * 2 + [space.optimum]
        assert run.fraction(space.optimum, 3) == 1.0
    cold = replay(space, 20, "local", seed=3)
    assert replay(space, 20, "local", seed=3, starts=()).best_seconds == cold.best_seconds
    assert cold.fraction(space.optimum, 3) < 1.0


def test_a_replay_stops_when_the_space_is_exhausted(space_file):
    space = recorded.load(space_file)
    run = replay(space, 10_000, "local", seed=0)
    assert len(run.best_seconds) == len(space.results)
    assert run.fraction(space.optimum) == 1.0
    assert run.evaluations_to(space.optimum * 1.2) < run.evaluations_to(space.optimum) <= len(space.results)


def test_a_replay_asks_nothing_more_once_every_recorded_configuration_is_measured(tmp_path, monkeypatch):
    """A partial recording holds a few configurations of a larger product: past them, every
    suggestion would be invalid, and the search would ask hundreds more before giving up."""
    cache = {f"{a},{b}": {"a": a, "b": b, "time": float(a + b)} for a, b in ((1, 1), (5, 7), (9, 3))}
    path = tmp_path / "partial.json"
    path.write_text(json.dumps({"tune_params_keys": ["a", "b"], "tune_params": {"a": list(range(1, 11)),
                                                                               "b": list(range(1, 11))},
                                "cache": cache}))
    told = []
    monkeypatch.setattr("tuner.replay.answer", lambda study, trial, kind, *rest: told.append(kind)
                        or answer(study, trial, kind, *rest))
    run = replay(recorded.load(path), 10, "local", seed=0)
    assert len(run.best_seconds) == 3 and told[-1] == "measured"


def test_tpes_turn_ends_early_on_a_sparse_recording_where_its_proposals_are_all_invalid(tmp_path, monkeypatch):
    """A recording of 60 configurations of a product of 262,144, as a Kernel Tuner run with a
    search strategy leaves: TPE cannot learn which combinations are recorded, so each measured
    configuration of its turn would cost `stall` invalid proposals, each a fit over the study."""
    domains = {name: list(range(8)) for name in "abcdef"}
    rows = {tuple(int(value) for value in row) for row in np.random.default_rng(0).integers(8, size=(60, 6))}
    cache = {",".join(map(str, row)): {**dict(zip(domains, row)), "time": 1.0 + sum(row)} for row in rows}
    path = tmp_path / "sparse.json"
    path.write_text(json.dumps({"tune_params_keys": list(domains), "tune_params": domains, "cache": cache}))
    told = []
    monkeypatch.setattr("tuner.replay.answer", lambda study, trial, kind, *rest: told.append(kind)
                        or answer(study, trial, kind, *rest))
    options = Options()
    run = replay(recorded.load(path), 40, "local", seed=0, options=options)
    unmeasured = len(told) - told.count("measured")
    assert len(run.best_seconds) == 40 and options.stall <= unmeasured
    assert unmeasured <= options.turn_waste * options.startup + options.stall


def test_tpes_turn_runs_its_course_where_its_proposals_are_mostly_valid(space_file):
    space = recorded.load(space_file)
    for seed in range(3):
        assert (replay(space, 60, "local", seed).best_seconds
                == replay(space, 60, "local", seed, options=Options(turn_waste=float("inf"))).best_seconds)


def test_summaries_are_reproducible_and_the_default_beats_random_search(space_file):
    space = recorded.load(space_file)
    local = summarize(space, 30, 6, "local").as_dict()
    assert local == summarize(space, 30, 6, "local").as_dict()
    random = summarize(space, 30, 6, "random").as_dict()
    assert local["fraction_of_optimum"]["mean"] > random["fraction_of_optimum"]["mean"]


def test_tuner_replay_prints_the_fraction_of_the_optimum(space_file, capsys):
    assert main(["replay", str(space_file), "--trials", "30", "--repeat", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["repeats"] == 3 and result["trials"] == 30 and result["sampler"] == "local"
    assert 0 < result["fraction_of_optimum"]["min"] <= result["fraction_of_optimum"]["mean"] <= 1
    assert main(["replay", str(space_file), "--trials", "30", "--repeat", "2", "--sampler", "random"]) == 0
    out = capsys.readouterr().out
    assert "random, 2 searches of up to 30 evaluations (seeds" in out and "fraction of the optimum found: mean" in out
    assert main(["replay", str(space_file), "--trials", "1000", "--repeat", "1"]) == 0
    assert "1 search of up to 1,000 evaluations, 432 on average: the space ran out" in capsys.readouterr().out


def test_tuner_replay_says_one_search_of_one_evaluation_in_the_singular(space_file, capsys):
    assert main(["replay", str(space_file), "--trials", "1", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "local, 1 search of up to 1 evaluation (seeds 0..0)" in out
    assert re.search(r"the optimum: (0 of 1 search, never|1 of 1 search, median 1 evaluation); ", out), out


def test_tuner_replay_refuses_a_missing_file_in_one_line(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "missing.json.gz")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "cannot be read" in error and "Traceback" not in error


@pytest.mark.parametrize("sampler", ["local", "tpe"])
def test_a_replay_with_trials_pending_measures_each_configuration_once(space_file, sampler, monkeypatch):
    space = recorded.load(space_file)
    told = []
    monkeypatch.setattr("tuner.replay.answer", lambda study, trial, kind, *rest: told.append(
        (kind, json.dumps(trial.params, sort_keys=True))) or answer(study, trial, kind, *rest))
    run = replay(space, 40, sampler, seed=2, pending=8)
    measured = [key for kind, key in told if kind == "measured"]
    assert len(run.best_seconds) == 40 == len(measured) == len(set(measured))
    assert 0 < run.fraction(space.optimum) <= 1
    assert replay(space, 40, sampler, seed=2, pending=0).best_seconds != run.best_seconds  # pending changes the search


@pytest.mark.parametrize("sampler", ["random", "local"])
def test_a_replay_holds_at_most_its_trials_less_one_pending(space_file, sampler, monkeypatch):
    """A search measures the first of its budget's suggestions once it holds them all, and never
    those it asked past them: more pending change nothing, and were asked for until the space ran
    out (minutes on a large one)."""
    space = recorded.load(space_file)
    asked = []
    monkeypatch.setattr("tuner.replay.suggest", lambda trial, domains: asked.append(1) or suggest(trial, domains))

    def run(pending):
        asked.clear()
        return replay(space, 10, sampler, seed=0, pending=pending).best_seconds, len(asked)

    assert run(100_000) == run(9)


def test_a_replay_of_more_trials_than_the_space_holds_measures_those_pending_when_the_sampler_runs_out(space_file):
    """Past the 500 unmeasured suggestions after which a search stops, and past the valid
    configurations: those held are measured in turn once the sampler has nothing new."""
    space = recorded.load(space_file)
    run = replay(space, 1000, "random", seed=0, pending=100_000)
    assert len(space.results) >= len(run.best_seconds) > 400 and run.fraction(space.optimum) == 1


def test_tpes_turn_on_the_projects_space_is_never_stuck_on_invalid_suggestions():
    """1.5% of the float32 space's product is valid: a random start drawn from the whole product
    was invalid for 663 suggestions in a row (seed 0), past the 500 after which a search stops
    (bench/results/search_efficiency/tpe_turn_first_version/unguarded_start.txt)."""
    import numpy as np

    from tuner.backends import CUDA
    from tuner.space import Space
    from tuner.trials import MAX_UNMEASURED_IN_A_ROW

    space = Space.of(CUDA, "float32")
    domains = space.domains()

    def valid(values: tuple) -> bool:
        return not space.violations(space.config_type(**dict(zip(domains, values))))

    values = np.random.default_rng(0)
    for seed in range(3):
        study = optuna.create_study(direction="maximize",
                                    sampler=LocalSearchSampler(domains, valid, seed, Options(tpe_first=50)))
        measured, in_a_row, longest = {}, 0, 0
        while len(measured) < 50:
            trial = study.ask()
            key = tuple(suggest(trial, domains).values())
            if valid(key) and key not in measured:
                measured[key], in_a_row = float(values.random()), 0
                answer(study, trial, "measured", measured[key], 0.0)
            else:
                in_a_row += 1
                longest = max(longest, in_a_row)
                answer(study, trial, *(("duplicate", measured[key], 0.0) if key in measured else ("invalid", 0.0, 1.0)))
        assert longest < MAX_UNMEASURED_IN_A_ROW // 5, f"seed {seed}"


@pytest.mark.parametrize("arguments, message", [
    (["--seed", "99999999999"], "argument --seed: must be a whole number from 0 to 4294967295, not 99999999999"),
    (["--pending", "1.5"], "argument --pending: must be a whole number, 0 or more, not '1.5'"),
])
def test_tuner_replay_names_a_bad_option_in_one_line(space_file, capsys, arguments, message):
    with pytest.raises(SystemExit) as exit:
        main(["replay", str(space_file), *arguments])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and message in err and err.count("\n") == 1, err


def test_tuner_replay_refuses_seeds_past_the_last_before_searching(space_file, capsys):
    assert main(["replay", str(space_file), "--seed", "4294967295", "--repeat", "2"]) == 2
    err = capsys.readouterr().err
    assert "choose a smaller --seed" in err and err.count("\n") == 1, err


def test_an_interrupted_replay_says_that_nothing_is_kept(space_file, capsys, monkeypatch):
    def interrupted(*arguments):
        raise KeyboardInterrupt

    monkeypatch.setattr("tuner.replay.summarize", interrupted)
    assert main(["replay", str(space_file)]) == 130
    assert capsys.readouterr().err == ("tuner replay: interrupted; nothing is kept, since the summary needs every "
                                       "search; a smaller --repeat or --trials ends sooner\n")


def test_a_failed_t4_result_needs_no_measurement(tmp_path, space_file):
    path = tmp_path / "bowl_T4.json.gz"
    write_t4(path)
    document = json.loads(gzip.decompress(path.read_bytes()))
    for result in document["results"]:
        if result["invalidity"] != "correct":
            del result["measurements"]
    path.write_text(json.dumps(document))
    space, cache = recorded.load(path), recorded.load(space_file)
    assert {key: (result.seconds, result.failure) for key, result in space.results.items()} == {
        key: (result.seconds, result.failure) for key, result in cache.results.items()}
