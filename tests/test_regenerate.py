"""tuner regenerate after a simulated template change (re-verify) and for a new GPU (re-tune)."""
import contextlib
import dataclasses
import json
import sys
import warnings
from pathlib import Path

import pytest
from processes import died_measuring, run_at_once
from records import H100, make_record

import tuner
import tuner.backends
from tuner import cache
from tuner.cli import main
from tuner.config import Config
from tuner.devices import Device
from tuner.problem import Problem
from tuner.simulator import describe as describe_simulator

HERE = describe_simulator("cuda")
OLD_TEMPLATES = dataclasses.replace(HERE, software={**HERE.software, "templates": "0ld"})
# The simulator runs a Python thread per GPU thread, so the configurations the tests record take 64
# threads a block (the default takes 256: four times the time), and no unrolled k-loop or prefetch
# (compile workers take a third less time over them).
SMALL = Config(block_m=16, block_n=16, thread_m=2, thread_n=2, unroll_k=1, prefetch=False)
RUNNER_UP = Config(block_m=16, block_n=16, block_k=8, thread_m=2, thread_n=2, unroll_k=1, prefetch=False)
ELONGATED = Config(block_m=64, block_n=64, thread_m=8, thread_n=2)  # against a heuristic added "since"
TOO_MANY_THREADS = Config(block_m=128, block_n=128, thread_m=1, thread_n=1)  # against a hard rule
PROBLEM = Problem(16, 16, 16)


@pytest.fixture(autouse=True)
def fresh_library():
    tuner.reload()
    yield
    tuner.reload()


def _regenerate(root, *extra) -> int:
    return main(["regenerate", "--simulate", "--cache-dir", str(root), *extra])


def _here(root):
    return cache.read_record(cache.record_path(root, HERE.slug, PROBLEM.key))


def _measured(root, problem: Problem = PROBLEM) -> list:
    """The measured trials of the simulator's study of `problem`."""
    from tuner.runtime import open_runtime
    from tuner.search import Search

    study = Search(open_runtime(tuner.backends.CUDA, simulate=True), problem, root=root).study
    return [trial for trial in study.trials if trial.user_attrs.get("kind") == "measured"]


def test_a_template_change_re_renders_and_re_verifies_the_cached_configurations(tmp_path, capsys):
    cache.write_record(cache.record_path(tmp_path, OLD_TEMPLATES.slug, PROBLEM.key),
                       make_record(OLD_TEMPLATES, PROBLEM, [(SMALL, 2.0), (ELONGATED, 1.5), (RUNNER_UP, 1.0)]))
    assert _regenerate(tmp_path) == 0
    out, err = capsys.readouterr()
    assert f"software: templates 0ld -> {HERE.software['templates']}" in out
    assert "float32-16x16x16: re-verified" in out and "1 re-verified" in out
    assert f"{ELONGATED.describe()}: no longer valid: the 8x2 register tile is elongated" in out
    assert f"{SMALL.describe()}: 2 GFLOP/s (simulated) -> " in out
    record = _here(tmp_path)
    assert {entry.config for entry in record.ranked} == {SMALL, RUNNER_UP}
    assert record.budget.measured == 2
    assert tuner.get_kernel(16, 16, 16, cache_dir=tmp_path).tuned

    assert _regenerate(tmp_path) == 0  # now current: nothing is measured again
    assert "float32-16x16x16: current" in capsys.readouterr().out
    assert _here(tmp_path).budget.measured == 2


def test_a_new_gpu_re_tunes_each_known_shape_warm_started_from_the_others(tmp_path, capsys):
    cache.write_record(cache.record_path(tmp_path, H100.slug, PROBLEM.key), make_record(H100, PROBLEM, [(SMALL, 9e3)]))
    roc = dataclasses.replace(H100, backend="roc", name="AMD Instinct MI300X", arch="gfx942")
    cache.write_record(cache.record_path(tmp_path, roc.slug, "float32-8x8x8"),
                       make_record(roc, Problem(8, 8, 8), [(SMALL, 9e3)]))
    assert _regenerate(tmp_path, "--trials", "2") == 0
    out, err = capsys.readouterr()
    assert "re-tuning (2 variants), tuned before on NVIDIA H100 80GB HBM3" in err
    assert "float32-16x16x16: re-tuned" in out and "before: 9,000 GFLOP/s on NVIDIA H100" in out
    assert "8x8x8" not in out  # a roc record says nothing about a cuda device
    record = _here(tmp_path)
    assert record.budget.measured == 2
    measured = {entry.config for entry in record.ranked}
    assert SMALL in measured  # the other GPU's best was tried first


