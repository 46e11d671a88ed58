"""`tuner report`, the end-of-search summary and `tuner show --source`, from a simulated search."""
import contextlib
import io
import json
import os
import re
import shutil
import signal
import stat
from pathlib import Path

import optuna
import pytest

from tuner import cache
from tuner.backends import get_backend
from tuner.cli import main
from tuner.source import render
from tuner.space import Space
from tuner.studies import StudyTrials, failure_reasons, find_study, identity

PNG = b"\x89PNG\r\n\x1a\n"
FIGURES = ("history", "importances", "tiles", "records", "bench-0")
# The shape of bench/versus_cublas.py's output, with made-up numbers: this file is test input only.
BENCH = {"device": {"name": "Numba CUDA simulator on x86_64", "arch": "simulator"}, "clock": "simulated CPU time",
         "rows": [{"dtype": "float32", "shape": [16, 16, 16], "kernel": kernel, "gflops": gflops,
                   "ratio_to_cublas": None, "ratio_to_seed": ratio, "fraction_of_peak": None}
                  for kernel, gflops, ratio in (("tuned", 4e-5, 1.2), ("seed fast_matmul", 3e-5, 1.0))]}


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A cache directory after a 3-variant simulated search, and what the search printed."""
    root = tmp_path_factory.mktemp("cache")
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["search", "--backend", "cuda", "--simulate", "--shape", "16", "16", "16", "--trials", "3",
                     "--cache-dir", str(root)]) == 0
    return root, out.getvalue()


@pytest.fixture(scope="module")
def searched_once(tmp_path_factory):
    """A cache directory after a 1-variant simulated search (the default configuration): the tests
    that change a study copy it (_copy) rather than each searching."""
    root = tmp_path_factory.mktemp("cache-once")
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["search", "--backend", "cuda", "--simulate", "--shape", "16", "16", "16", "--trials", "1",
                     "--cache-dir", str(root)]) == 0
    return root


@pytest.fixture(scope="module")
def no_bench(tmp_path_factory) -> str:
    """An empty --bench folder, for the reports of tests not about benchmark results: drawing the
    repository's (bench/results) takes about half of a report's time. test_a_study_of_one_variant_...
    draws them, and test_report_writes_a_page_and_its_figures a result of its own."""
    return str(tmp_path_factory.mktemp("no-bench"))


def _copy(cache_dir: Path, tmp_path: Path) -> Path:
    """The test's own copy of a module fixture's cache directory."""
    root = tmp_path / "cache"
    shutil.copytree(cache_dir, root)
    return root


def test_search_ends_with_a_summary(searched):
    root, out = searched
    [path] = cache.record_paths(root)
    assert "best: " in out and "GFLOP/s (simulated CPU time), no peak to compare with" in out
    assert "this run: measured 3" in out and "the study now has" in out
    assert "failures by reason (the study's" in out
    assert f"cache record: {path}" in out
    assert "figures: tuner report --study matmul-float32-16x16x16-" in out


def test_report_writes_a_page_and_its_figures(searched, tmp_path, capsys):
    root, _ = searched
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "versus_cublas.json").write_text(json.dumps(BENCH))
    (bench / "old").mkdir()
    (bench / "old" / "versus_cublas.json").write_text("{ not json")
    out = tmp_path / "report"
    assert main(["report", "--cache-dir", str(root), "--out", str(out), "--bench", str(bench)]) == 0
    printed = capsys.readouterr().out
    page = (out / "report.html").read_text()
    assert f"report: {out / 'report.html'}" in printed
    assert f"skipped: {bench / 'old' / 'versus_cublas.json'}: unreadable (JSONDecodeError" in printed
    for name in FIGURES:
        png = (out / f"{name}.png").read_bytes()
        assert png.startswith(PNG) and len(png) > 5000, name
    written = {path.stem for path in out.glob("*.png")}
    assert set(FIGURES) <= written
    assert set(re.findall(r'href="([\w-]+)\.png"', page)) == written
    assert page.count('src="data:image/png;base64,') == len(written)
    assert "simulated CPU time" in page and "Simulated." in page and "optuna-dashboard" in page
    assert "Skipped" in page and "unreadable" in page


def test_show_and_report_print_the_best_time_alike(searched, tmp_path, capsys, no_bench):
    root, _ = searched
    [path] = cache.record_paths(root)
    assert main(["show", cache.record_id(root, path), "--cache-dir", str(root)]) == 0
    shown = re.findall(r"median (\S+ ms) over", capsys.readouterr().out)
    assert main(["report", "--cache-dir", str(root), "--out", str(tmp_path), "--bench", no_bench]) == 0
    assert re.findall(r"median (\S+ ms) over", (tmp_path / "report.html").read_text()) == shown != []


def test_report_says_when_there_are_no_bench_results(searched, tmp_path):
    root, _ = searched
    out, empty = tmp_path / "report", tmp_path / "empty"
    empty.mkdir()
    assert main(["report", "--cache-dir", str(root), "--out", str(out), "--bench", str(empty)]) == 0
    assert "No benchmark results" in (out / "report.html").read_text()
    assert not (out / "bench-0.png").exists()


@pytest.mark.parametrize("row", [{"kernel": {"a": 1}}, {"kernel": ["tuned"]}, {"dtype": 5}, {"shape": [16, "x", 16]},
                                 {"shape": []}, {"gflops": float("inf")}, {"gflops": True}],
                         ids=["kernel-object", "kernel-list", "dtype-number", "shape-string", "shape-empty", "rate-inf",
                              "rate-bool"])
def test_a_bench_row_of_the_wrong_types_is_no_bench_result(row):
    from tuner.benchmarks import is_bench_result

    assert is_bench_result(BENCH) and not is_bench_result({**BENCH, "rows": [{**BENCH["rows"][0], **row}]})


def test_report_skips_a_bench_result_whose_rows_hold_the_wrong_types(searched, tmp_path, capsys):
    root, _ = searched
    bench = tmp_path / "versus_cublas.json"
    bench.write_text(json.dumps({**BENCH, "rows": [{**BENCH["rows"][0], "kernel": {"a": 1}}]}))
    out = tmp_path / "report"
    assert main(["report", "--cache-dir", str(root), "--out", str(out), "--bench", str(bench)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert f"{bench}: not a versus_cublas.json result" in (out / "report.html").read_text()
    assert not (out / "bench-0.png").exists()


def test_report_says_it_skips_a_bench_path_that_is_no_file_or_folder(searched, tmp_path):
    root, _ = searched
    out = tmp_path / "report"
    assert main(["report", "--cache-dir", str(root), "--out", str(out), "--bench", "/dev/zero"]) == 0
    assert "/dev/zero: not a regular file or a folder" in (out / "report.html").read_text()


def test_report_refuses_a_bench_path_that_does_not_exist(searched, tmp_path, capsys):
    root, _ = searched
    missing = tmp_path / "typo"
    assert main(["report", "--cache-dir", str(root), "--out", str(tmp_path / "report"), "--bench", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--bench {missing}: no such file or folder" in err and err.count("\n") == 1, err
    assert not (tmp_path / "report").exists()


def test_report_skips_a_file_in_the_studies_folder_that_is_not_a_journal(searched, tmp_path, no_bench):
    root, _ = searched
    notes = root / "studies" / "notes.journal"
    notes.write_text("my notes\n")
    try:
        with pytest.warns(UserWarning, match=f"tuner: skipping {notes}: it is not a study journal"):
            assert main(["report", "--cache-dir", str(root), "--out", str(tmp_path / "report"),
                         "--bench", no_bench]) == 0
    finally:
        notes.unlink()


def test_report_refuses_a_damaged_journal_naming_it(searched_once, tmp_path):
    root = _copy(searched_once, tmp_path)
    [journal] = (root / "studies").glob("*.journal")
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join([*lines[:2], b"garbage line\n", *lines[2:]]))
    with pytest.raises(ValueError, match="holds a line that is no Optuna journal entry"):
        find_study(root, None, None)


def test_a_study_name_in_two_journals_is_reported_from_the_latest(tmp_path, no_bench):
    for backend, size in (("cuda", "16"), ("roc", "8")):
        assert main(["search", "--backend", backend, "--simulate", "--shape", size, size, size, "--trials", "1",
                     "--study", "S", "--cache-dir", str(tmp_path)]) == 0
    assert main(["report", "--study", "S", "--cache-dir", str(tmp_path), "--out", str(tmp_path / "report"),
                 "--bench", no_bench]) == 0
    journals = re.findall(r"[\w-]+\.journal", (tmp_path / "report" / "report.html").read_text())
    assert journals and all(journal.startswith("roc-") for journal in journals), journals


def test_show_source_prints_the_best_configurations_kernel(searched, capsys):
    root, _ = searched
    [path] = cache.record_paths(root)
    found = cache.read_record(path)
    capsys.readouterr()
    assert main(["show", cache.record_id(root, path), "--source", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    source = render(Space.of(get_backend("cuda"), "float32"), found.best.config)
    assert out.endswith(source) and "records hold no source" in out and found.study["name"] in out
    assert main(["show", cache.record_id(root, path), "--source", "--json", "--cache-dir", str(root)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["source"] == source and shown["source_config"] == found.best.config.as_dict()


def test_show_source_prints_the_kernel_that_matmul_runs_where_the_best_breaks_a_rule(searched, tmp_path, capsys):
    root = tmp_path / "cache"
    shutil.copytree(searched[0], root)
    [path] = cache.record_paths(root)
    data = json.loads(path.read_text())
    assert data["runners_up"], "the fixture's search needs two variants that passed"
    data["best"]["config"]["block_m"] = 7
    path.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["show", cache.record_id(root, path), "--source", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    runner_up = cache.read_record(path).runners_up[0].config
    assert out.endswith(render(Space.of(get_backend("cuda"), "float32"), runner_up))
    assert "# the kernel of runner-up 1, which tuner.matmul runs (its best breaks a rule: " in out
    assert main(["show", cache.record_id(root, path), "--source", "--json", "--cache-dir", str(root)]) == 0
    assert json.loads(capsys.readouterr().out)["source_config"] == runner_up.as_dict()
    for entry in data["runners_up"]:
        entry["config"]["block_m"] = 7
    path.write_text(json.dumps(data))
    assert main(["show", cache.record_id(root, path), "--source", "--cache-dir", str(root)]) == 2
    err = capsys.readouterr().err
    assert "none of the record's configurations is valid" in err and "tuner regenerate" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["report"], "no study in"),
    (["report", "--study", "no-such-study"], "no study named 'no-such-study'"),
    (["report", "--storage", "missing.journal"], "is not a file"),
    (["report", "--storage", "sqlite:///{dir}/missing.db"], "there is no database file"),
    (["report", "--storage", "sqlite+pysqlite:///{dir}/missing.db"], "there is no database file"),
    (["report", "--out", "{file}/sub"], "cannot write there"),
])
def test_report_mistakes_get_one_line(searched, tmp_path, capsys, argv, message):
    root = tmp_path if argv == ["report"] else searched[0]
    (tmp_path / "file").write_text("")
    argv = [part.replace("{file}", str(tmp_path / "file")).replace("{dir}", str(tmp_path)) for part in argv]
    capsys.readouterr()
    assert main([*argv, "--cache-dir", str(root)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file"]  # a read-only command made nothing


def test_a_folder_where_the_report_page_goes_is_one_line_naming_out(searched, tmp_path, capsys, no_bench):
    """The page and figures are written after the figures are drawn: a failure then names --out, not the cache."""
    (tmp_path / "report.html").mkdir()
    assert main(["report", "--out", str(tmp_path), "--bench", no_bench, "--cache-dir", str(searched[0])]) == 2
    err = capsys.readouterr().err
    assert err == (f"tuner report: error: --out {tmp_path}: cannot write there (report.html: a folder is where a "
                   "file goes; move it away); pass a writable --out DIR\n")


@pytest.mark.parametrize("target", ["a file elsewhere", "a missing file elsewhere", "a FIFO"])
def test_a_symbolic_link_or_fifo_where_the_report_page_goes_is_replaced_never_written_through(
        searched, tmp_path, capsys, no_bench, target):
    """The page and figures are renamed into --out: a link planted there is replaced, its target untouched, and a
    FIFO there is not waited on; the page gets the mode a new file does (666 less the umask), as open() gives it."""
    out, elsewhere = tmp_path / "report", tmp_path / "elsewhere"
    out.mkdir()
    if target == "a FIFO":
        os.mkfifo(out / "report.html")
    else:
        if target == "a file elsewhere":
            elsewhere.write_text("the user's own file")
        (out / "report.html").symlink_to(elsewhere)
    (out / "history.png").symlink_to(elsewhere)
    (tmp_path / "plain").touch()

    def blocked(*_):
        raise TimeoutError("the report waited on a FIFO")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(60)  # the report's own work takes seconds
    try:
        assert main(["report", "--out", str(out), "--bench", no_bench, "--cache-dir", str(searched[0])]) == 0
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert (elsewhere.read_text() == "the user's own file") if target == "a file elsewhere" else not elsewhere.exists()
    for name in ("report.html", "history.png"):
        assert not (out / name).is_symlink() and stat.S_ISREG((out / name).lstat().st_mode), name
    assert "<html" in (out / "report.html").read_text() and (out / "history.png").read_bytes().startswith(PNG)
    assert (out / "report.html").stat().st_mode == (tmp_path / "plain").stat().st_mode
    assert not list(out.glob("*.tmp"))


def test_a_cache_directory_named_in_bytes_that_are_no_utf8_is_reported_with_its_name_escaped(
        searched_once, tmp_path, capsys, monkeypatch, no_bench):
    """TUNER_CACHE_DIR holds the bytes the user gave (here a Latin-1 name), which the page, UTF-8,
    cannot hold as they are: it names the folder with Python's escapes, rather than the command
    failing ("surrogates not allowed") after drawing every figure."""
    root = tmp_path / os.fsdecode(b"caf\xe9")
    shutil.copytree(searched_once, root)
    monkeypatch.setenv("TUNER_CACHE_DIR", str(root))
    assert main(["report", "--out", str(tmp_path / "report"), "--bench", no_bench]) == 0, capsys.readouterr().err
    assert "caf\\udce9" in (tmp_path / "report" / "report.html").read_text(encoding="utf-8")


def test_failures_are_counted_by_status_and_by_rule():
    def trial(**attrs):
        return optuna.trial.create_trial(value=0.0, user_attrs=attrs)

    trials = [trial(kind="invalid", reasons=["unroll_k=16 does not divide block_k=8", "256 threads per block"]),
              trial(kind="invalid", reasons=["unroll_k=32 does not divide block_k=16", "needs multiples of 4"]),
              trial(kind="invalid", reasons=["needs multiples of 4\nmore", "size 4 too big"]),
              trial(kind="invalid", reasons=["size N too big"], pruned=["error 0.5 over 1e-4"]),  # a literal N
              trial(kind="invalid", pruned=["error 0.25 over 1e-4"]),
              trial(kind="invalid", reasons=[], pruned=["the 8x2 register tile is elongated beyond 2:1"]),
              trial(kind="invalid", reasons=["pad=3 is for vector fragments; use pad 0 or 1"]),
              *(trial(kind="invalid", reasons=[f"pad={pad} misaligns the vector loads; use pad 0 or 4"])
                for pad in (1, 2)),
              trial(kind="measured", measurement={"status": "wrong", "reason": "relative error 0.5 over 1e-4"}),
              trial(kind="measured", measurement={"status": "ok", "reason": ""}),
              trial(kind="duplicate", duplicate_of=0)]
    # A number that differs between a rule's reasons is N; one they share, or a lone reason's, is kept.
    assert failure_reasons(trials) == {"invalid: unroll_k=N does not divide block_k=N": 2,
                                       "invalid: needs multiples of 4": 2, "invalid: size N too big": 2,
                                       "pruned: error N over 1e-4": 2,
                                       "invalid: 256 threads per block": 1, "wrong: relative error 0.5 over 1e-4": 1,
                                       "pruned: the 8x2 register tile is elongated beyond 2:1": 1,
                                       "invalid: pad=3 is for vector fragments; use pad 0 or 1": 1,
                                       "invalid: pad=N misaligns the vector loads; use pad 0 or 4": 2}  # advice as said


def test_a_reason_a_journal_holds_cannot_forge_what_the_terminal_shows():
    """A shared storage's trial may be anyone's: its escape sequences and bidi overrides are shown as U+FFFD."""
    forged = optuna.trial.create_trial(value=0.0, user_attrs={
        "kind": "measured", "measurement": {"status": "wrong", "reason": "\x1b[2Kall passed\u202e\x07"}})
    assert failure_reasons([forged]) == {"wrong: \ufffd[2Kall passed\ufffd\ufffd": 1}


def test_a_status_a_journal_holds_cannot_forge_what_the_terminal_shows():
    """The status is shown too, and a journal's may be any string: a line break in it would forge a line."""
    forged = optuna.trial.create_trial(value=0.0, user_attrs={
        "kind": "measured", "measurement": {"status": "\x1b[2Kwrong\n  999 ok", "reason": "x"}})
    assert failure_reasons([forged]) == {"\ufffd[2Kwrong\ufffd  999 ok: x": 1}