def test_of_two_records_of_this_gpu_model_the_newest_is_re_verified(tmp_path, capsys):
    older = dataclasses.replace(HERE, software={**HERE.software, "templates": "older"})
    cache.write_record(cache.record_path(tmp_path, older.slug, PROBLEM.key),
                       make_record(older, PROBLEM, [(Config(), 1.0)], finished="2025-01-01T00:00:00+00:00"))
    cache.write_record(cache.record_path(tmp_path, OLD_TEMPLATES.slug, PROBLEM.key),
                       make_record(OLD_TEMPLATES, PROBLEM, [(SMALL, 2.0)]))
    assert _regenerate(tmp_path) == 0
    out = capsys.readouterr().out
    assert f"software: templates 0ld -> {HERE.software['templates']}" in out and "templates older" not in out
    assert {entry.config for entry in _here(tmp_path).ranked} == {SMALL}


def test_a_product_whose_configurations_all_fail_verification_now_is_re_tuned(tmp_path, capsys, monkeypatch):
    import tuner.measure

    verify = tuner.measure.verify
    monkeypatch.setattr(tuner.measure, "verify", lambda runtime, kernel, operands, tolerance: (
        (1.0, "planted") if kernel.config == SMALL else verify(runtime, kernel, operands, tolerance)))
    cache.write_record(cache.record_path(tmp_path, OLD_TEMPLATES.slug, PROBLEM.key),
                       make_record(OLD_TEMPLATES, PROBLEM, [(SMALL, 2.0)]))
    assert _regenerate(tmp_path, "--trials", "2") == 0
    out = capsys.readouterr().out
    assert "float32-16x16x16: re-tuned" in out and "fails now (wrong: planted)" in out and "none passes now" in out
    assert SMALL not in {entry.config for entry in _here(tmp_path).ranked}


def test_nothing_to_regenerate_is_said_plainly(tmp_path, capsys):
    assert _regenerate(tmp_path) == 0
    assert "nothing to regenerate (run tuner search first)" in capsys.readouterr().out


def _ship(monkeypatch, tmp_path, device: Device, problem: Problem) -> None:
    """Ship a record of `problem` tuned on `device`, as cache/records does."""
    shipped = tmp_path / "shipped"
    cache.write_record(cache.record_path(shipped, device.slug, problem.key),
                       make_record(device, problem, [(SMALL, 9e3)]))
    monkeypatch.setattr("tuner.cache.shipped_dir", lambda: shipped)


def test_products_shipped_for_another_gpu_model_are_not_regenerated_here(tmp_path, capsys, monkeypatch):
    """They are tuner search's to tune here, if wanted: regenerate would otherwise start a full
    search for each on every other GPU. The user's own products of other GPUs are re-tuned."""
    _ship(monkeypatch, tmp_path, H100, PROBLEM)
    assert _regenerate(tmp_path / "cache") == 0
    out, err = capsys.readouterr()
    assert "nothing to regenerate" in out and "16x16x16" not in out
    assert "the cache" in err and "does not exist: only the records shipped for this GPU model" in err


def test_a_product_shipped_for_this_gpu_model_under_other_software_is_re_verified(tmp_path, capsys, monkeypatch):
    _ship(monkeypatch, tmp_path, OLD_TEMPLATES, PROBLEM)
    assert _regenerate(tmp_path / "cache") == 0
    assert "float32-16x16x16: re-verified" in capsys.readouterr().out


def test_a_precision_the_device_lacks_is_skipped(tmp_path, capsys, monkeypatch):
    from tuner.runtime import Runtime

    monkeypatch.setattr(Runtime, "lacks", lambda self, precision: f"{precision.name} needs tensor cores")
    cache.write_record(cache.record_path(tmp_path, H100.slug, PROBLEM.key), make_record(H100, PROBLEM, [(SMALL, 9e3)]))
    assert _regenerate(tmp_path) == 0
    out = capsys.readouterr().out
    assert "float32-16x16x16: skipped\n  float32 needs tensor cores" in out and "re-tuned" not in out


def test_a_re_tune_stopped_halfway_is_finished_by_the_next_run_not_started_again(tmp_path, capsys, monkeypatch):
    """Its budget is the study's measured variants when it began plus --trials, kept in the study. With
    --trials 3 the warm start measures all three (the other GPU's best, the default and the seed):
    started again, the second run would measure 3 more, not the 1 left."""
    import tuner.search

    cache.write_record(cache.record_path(tmp_path, H100.slug, PROBLEM.key), make_record(H100, PROBLEM, [(SMALL, 9e3)]))
    run = tuner.search.Search.run

    def stopped_after_two(search, trials, timeout, *arguments, budget=None, **keywords):
        outcome = run(search, 2, timeout, *arguments, budget=budget, **keywords)
        outcome.interrupted = True  # as Ctrl-C after the second variant
        return outcome

    monkeypatch.setattr(tuner.search.Search, "run", stopped_after_two)
    assert _regenerate(tmp_path, "--trials", "3") == 130
    monkeypatch.setattr(tuner.search.Search, "run", run)
    assert _regenerate(tmp_path, "--trials", "3") == 0
    out, err = capsys.readouterr()
    assert "tuned before on NVIDIA H100 80GB HBM3\n" in err and "on Numba CUDA simulator" not in err
    assert "float32-16x16x16: re-tuned" in out and "after 3 variants (before: 9,000 GFLOP/s on NVIDIA H100" in out
    assert _here(tmp_path).budget.measured == 3


@pytest.mark.parametrize("arguments, message", [
    (["--trials", "0"], "must be a whole number, at least 1, not 0"),
    (["--backend", "metal"], "invalid choice: 'metal'"),
])
def test_bad_arguments_are_one_line(tmp_path, capsys, arguments, message):
    with pytest.raises(SystemExit) as exit:
        _regenerate(tmp_path, *arguments)
    assert exit.value.code == 2 and message in capsys.readouterr().err


def test_configurations_left_queued_by_an_interrupted_run_are_still_re_verified(tmp_path, capsys):
    from tuner.runtime import open_runtime
    from tuner.search import Search

    cache.write_record(cache.record_path(tmp_path, OLD_TEMPLATES.slug, PROBLEM.key),
                       make_record(OLD_TEMPLATES, PROBLEM, [(SMALL, 2.0), (Config(), 1.0)]))
    interrupted = Search(open_runtime(tuner.backends.CUDA, simulate=True), PROBLEM, root=tmp_path)
    interrupted.warm_start()  # queued, never run: what a Ctrl-C during the warm start leaves
    assert interrupted.queued() >= 2
    assert _regenerate(tmp_path) == 0
    out = capsys.readouterr().out
    assert "float32-16x16x16: re-verified" in out and "not measured" not in out


@pytest.mark.filterwarnings("ignore::tuner.UntunedWarning")
def test_a_current_record_with_no_valid_configuration_is_re_tuned(tmp_path, capsys):
    cache.write_record(cache.record_path(tmp_path, HERE.slug, PROBLEM.key),
                       make_record(HERE, PROBLEM, [(TOO_MANY_THREADS, 2.0)]))
    with pytest.warns(tuner.SkippedRecordWarning, match="run: tuner regenerate --backend cuda --simulate"):
        assert not tuner.get_kernel(16, 16, 16, cache_dir=tmp_path).tuned
    with pytest.warns(UserWarning, match="this study's record of float32-16x16x16 replaces the cache record"):
        assert _regenerate(tmp_path, "--trials", "1") == 0
    out = capsys.readouterr().out
    assert "float32-16x16x16: re-tuned" in out and "no longer valid in this version of tuner" in out


def test_a_product_whose_study_already_measured_the_configurations_gets_its_record_back(tmp_path, capsys):
    assert main(["search", "--backend", "cuda", "--simulate", "--shape", "16", "16", "16", "--trials", "1",
                 "--cache-dir", str(tmp_path)]) == 0
    searched = cache.record_path(tmp_path, HERE.slug, PROBLEM.key)
    found = cache.read_record(searched)
    cache.write_record(cache.record_path(tmp_path, OLD_TEMPLATES.slug, PROBLEM.key),
                       dataclasses.replace(found, device=OLD_TEMPLATES))
    searched.unlink()
    assert _regenerate(tmp_path) == 0
    assert "float32-16x16x16: re-verified" in capsys.readouterr().out
    assert _here(tmp_path).best.config == found.best.config