def test_a_study_of_one_variant_is_said_in_the_singular_and_drawn_without_matplotlib_warnings(tmp_path, capsys):
    import warnings

    assert main(["search", "--backend", "cuda", "--simulate", "--shape", "16", "16", "16", "--trials", "1",
                 "--cache-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "has 0 trials, 0 measured of a budget of 1" in err
    assert "the study now has 1 trial (1 completed), 1 measured" in out
    assert "throughput: 1 variant evaluated in" in out and "failures by reason (the study's 1 completed trial)" in out
    assert ", the first after " in out and "median" not in out.split("throughput: ")[1].split("\n")[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["report", "--cache-dir", str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "history.png").exists()
    assert not [str(warning.message) for warning in caught if issubclass(warning.category, UserWarning)]
    page = (tmp_path / "report" / "report.html").read_text()
    assert "against the 1 measured variant in the order of measurement (the study&#39;s 1 trial less" in page
    assert "GFLOP/s (simulated CPU time) of the 1 variant that passed," in page


def _searched_study(cache_dir: Path, tmp_path: Path) -> tuple[Path, optuna.Study]:
    """The test's own copy of a module fixture's cache directory, and the study of its search."""
    root = _copy(cache_dir, tmp_path)
    return root, find_study(root, None, None)[0]


def test_a_trial_whose_measurement_the_tuner_did_not_make_is_left_out_of_the_report(searched, tmp_path):
    root, study = _searched_study(searched[0], tmp_path)
    honest = max((trial for trial in study.trials if trial.value), key=lambda trial: trial.value)
    study.add_trial(optuna.trial.create_trial(params=honest.params, distributions=honest.distributions, value=9e9,
                                              user_attrs=honest.user_attrs, system_attrs=honest.system_attrs))
    with pytest.warns(UserWarning, match=f"trial {len(study.trials) - 1} of the study is left out"):
        runs = StudyTrials.of(study, cache.Catalog.read(root))
    assert [trial.number for trial in runs.trials] == [trial.number for trial in study.trials[:-1]]
    assert max(trial.value for trial in runs.passed) == honest.value


@pytest.mark.parametrize("value", [None, [1.0, 2.0]], ids=["null", "two"])  # a TypeError and a RuntimeError before
def test_a_trial_whose_value_in_the_journal_is_not_one_number_is_left_out_of_the_report_and_the_search(
        searched_once, tmp_path, capsys, no_bench, value):
    root = _copy(searched_once, tmp_path)  # a search of 1 variant
    args = ["search", "--backend", "cuda", "--simulate", "--shape", "16", "16", "16", "--cache-dir", str(root)]
    study, label, _ = find_study(root, None, None)
    [measured] = [trial for trial in study.trials if trial.value]
    journal = Path(label)
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    for line in lines:
        if line["op_code"] == 6 and line.get("trial_id") == measured._trial_id and line.get("state") == 1:
            line["values"] = value
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines))
    capsys.readouterr()
    with pytest.warns(UserWarning, match=f"trial {measured.number} of the study is left out: its measurement is not "
                                         f"one the tuner made \\(its value .* is not one number\\)"):
        assert main(["report", "--cache-dir", str(root), "--out", str(tmp_path / "report"), "--bench", no_bench]) == 0
        assert main([*args, "--trials", "1"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "this run: measured 1 " in captured.out  # the trial left out does not count in the budget
    complete = find_study(root, None, None)[0].get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    counted = len(complete) - 1  # the trial left out is not counted either
    assert f"({counted} completed)" in captured.out
    assert f"failures by reason (the study's {counted} completed trial" in captured.out


def test_a_study_whose_identity_is_not_an_object_has_none():
    study = optuna.create_study()
    for held in ("x", ["problem"], None):
        study.set_user_attr("identity", held)
        assert identity(study) == {}
    study.set_user_attr("identity", {"problem": "float32-8x8x8"})
    assert identity(study) == {"problem": "float32-8x8x8"}


def test_a_studys_product_is_known_from_its_key():
    from tuner.families.batched import BatchedProblem
    from tuner.family import keyed_problem
    from tuner.problem import Problem

    assert keyed_problem("float32-16x8x4") == Problem(16, 8, 4)
    assert keyed_problem("float64-2x16x8x4") == BatchedProblem(16, 8, 4, "float64", batch=2)
    for key in (None, ["float32-16x8x4"], "x", "float32-16x8", "float99-16x8x4", "float32-0x8x4",
                "float32-1\u0664x8x4"):  # an Arabic-Indic digit
        assert keyed_problem(key) is None


def test_a_study_whose_identity_is_not_an_object_is_reported_without_a_record(searched_once, tmp_path, no_bench):
    root, study = _searched_study(searched_once, tmp_path)
    study.set_user_attr("identity", "x")
    with pytest.warns(UserWarning, match="the study names no product, so its measurements cannot be checked"):
        assert main(["report", "--cache-dir", str(root), "--out", str(tmp_path / "report"), "--bench", no_bench]) == 0
    page = (tmp_path / "report" / "report.html").read_text()
    assert "fingerprint unknown" in page and "no cache record of this study&#39;s product and device was found" in page


def test_a_record_made_by_another_study_of_the_product_is_not_reported_as_this_studys_best(
        searched, tmp_path, no_bench):
    from tuner.storage import open_storage

    root, made = _searched_study(searched[0], tmp_path)
    _, label, _ = find_study(root, None, None)
    other = optuna.create_study(study_name="other", storage=open_storage(label), direction="maximize")
    other.set_user_attr("identity", identity(made))
    assert main(["report", "--cache-dir", str(root), "--study", "other", "--out", str(tmp_path / "report"),
                 "--bench", no_bench]) == 0
    page = (tmp_path / "report" / "report.html").read_text()
    assert f"0 variants passed; the cache record of this product and device was made by another study, &#39;" \
           f"{made.study_name}&#39;" in page
    assert "<th>best configuration</th>" not in page and "<th>cache entry</th>" in page


@pytest.mark.parametrize("device_known", [False, True], ids=["no record of the device", "another product's record"])
def test_a_trial_the_tuner_did_not_make_is_left_out_of_a_report_without_the_studys_record(
        searched_once, tmp_path, device_known):
    """Without the study's record, its product comes from the study and its device from any record
    of that device: a forgery that needs the device to be told (a fraction of peak where the device
    has none) is caught only where one names it."""
    root, study = _searched_study(searched_once, tmp_path)
    for path in cache.record_paths(root):
        path.unlink()
    if device_known:
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["search", "--backend", "cuda", "--simulate", "--shape", "8", "8", "8", "--trials", "1",
                         "--cache-dir", str(root)]) == 0
    honest = next(trial for trial in study.trials if trial.value)
    for value, measurement in ((9e9, honest.user_attrs["measurement"]),
                               (honest.value, {**honest.user_attrs["measurement"], "fraction_of_peak": 0.5})):
        study.add_trial(optuna.trial.create_trial(
            params=honest.params, distributions=honest.distributions, value=value,
            user_attrs={**honest.user_attrs, "measurement": measurement}, system_attrs=honest.system_attrs))
    value_forged, fraction_forged = len(study.trials) - 2, len(study.trials) - 1
    with pytest.warns(UserWarning) as warned:
        runs = StudyTrials.of(study, cache.Catalog.read(root))
    assert runs.entry is None
    left = {trial.number for trial in study.trials} - {trial.number for trial in runs.trials}
    assert value_forged in left and (fraction_forged in left) == device_known
    said = {str(warning.message).partition(": its")[0] for warning in warned}
    forged = {value_forged, fraction_forged} if device_known else {value_forged}
    assert said == {f"tuner: trial {number} of the study is left out" for number in forged}