def test_a_record_written_by_the_previous_release_is_listed_and_re_verified(tmp_path, capsys):
    """tests/data/record_format1.json was written by `tuner search` at the release before typed
    records (format 1); here it is moved onto this machine's simulator, software kept."""
    old = json.loads((Path(__file__).parent / "data" / "record_format1.json").read_text())
    hardware = {name: value for name, value in HERE.as_dict().items() if name in HERE.model}
    device = Device.from_dict({**old["device"], **hardware})
    old.update(device=device.as_dict(), fingerprint=device.fingerprint)
    assert old["format"] == 1 and device.fingerprint != HERE.fingerprint
    path = cache.record_path(tmp_path, device.slug, "float32-24x20x12")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))
    assert main(["list", "--cache-dir", str(tmp_path)]) == 0
    assert f"{device.slug}/float32-24x20x12" in capsys.readouterr().out
    assert _regenerate(tmp_path) == 0
    out = capsys.readouterr().out
    assert "float32-24x20x12: re-verified" in out and "templates 5c52d981f3f807d2 -> " in out
    renewed = cache.read_record(cache.record_path(tmp_path, HERE.slug, "float32-24x20x12"))
    assert renewed.best.config in cache.read_record(path).configs
    assert main(["list", "--cache-dir", str(tmp_path)]) == 0
    assert f"{HERE.slug}/float32-24x20x12" in capsys.readouterr().out


def test_sigterm_stops_a_regeneration_as_it_stops_a_search(tmp_path):
    import signal
    import subprocess
    import sys

    from processes import answers_ctrl_c

    cache.write_record(cache.record_path(tmp_path, H100.slug, PROBLEM.key), make_record(H100, PROBLEM, [(SMALL, 9e3)]))
    process = subprocess.Popen([sys.executable, "-m", "tuner", "regenerate", "--simulate", "--trials", "6",
                                "--cache-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=answers_ctrl_c)
    assert process.stderr.readline().startswith("regenerating the cache for")  # SIGTERM is handled from here
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143 and "tuner regenerate: terminated (SIGTERM)" in err and "Traceback" not in err


def test_a_regeneration_stopped_halfway_is_finished_by_the_next_run(tmp_path, capsys, monkeypatch):
    """The first configuration is measured, and a record of this fingerprint written, when Ctrl-C
    comes: the next run re-verifies the other, rather than calling the product current."""
    import tuner.regenerate

    cache.write_record(cache.record_path(tmp_path, OLD_TEMPLATES.slug, PROBLEM.key),
                       make_record(OLD_TEMPLATES, PROBLEM, [(SMALL, 2.0), (RUNNER_UP, 1.0)]))
    measure_all = tuner.regenerate._measure_all

    def stopped_after_the_first(search, configs, workers):
        measure_all(search, configs[:1], workers)
        raise KeyboardInterrupt

    monkeypatch.setattr(tuner.regenerate, "_measure_all", stopped_after_the_first)
    assert _regenerate(tmp_path) == 130
    assert capsys.readouterr().err.endswith(
        "\ntuner regenerate: interrupted; what it measured is kept; run the same command to finish\n")
    assert _here(tmp_path).budget.measured == 1
    monkeypatch.setattr(tuner.regenerate, "_measure_all", measure_all)
    capsys.readouterr()
    assert _regenerate(tmp_path) == 0
    assert "float32-16x16x16: re-verified" in capsys.readouterr().out
    assert _here(tmp_path).budget.measured == 2
    assert _regenerate(tmp_path) == 0  # finished now: current
    assert "float32-16x16x16: current" in capsys.readouterr().out


def test_a_gpu_leaves_the_products_tuned_only_on_the_simulator_alone(tmp_path):
    from tuner.regenerate import regenerate
    from tuner.runtime import Runtime

    cache.write_record(cache.record_path(tmp_path, HERE.slug, PROBLEM.key), make_record(HERE, PROBLEM, [(SMALL, 2.0)]))
    on_a_gpu = Runtime(tuner.backends.CUDA, None, dataclasses.replace(H100, name="NVIDIA GPU of no record"))
    said = []
    assert regenerate(on_a_gpu, tmp_path, trials=2, say=said.append) == [] and said == []


def test_re_verifying_and_re_tuning_compile_ahead_in_workers_as_a_search_does(tmp_path, capsys):
    """Each measured variant was compiled by a compile worker (compile_ahead.py) while another was measured.
    The re-tune is warm-started from two other GPUs' bests, both small tiles, rather than the default's."""
    retuned = Problem(16, 16, 32)
    cache.write_record(cache.record_path(tmp_path, OLD_TEMPLATES.slug, PROBLEM.key),
                       make_record(OLD_TEMPLATES, PROBLEM, [(SMALL, 2.0), (RUNNER_UP, 1.0)]))
    a100 = dataclasses.replace(H100, name="NVIDIA A100-SXM4-80GB", arch="sm_80")
    for device, best in ((H100, SMALL), (a100, RUNNER_UP)):
        cache.write_record(cache.record_path(tmp_path, device.slug, retuned.key),
                           make_record(device, retuned, [(best, 9e3)]))
    assert _regenerate(tmp_path, "--trials", "2", "--compile-workers", "1") == 0
    out = capsys.readouterr().out
    assert "float32-16x16x16: re-verified" in out and "float32-16x16x32: re-tuned" in out
    for problem in (PROBLEM, retuned):
        measured = _measured(tmp_path, problem)
        assert len(measured) == 2 and all(trial.user_attrs["seconds"]["compile_ahead"] > 0 for trial in measured)
        assert {Config(**trial.params) for trial in measured} == {SMALL, RUNNER_UP}


def test_regenerate_has_the_compile_workers_of_tuner_search(tmp_path, monkeypatch):
    """None on the simulator, else the host's default, unless --compile-workers says otherwise."""
    import tuner.cli.regenerate
    import tuner.cli.search
    import tuner.regenerate
    from tuner.runtime import Runtime

    asked = []
    monkeypatch.setattr(tuner.regenerate, "regenerate",
                        lambda runtime, root, **options: asked.append(options["compile_workers"]) or [])
    monkeypatch.setattr(tuner.cli.search, "default_workers", lambda: 5)
    assert _regenerate(tmp_path) == 0
    monkeypatch.setattr(tuner.cli.regenerate, "open_device",
                        lambda backend, simulate: Runtime(tuner.backends.CUDA, None, H100))
    for workers in ([], ["--compile-workers", "2"]):
        assert main(["regenerate", *workers, "--cache-dir", str(tmp_path)]) == 0
    assert asked == [0, 5, 2]


QUICK = [Config(block_m=m, block_n=n, thread_m=m // 8, thread_n=n // 8)  # 64 threads each
         for m, n in ((16, 16), (32, 16), (16, 32), (32, 32))]


def _regenerate_beside(root, out: str, start) -> None:
    """A regenerate let go with another (processes.run_at_once), its stdout kept in root/out."""
    start.wait()
    with open(root / out, "w") as written, contextlib.redirect_stdout(written):
        status = _regenerate(root)
    sys.exit(status)


def test_two_regenerates_at_once_re_verify_each_configuration_once(tmp_path):
    """Neither asks the sampler for variants of its own once the queue is empty (each measured as
    many more as the other took), and each reports every configuration, those the other measured too."""
    cache.write_record(cache.record_path(tmp_path, OLD_TEMPLATES.slug, PROBLEM.key),
                       make_record(OLD_TEMPLATES, PROBLEM, [(config, 2.0 - index / 10)
                                                            for index, config in enumerate(QUICK)]))
    run_at_once(_regenerate_beside, [(tmp_path, "first"), (tmp_path, "second")])
    for out in ("first", "second"):
        said = (tmp_path / out).read_text()
        assert "float32-16x16x16: re-verified" in said and said.count(" GFLOP/s (simulated) -> ") == len(QUICK), said
    assert sorted(Config(**trial.params).describe() for trial in _measured(tmp_path)) == sorted(
        config.describe() for config in QUICK)


def test_show_after_a_regenerate_shows_the_new_record_of_the_product_and_names_the_older(tmp_path, capsys):
    """Both records of the product match its name, one per software version: the newest is shown
    (before, a longer part of an id was asked for, and the two ids differ in their fingerprint alone)."""
    cache.write_record(cache.record_path(tmp_path, OLD_TEMPLATES.slug, PROBLEM.key),
                       make_record(OLD_TEMPLATES, PROBLEM, [(SMALL, 2.0)], finished="2025-01-01T00:00:00+00:00"))
    assert _regenerate(tmp_path) == 0
    capsys.readouterr()
    assert main(["show", "float32-16x16x16", "--cache-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert f"fingerprint {HERE.fingerprint};" in out
    assert err == (f"tuner: note: 2 records of float32-16x16x16 on {HERE.name}, one per software version, match "
                   f"'float32-16x16x16': showing the newest (older: {OLD_TEMPLATES.slug}/float32-16x16x16)\n")
    assert main(["show", f"{OLD_TEMPLATES.slug}/float32-16x16x16", "--cache-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert f"fingerprint {OLD_TEMPLATES.fingerprint};" in out
    assert err == (f"tuner: note: superseded by {HERE.slug}/float32-16x16x16, a newer record of its product on its "
                   "GPU model: tuner.matmul on that model takes a record of the machine's own fingerprint where it "
                   "has one of the family and dtype, else the newest that passes verification there\n")


def test_list_after_regenerates_marks_the_newest_record_of_each_product_newest_and_the_older_superseded(
        tmp_path, capsys):
    """One record per software version, as each `tuner regenerate` under new code leaves them: list
    said nothing of which one tuner.matmul uses."""
    older = dataclasses.replace(HERE, software={**HERE.software, "templates": "0lder"})
    for device, year in ((older, 2024), (OLD_TEMPLATES, 2025)):
        cache.write_record(cache.record_path(tmp_path, device.slug, PROBLEM.key),
                           make_record(device, PROBLEM, [(SMALL, 2.0)], finished=f"{year}-01-01T00:00:00+00:00"))
    assert _regenerate(tmp_path) == 0
    capsys.readouterr()
    assert main(["list", "--cache-dir", str(tmp_path)]) == 0
    status = {line.split("/")[0]: line.split("  [user]  ")[1] for line in capsys.readouterr().out.splitlines()}
    assert status == {HERE.slug: "newest", **{device.slug: f"superseded by {HERE.fingerprint}"
                                               for device in (older, OLD_TEMPLATES)}}
    assert main(["list", "--json", "--cache-dir", str(tmp_path)]) == 0
    rows = {row["fingerprint"]: row for row in json.loads(capsys.readouterr().out)}
    assert (rows[HERE.fingerprint]["status"], rows[HERE.fingerprint]["superseded_by"]) == ("newest", None)
    assert (rows[older.fingerprint]["status"], rows[older.fingerprint]["superseded_by"]) == (
        "superseded", f"{HERE.slug}/float32-16x16x16")


def _two_searches(root):
    """Two searches of PROBLEM's simulator study, as two regenerates at once hold them, beside a
    record of QUICK's first two configurations under the old templates."""
    from tuner.runtime import open_runtime
    from tuner.search import Search

    cache.write_record(cache.record_path(root, OLD_TEMPLATES.slug, PROBLEM.key),
                       make_record(OLD_TEMPLATES, PROBLEM, [(config, 2.0 - index / 10)
                                                            for index, config in enumerate(QUICK[:2])]))
    runtime = open_runtime(tuner.backends.CUDA, simulate=True)
    return Search(runtime, PROBLEM, root=root), Search(runtime, PROBLEM, root=root)


def _take_the_queue(search) -> None:
    """What the other regenerate's compile-ahead loop does: ask for every queued trial."""
    while search.queued():
        search.shared.sign(search.study.ask())


def test_a_regenerate_whose_queue_another_empties_before_its_ask_still_re_verifies(tmp_path):
    """It measured nothing, so it said each configuration was not measured, and re-tuned."""
    from tuner.regenerate import _regenerate_one

    other, this = _two_searches(tmp_path)
    ask = this.study.ask

    def ask_after_the_other(*args, **kwargs):
        _take_the_queue(other)
        this.study.ask = ask
        return ask(*args, **kwargs)

    this.study.ask = ask_after_the_other
    change = _regenerate_one(this, [cache.read_record(cache.record_paths(tmp_path)[0])], [], 2, 0, lambda line: None)
    assert change.action == "re-verified", change


def test_a_suggestion_a_regenerate_asked_for_by_mistake_is_given_back_at_once(tmp_path, monkeypatch):
    """Held unsigned while the run measured, it passed for dead to another worker, which failed it,
    and giving it back at the run's end raised UpdateFinishedTrialError: a traceback."""
    import tuner.storage

    other, this = _two_searches(tmp_path)
    ask, measure, asked = this.study.ask, this._measure, []

    def ask_after_the_other(*args, **kwargs):
        if asked:  # the other takes what is left just before this one's second ask
            _take_the_queue(other)
        asked.append(ask(*args, **kwargs))
        return asked[-1]

    def measure_while_the_other_recovers(*args, **kwargs):
        other.shared.recover(other.study)
        return measure(*args, **kwargs)

    monkeypatch.setattr(tuner.storage, "ORPHAN_GRACE_SECONDS", 0)
    this.study.ask, this._measure = ask_after_the_other, measure_while_the_other_recovers
    this.enqueue(QUICK[:2], recorded=True, running_too=True)
    this.run(2, None, warm=False, compile_workers=1, from_queue=QUICK[:2])
    mistaken = this.study.trials[asked[-1].number]
    assert len(asked) == 2 and mistaken.user_attrs.get("kind") == "surplus", mistaken


RETUNED = Problem(16, 16, 32)


def _regenerate_in_turn(root, out: str, first: bool, begun, finished, start) -> None:
    """A regenerate of PROBLEM (current) and RETUNED (to re-tune), its changes' actions kept in
    root/out: the first says when it begins re-tuning RETUNED and when it has finished; the second
    starts then, and goes on from PROBLEM to RETUNED only once the first has finished."""
    from tuner.record import file_stem
    from tuner.regenerate import regenerate
    from tuner.runtime import open_runtime

    start.wait()
    if not first:
        begun.wait(300)

    def said(line: str) -> None:
        if line.startswith(f"{file_stem(RETUNED)}: re-tuning"):
            begun.set()

    def done(change) -> None:
        if not first and change.problem == PROBLEM:
            finished.wait(300)

    changes = regenerate(open_runtime(tuner.backends.CUDA, simulate=True), root, trials=2, say=said, done=done)
    (root / out).write_text(" ".join(change.action for change in changes))
    if first:
        finished.set()


def test_a_regenerate_finds_current_a_product_another_finished_since_it_began(tmp_path):
    """The second began while the first re-tuned RETUNED (its study marked, its record partial or
    none): it read both again on reaching it, rather than re-tuning it once more."""
    import multiprocessing

    cache.write_record(cache.record_path(tmp_path, HERE.slug, PROBLEM.key), make_record(HERE, PROBLEM, [(SMALL, 2.0)]))
    cache.write_record(cache.record_path(tmp_path, H100.slug, RETUNED.key), make_record(H100, RETUNED, [(SMALL, 9e3)]))
    context = multiprocessing.get_context("spawn")
    begun, finished = context.Event(), context.Event()
    run_at_once(_regenerate_in_turn, [(tmp_path, "first", True, begun, finished),
                                      (tmp_path, "second", False, begun, finished)])
    assert (tmp_path / "first").read_text() == "current re-tuned"
    assert (tmp_path / "second").read_text() == "current current"
    assert len(_measured(tmp_path, RETUNED)) == 2


def test_a_line_torn_in_the_journal_after_regenerate_opened_it_is_repaired_not_fatal(tmp_path):
    """A writer killed mid-append tore a line, and another, which had the journal open, appended
    after it (its first line joining the torn one): the marks' storage, opened before, could not
    read on, and the regenerate ended there; opened again, the journal is repaired."""
    import optuna

    from tuner.regenerate import REGENERATING, _Marks
    from tuner.storage import open_storage

    journal = tmp_path / "device.journal"
    optuna.create_study(study_name="a", storage=open_storage(str(journal)))
    marked = _Marks(journal)
    assert not marked("a")
    mark = json.dumps({"op_code": 2, "worker_id": "w", "study_id": 0, "user_attr": {REGENERATING: True}})
    with open(journal, "a") as appended:
        appended.write('{"op_code": 2, "worker_id": "killed", "stu' + f"{mark}\n{mark}\n")
    with pytest.warns(UserWarning, match="had 42 torn bytes"):
        assert marked("a")


def test_a_regenerate_that_joins_one_which_finishes_as_it_opens_the_study_finds_the_product_current(
        tmp_path, monkeypatch, capsys):
    """It found the product marked and its record missing, so it re-verified (or re-tuned: a whole
    new budget, the finished one's cleared) what the other had just done."""
    import tuner.regenerate
    from tuner.regenerate import REGENERATING
    from tuner.runtime import open_runtime
    from tuner.search import Search

    cache.write_record(cache.record_path(tmp_path, OLD_TEMPLATES.slug, PROBLEM.key),
                       make_record(OLD_TEMPLATES, PROBLEM, [(SMALL, 2.0)]))
    Search(open_runtime(tuner.backends.CUDA, simulate=True), PROBLEM, root=tmp_path).study.set_user_attr(
        REGENERATING, True)

    def opened_as_the_other_finishes(*args, **kwargs):
        search = Search(*args, **kwargs)
        cache.write_record(cache.record_path(tmp_path, HERE.slug, PROBLEM.key),
                           make_record(HERE, PROBLEM, [(SMALL, 2.0)]))
        search.study.set_user_attr(REGENERATING, False)
        return search

    monkeypatch.setattr(tuner.regenerate, "Search", opened_as_the_other_finishes)
    assert _regenerate(tmp_path) == 0
    assert "float32-16x16x16: current" in capsys.readouterr().out and not _measured(tmp_path)


OTHER = Config(block_m=32, block_n=32, thread_m=4, thread_n=4)


def _held_by_another_study(root) -> None:
    """A record of this fingerprint made by another study, one this study has not measured, and the mark of a
    regeneration stopped halfway: the product is regenerated, and that record kept."""
    from tuner.regenerate import REGENERATING
    from tuner.runtime import open_runtime
    from tuner.search import Search

    cache.write_record(cache.record_path(root, HERE.slug, PROBLEM.key),
                       make_record(HERE, PROBLEM, [(OTHER, 3.0), (RUNNER_UP, 2.0)]))
    Search(open_runtime(tuner.backends.CUDA, simulate=True), PROBLEM, root=root).study.set_user_attr(REGENERATING, True)


def test_a_re_verification_says_it_kept_another_studys_record(tmp_path, capsys):
    cache.write_record(cache.record_path(tmp_path, OLD_TEMPLATES.slug, PROBLEM.key),
                       make_record(OLD_TEMPLATES, PROBLEM, [(SMALL, 2.0), (RUNNER_UP, 1.0)]))
    _held_by_another_study(tmp_path)
    assert _regenerate(tmp_path) == 0
    out = capsys.readouterr().out
    assert ("float32-16x16x16: kept\n  another study's record ('test' in test) serves this device; this study replaces "
            "it once it has measured its 1 configuration not measured here\n") in out, out
    assert _here(tmp_path).study["name"] == "test"


def test_a_re_tune_below_another_studys_record_says_it_kept_it(tmp_path, capsys):
    cache.write_record(cache.record_path(tmp_path, H100.slug, PROBLEM.key), make_record(H100, PROBLEM, [(SMALL, 2.0)]))
    _held_by_another_study(tmp_path)
    assert _regenerate(tmp_path, "--trials", "1") == 0
    out = capsys.readouterr().out
    assert "float32-16x16x16: kept\n" in out and "no variant passed" not in out, out


def test_a_configuration_that_killed_its_worker_each_time_is_re_verified_no_more_and_said_why(tmp_path, capsys):
    """Measuring it would kill this run too: it is left out of the re-verification, which goes on
    with the others, and its line says why, once (its queueing is not tried again and again)."""
    from tuner.runtime import open_runtime
    from tuner.search import Search
    from tuner.storage import KILLS_ITS_WORKER, MAX_RETRIES

    cache.write_record(cache.record_path(tmp_path, OLD_TEMPLATES.slug, PROBLEM.key),
                       make_record(OLD_TEMPLATES, PROBLEM, [(SMALL, 2.0), (RUNNER_UP, 1.0)]))
    died_measuring(Search(open_runtime(tuner.backends.CUDA, simulate=True), PROBLEM, root=tmp_path), RUNNER_UP,
                   MAX_RETRIES + 1)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert _regenerate(tmp_path) == 0
    out = capsys.readouterr().out
    assert f"{RUNNER_UP.describe()}: was 1 GFLOP/s (simulated), not measured: {KILLS_ITS_WORKER}" in out
    assert "float32-16x16x16: re-verified" in out and [entry.config for entry in _here(tmp_path).ranked] == [SMALL]
    assert not [warning for warning in said if "not queued again" in str(warning.message)]
