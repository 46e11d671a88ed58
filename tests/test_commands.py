"""`tuner search`, `list`, `show` and `devices` from the command line, on the simulator."""
import contextlib
import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import optuna
import pytest
from processes import answers_ctrl_c

from tuner import cache
from tuner.cli import main
from tuner.stopping import PARENT, Terminated, shielded, stop_on_sigterm, stop_status
from tuner.storage import ORPHAN_GRACE_SECONDS

SMALL = ["--shape", "16", "16", "16"]


def _list(capsys, root) -> list[dict]:
    capsys.readouterr()
    assert main(["list", "--json", "--cache-dir", str(root)]) == 0
    return [row for row in json.loads(capsys.readouterr().out) if row["source"] == "user"]


@pytest.mark.parametrize("backend", ["cuda", "roc"])
def test_search_writes_an_entry_that_list_shows(tmp_path, capsys, backend):
    assert main(["search", "--backend", backend, "--simulate", *SMALL, "--trials", "2",
                 "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "GFLOP/s (simulated CPU time)" in out and "measured 2 (0 failed)" in out
    [row] = _list(capsys, tmp_path)
    assert row["backend"] == backend and row["arch"] == "simulator" and row["clock"] == "simulated CPU time"
    assert row["problem"] == {"m": 16, "n": 16, "k": 16, "dtype": "float32"} and row["budget"]["measured"] == 2
    assert main(["show", row["id"], "--cache-dir", str(tmp_path)]) == 0
    assert row["fingerprint"] in capsys.readouterr().out


@pytest.mark.parametrize("terminal", [False, True])
def test_the_progress_bar_is_drawn_on_a_terminal_only(tmp_path, capsys, monkeypatch, terminal):
    """Its redrawn frames would pile up in a log; the summary lines are there either way."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "2", "--cache-dir",
                 str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert ("\rstudy: 100%|" in err) == terminal and ("\r" in err) == terminal, err
    assert "this run: measured 2 (0 failed)" in out and "best: " in out


def test_show_given_a_part_of_several_ids_names_them(tmp_path, capsys):
    for backend in ("cuda", "roc"):
        assert main(["search", "--backend", backend, "--simulate", *SMALL, "--trials", "1",
                     "--cache-dir", str(tmp_path)]) == 0
    ids = [row["id"] for row in _list(capsys, tmp_path)]
    assert main(["show", "float32-16x16x16", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "2 records match 'float32-16x16x16'" in err and all(id in err for id in ids) and err.count("\n") == 1


def test_the_command_for_the_figures_pastes_into_a_shell(tmp_path, capsys):
    cache_dir = tmp_path / "my cache"
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--study", "my study",
                 "--cache-dir", str(cache_dir)]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("figures: ")]
    assert shlex.split(line.removeprefix("figures: ")) == ["tuner", "report", "--study", "my study",
                                                            "--cache-dir", str(cache_dir)]


def test_a_rerun_of_a_finished_study_measures_nothing_and_says_how_to_go_on(tmp_path, capsys):
    argv = ["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir", str(tmp_path)]
    assert main(argv) == 0 and "pass a larger --trials" not in capsys.readouterr().out
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "this run: measured 0" in out
    assert "the study had already measured its budget of 1: pass a larger --trials to go on" in out


def test_paths_given_with_a_tilde_no_shell_expanded_go_to_the_home_directory(tmp_path, capsys, monkeypatch):
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir=~/cache",
                 "--storage=~/studies.journal"]) == 0
    assert "--cache-dir " + str(tmp_path / "home" / "cache") in capsys.readouterr().out
    assert (tmp_path / "home" / "studies.journal").is_file() and len(_list(capsys, tmp_path / "home" / "cache")) == 1
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize("how", ["--cache-dir", "TUNER_CACHE_DIR", "TUNER_KERNEL_DIR", "--storage"])
def test_a_tilde_naming_no_user_is_refused_in_one_line_and_creates_nothing(tmp_path, capsys, monkeypatch, how):
    """Left as it is, ~nouser/x would be a folder named ~nouser in the current directory."""
    monkeypatch.chdir(tmp_path)
    path = "~tuner-no-such-user-3f9/x"
    args = ["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1"]
    if how.startswith("--"):
        args.append(f"{how}={path}")
    else:
        monkeypatch.setenv(how, path)
    if how in ("TUNER_KERNEL_DIR", "--storage"):
        args += ["--cache-dir", str(tmp_path / "cache")]
    with pytest.raises(SystemExit) if how.startswith("--") else contextlib.nullcontext() as refused:
        assert main(args) == 2
    assert refused is None or refused.value.code == 2  # argparse's refusal of an option
    err = capsys.readouterr().err
    named = f"{how}=" if how.startswith("TUNER") else ""
    assert f"{named}{path}: ~tuner-no-such-user-3f9 names no user on this machine" in err and err.count("\n") == 1, err
    assert not list(tmp_path.glob("~*")) and not list(tmp_path.rglob("*.json"))


@pytest.mark.parametrize("file", ["records", "records/cuda-numba-cuda-simulator-on-x86-64-{fingerprint}"])
def test_a_file_where_the_records_folder_should_be_is_named_before_the_search_starts(tmp_path, capsys, file):
    from tuner.backends import CUDA
    from tuner.runtime import open_runtime

    blocker = tmp_path / file.format(fingerprint=open_runtime(CUDA, simulate=True).device.fingerprint)
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("")
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"a file is where a folder is needed; move it away: '{blocker}'" in err and err.count("\n") == 1, err


def test_a_relative_storage_path_is_recorded_as_an_absolute_one(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for storage, expected in (("sqlite:///walk.db", f"sqlite:///{tmp_path / 'walk.db'}"),
                              ("studies.journal", str(tmp_path / "studies.journal"))):
        assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir", "cache",
                     "--storage", storage]) == 0
        capsys.readouterr()
        assert main(["show", "float32-16x16x16", "--cache-dir", "cache"]) == 0
        assert capsys.readouterr().out.rstrip().endswith(f" in {expected}")
    monkeypatch.setenv("TUNER_STORAGE", "")  # empty: the default journal
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir", "cache"]) == 0
    assert (tmp_path / "cache" / "studies").is_dir()
    from tuner.cli.arguments import _storage
    assert _storage("sqlite:///:memory:") == "sqlite:///:memory:"
    assert _storage("sqlite+pysqlite:///rel.db") == f"sqlite+pysqlite:///{tmp_path / 'rel.db'}"


@pytest.mark.parametrize("storage", ["sqlite:///", "sqlite://", "sqlite:///:memory:", "sqlite:///x?mode=memory&uri=true"])
def test_a_database_in_memory_is_refused_before_anything_is_measured(tmp_path, capsys, monkeypatch, storage):
    """What a search measured there would be gone when it ended, although it says a rerun resumes."""
    monkeypatch.chdir(tmp_path)  # where a relative database file would go
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir", str(tmp_path),
                 "--storage", storage]) == 2
    err = capsys.readouterr().err
    assert "is a database in memory" in err and err.count("\n") == 1, err
    assert not list(tmp_path.rglob("*.json"))


@pytest.mark.parametrize("case, said", [
    ("missing folder", "its directory {folder} does not exist; create it, or give a database path in an existing "
                       "directory"),
    ("read-only folder", "this user may not write in its directory {folder}, where SQLite and the workers keep their "
                         "lock files; make it writable, or give a database path in a folder you can write"),
    ("read-only file", "{database} is read-only for this user; make it writable (chmod u+w), or give another "
                       "database"),
    ("another's claim lock", "{database}.claims.lock is read-only for this user; make it writable (chmod u+w), or "
                             "give another database"),
    ("a folder", "{database} is a folder; give the path of a database file (a missing one is created)")])
def test_an_sqlite_database_a_search_cannot_write_is_refused_in_one_line(tmp_path, capsys, monkeypatch, case, said):
    """Where SQLite would fail to open it, a write would fail with a traceback, or its claim lock could not be
    made; permissions are faked, which root does not meet."""
    folder = tmp_path / ("missing" if case == "missing folder" else "studies")
    database = folder / "study.db"
    if case != "missing folder":
        folder.mkdir()
        database.mkdir() if case == "a folder" else database.touch()
        lock = folder / "study.db.claims.lock"
        lock.touch()
        access = os.access
        denied = {"read-only folder": folder, "read-only file": database, "another's claim lock": lock}.get(case)
        monkeypatch.setattr(os, "access", lambda path, mode, **kw: path != denied and access(path, mode, **kw))
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir", str(tmp_path),
                 "--storage", f"sqlite:///{database}"]) == 2
    err = capsys.readouterr().err
    assert err == (f"tuner search: error: --storage 'sqlite:///{database}': "
                   f"{said.format(folder=folder, database=database)}\n"), err
    assert database.exists() == (case != "missing folder") and {path.name for path in tmp_path.rglob("*.lock")} == (
        set() if case == "missing folder" else {"study.db.claims.lock"})


@pytest.mark.parametrize("command", ["search", "report"])
@pytest.mark.parametrize("given", ["--storage", "TUNER_STORAGE"])
def test_a_storage_that_cannot_be_opened_is_named_as_the_user_gave_it(tmp_path, capsys, monkeypatch, command, given):
    """One from $TUNER_STORAGE is not called --storage, which the command line did not hold."""
    storage = f"sqlite:///{tmp_path / 'missing' / 'study.db'}" if command == "search" else str(tmp_path / "missing")
    monkeypatch.setenv("TUNER_STORAGE", storage if given == "TUNER_STORAGE" else "")
    options = ["--backend", "cuda", "--simulate", *SMALL, "--trials", "1"] if command == "search" else [
        "--out", str(tmp_path / "report")]
    assert main([command, *options, "--cache-dir", str(tmp_path),
                 *(["--storage", storage] if given == "--storage" else [])]) == 2
    err = capsys.readouterr().err
    named = f"TUNER_STORAGE={storage!r}" if given == "TUNER_STORAGE" else f"--storage {storage!r}"
    assert err.startswith(f"tuner {command}: error: {named}") and err.count("\n") == 1, err


def test_a_symbolic_link_where_a_journal_lock_goes_is_refused_in_one_line_and_not_followed(tmp_path, capsys):
    """Its target would be made wherever it points; the line says what to remove, and nothing is measured."""
    journal, elsewhere = tmp_path / "study.journal", tmp_path / "elsewhere"
    (tmp_path / "study.journal.flock").symlink_to(elsewhere)
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir", str(tmp_path),
                 "--storage", str(journal)]) == 2
    assert capsys.readouterr().err == (f"tuner search: error: {journal}.flock is a symbolic link where tuner keeps a "
                                       "lock file; remove it, and tuner makes the lock file again\n")
    assert not elsewhere.exists() and not list(tmp_path.rglob("*.json"))


@pytest.mark.parametrize("case", ["not a database", "locked"])
def test_an_sqlite_file_that_cannot_be_opened_gets_advice_about_the_file(tmp_path, capsys, case):
    """Not about a server and credentials, which an SQLite file has none of."""
    import sqlite3

    database = tmp_path / "study.db"
    with contextlib.closing(sqlite3.connect(database, isolation_level=None)) as holder:
        if case == "not a database":
            database.write_text("the user's notes, not a database\n" * 10)
        else:
            holder.execute("BEGIN EXCLUSIVE")
        assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir",
                     str(tmp_path), "--storage", f"sqlite:///{database}?timeout=0.1"]) == 2
    err = capsys.readouterr().err
    advice = (f"give another path, or remove {database} if it is yours to remove" if case == "not a database" else
              f"another process holds {database} locked: wait for it to finish or stop it, then run the command again")
    assert err.endswith(f"; {advice}\n") and err.count("\n") == 1, err


def test_a_database_failing_under_a_search_is_one_line_and_the_next_run_goes_on(tmp_path, capsys, monkeypatch):
    """Another process holds the SQLite file locked past its busy timeout (0.1 s here) once the first
    variant is measured: the search stops in one line, and a rerun finds the measurement kept."""
    import sqlite3

    from tuner import search

    database = tmp_path / "study.db"
    holder = sqlite3.connect(database, isolation_level=None)
    measure = search.measure

    def measure_then_lock(*args, **kwargs):
        measured = measure(*args, **kwargs)
        holder.execute("BEGIN EXCLUSIVE")
        return measured

    monkeypatch.setattr(search, "measure", measure_then_lock)
    command = ["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "2", "--cache-dir", str(tmp_path),
               "--storage", f"sqlite:///{database}?timeout=0.1", "--heartbeat", "1"]
    assert main(command) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == ("tuner search: error: the study's database failed: (sqlite3.OperationalError) database is locked; "
                   "what it holds is kept: run the command again once it is free (no other process holding it "
                   "locked, writable, its server up)")
    holder.execute("ROLLBACK")
    monkeypatch.setattr(search, "measure", measure)
    assert main(command) == 0
    assert "2 measured (its budget: 2)" in capsys.readouterr().out


@pytest.mark.parametrize("storage, said", [
    ("sqlite:/tmp/x.db", "an SQLite URL is sqlite:////ABSOLUTE/PATH or sqlite:///RELATIVE/PATH"),
    ("sqlite://tmp/x.db", "an SQLite URL is sqlite:////ABSOLUTE/PATH or sqlite:///RELATIVE/PATH"),
    ("postgres://tuner:secret@127.0.0.1/tuner", "SQLAlchemy names PostgreSQL postgresql, not postgres: give "
                                                "postgresql://USER@HOST/DATABASE"),
    ("postgresql:/127.0.0.1/tuner", "a postgresql URL is postgresql://USER@HOST/DATABASE"),
    ("sqlite:x.journal", "an SQLite URL is sqlite:////ABSOLUTE/PATH or sqlite:///RELATIVE/PATH (three slashes, then "
                         "the path) (a journal file: ./NAME)"),
    ("SQLITE:////tmp/x.db", "SQLAlchemy's dialect names are lowercase: give sqlite:, not SQLITE:"),
])
@pytest.mark.parametrize("given", ["--storage", "TUNER_STORAGE"])
def test_a_database_url_in_a_form_sqlalchemy_does_not_take_is_refused_naming_the_form(
        tmp_path, capsys, monkeypatch, storage, said, given):
    """Not taken for a journal file path, nor passed to SQLAlchemy, whose message names its plugin loader."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUNER_STORAGE", storage if given == "TUNER_STORAGE" else "")
    with pytest.raises(SystemExit) as exit:
        main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir", str(tmp_path),
              *(["--storage", storage] if given == "--storage" else [])])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1, err
    assert f"argument --storage: {'$TUNER_STORAGE: ' if given == 'TUNER_STORAGE' else ''}{said}" in err, err
    assert "secret" not in err and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("storage, said", [(" ", "it is blank: give a journal path or URL, or unset it"),
                                           ("journal ", "it starts or ends with whitespace, which would be part of "
                                            "the name: give the journal path or URL alone, or unset it"),
                                           (" postgresql://tuner:secret@127.0.0.1/tuner", "it starts or ends with "
                                            "whitespace")])
@pytest.mark.parametrize("command", ["search", "report"])
def test_a_tuner_storage_blank_or_padded_with_whitespace_is_refused_not_taken_for_another_journal(
        tmp_path, capsys, monkeypatch, storage, said, command):
    """An environment file's stray space would name the journal ' ' (or 'journal ') in the current
    directory: refused in one line that names $TUNER_STORAGE but not its value, which may hold a
    password; nothing is written. Typed as --storage, such a path is the user's to choose."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUNER_STORAGE", storage)
    with pytest.raises(SystemExit) as exit:
        main([command, "--cache-dir", str(tmp_path)] + (["--backend", "cuda", "--simulate", *SMALL, "--trials", "1"]
                                                        if command == "search" else []))
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1, err
    assert f"argument --storage: $TUNER_STORAGE: {said}" in err and "secret" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_devices_worker_takes_its_parents_storage_padded_as_the_user_typed_it(tmp_path, monkeypatch):
    """The --devices parent hands its --storage to each worker through $TUNER_STORAGE: a path typed
    with a trailing space is the user's choice there, not an environment file's stray one."""
    from tuner.cli import build_parser
    from tuner.cli.arguments import STORAGE_GIVEN

    monkeypatch.setenv("TUNER_STORAGE", f"{tmp_path}/journal ")
    monkeypatch.setenv(STORAGE_GIVEN, "1")
    assert build_parser().parse_args(["search", "--backend", "cuda"]).storage == f"{tmp_path}/journal "


def test_devices_shows_the_simulator_fingerprints(capsys):
    assert main(["devices", "--json"]) == 0
    devices = json.loads(capsys.readouterr().out)
    assert {d["backend"] for d in devices} == {"cuda", "roc"}
    assert len({d["fingerprint"] for d in devices}) == 2


def test_devices_takes_its_backend_from_tuner_backend_as_the_other_commands_do(capsys, monkeypatch):
    monkeypatch.setenv("TUNER_BACKEND", "roc")
    assert main(["devices", "--json"]) == 0
    assert {device["backend"] for device in json.loads(capsys.readouterr().out)} == {"roc"}
    monkeypatch.setenv("TUNER_BACKEND", "foo")
    assert main(["devices"]) == 2
    err = capsys.readouterr().err
    assert "TUNER_BACKEND='foo' names no backend" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["search", "--backend", "cuda", "--shape", "0", "16", "16"], "--shape: must be a whole number, at least 1"),
    (["search", "--backend", "cuda", "--shape", "512", "512", "512"], "too large for the simulator"),
    (["search", "--backend", "cuda", "--batch", "100000", *SMALL], "--batch 100000 --shape 16 16 16: "),
    (["search", "--backend", "roc", "--dtype", "float16", *SMALL], "choose one of: float32, float64"),
    (["search", "--backend", "cuda", "--trials", "0"], "must be a whole number, at least 1, not 0"),
    (["search", "--backend", "cuda", "--trials", "abc"], "argument --trials: must be a whole number, at least 1, not"),
    (["search", "--backend", "cuda", "--compile-workers", "x"], "argument --compile-workers: must be a whole number"),
    (["search", "--backend", "cuda", "--seed", "-5"], "argument --seed: must be a whole number from 0 to 4294967295"),
    (["search", "--backend", "cuda", "--timeout", "-1"], "must be more than 0 seconds"),
    (["search", "--backend", "cuda", *SMALL, "--storage", "nosuchdb://x"], "nosuchdb"),
    (["search", "--backend", "cuda", *SMALL, "--study", "s" * 501], "--study: must be a name of 1 to 500 characters"),
    (["show", "no-such-record"], "no record matches 'no-such-record'"),
])
def test_mistakes_get_one_line(tmp_path, capsys, argv, message):
    try:
        status = main([*argv, "--cache-dir", str(tmp_path)])
    except SystemExit as exit:  # argparse's own checks
        status = exit.code
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_a_study_name_or_storage_a_record_cannot_keep_is_refused_before_anything_is_written(
        tmp_path, capsys, monkeypatch):
    """A record refuses a non-printing character (schema.Text), so the search refuses it up front:
    else it would measure, then fail to write its record."""
    for argv in (["--study", "a\tb"], ["--storage", str(tmp_path / "journal\n")]):
        with pytest.raises(SystemExit) as exit:
            main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir", str(tmp_path),
                  *argv])
        err = capsys.readouterr().err
        assert exit.value.code == 2 and err.count("\n") == 1, err
        assert "holds a non-printing character (U+000" in err and "give one without tabs, line breaks" in err
    monkeypatch.setenv("TUNER_STORAGE", "journal\x1b")
    with pytest.raises(SystemExit) as exit:
        main(["search", "--backend", "cuda", "--simulate", *SMALL, "--cache-dir", str(tmp_path)])
    assert exit.value.code == 2
    assert "--storage: $TUNER_STORAGE: the storage's location holds a non-printing character (U+001B)" in (
        capsys.readouterr().err)
    assert not list(tmp_path.iterdir())
    assert main(["report", "--cache-dir", str(tmp_path), "--out", str(tmp_path / "report")]) == 2  # writes no record
    assert "journal\\x1b' is not a file; pass a journal file" in capsys.readouterr().err


@pytest.mark.parametrize("blocked, message", [
    ("records", "check --cache-dir"),
    ("kernels", "exists and is not a directory; set TUNER_KERNEL_DIR to a directory of your own"),
])
def test_a_cache_that_cannot_be_written_stops_the_search_before_anything_is_measured(
        tmp_path, capsys, monkeypatch, blocked, message):
    (tmp_path / blocked).write_text("a file where a folder should be")
    monkeypatch.setenv("TUNER_KERNEL_DIR", str(tmp_path / "kernels"))
    monkeypatch.setattr("tuner.search.Search._measure", lambda *args: pytest.fail("a variant was measured"))
    assert main(["search", "--backend", "cuda", *SMALL, "--trials", "1", "--cache-dir", str(tmp_path)]) == 2
    *before, error = capsys.readouterr().err.splitlines()
    assert message in error and error.startswith("tuner search: error: ")
    assert not any("error" in line for line in before)
    assert "(check --cache-dir" not in error or blocked == "records"


def test_listing_a_cache_directory_that_does_not_exist_says_so(tmp_path, capsys, monkeypatch):
    assert main(["list", "--cache-dir", str(tmp_path / "typo")]) == 0
    captured = capsys.readouterr()
    assert f"--cache-dir {tmp_path / 'typo'} does not exist: only the shipped records are shown" in captured.err
    assert not (tmp_path / "typo").exists()
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "typo2"))
    assert main(["list"]) == 0
    assert f"TUNER_CACHE_DIR={tmp_path / 'typo2'} does not exist" in capsys.readouterr().err
    (tmp_path / "records").write_text("a file where a folder should be")
    assert main(["list", "--cache-dir", str(tmp_path)]) == 0
    assert f"{tmp_path / 'records'} is not a folder: only the shipped records are shown" in capsys.readouterr().err


def test_an_unreadable_record_is_skipped_with_a_warning(tmp_path, capsys):
    broken = tmp_path / "records" / "cuda-x-0123456789abcdef" / "float32-1x1x1.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("{ not json")
    assert _list(capsys, tmp_path) == []
    assert main(["list", "--cache-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "skipping" in err and "delete it; the next tuner search of its product writes it again" in err


def test_an_incomplete_record_is_skipped_with_a_warning(tmp_path, capsys):
    assert main(["search", "--backend", "cuda", *SMALL, "--trials", "1", "--cache-dir", str(tmp_path)]) == 0
    [path] = cache.record_paths(tmp_path)
    path.write_text(json.dumps({**json.loads(path.read_text()), "device": {}}))
    capsys.readouterr()
    assert main(["list", "--json", "--cache-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert [row for row in json.loads(out) if row["source"] == "user"] == []
    assert "record.device lacks 'backend'" in err
    assert main(["search", "--backend", "cuda", *SMALL, "--trials", "1", "--cache-dir", str(tmp_path)]) == 0


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"), reason="an NVIDIA driver is present")
def test_with_no_gpu_the_search_says_so_and_simulates(tmp_path):
    environment = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-m", "tuner", "search", "--backend", "cuda", *SMALL, "--trials", "1",
                           "--cache-dir", str(tmp_path)], env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "no GPU here" in done.stderr and "simulated CPU time" in done.stdout


def _start_search(root, environment: dict | None = None, preexec_fn=answers_ctrl_c) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "200",
         "--cache-dir", str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=preexec_fn, env=environment)


def _wait_for_measurements(root, process, count: int) -> dict:
    """The cache record once it holds `count` measured trials."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        for path in cache.record_paths(root):
            record = cache.read_record(path)  # must parse at every moment
            if record.budget.measured >= count:
                return record
        time.sleep(0.1)
    raise AssertionError(f"no record with {count} measurements: {process.communicate()}")


def _study(root) -> optuna.Study:
    [journal] = (root / "studies").glob("*.journal")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    [name] = optuna.get_all_study_names(storage)
    return optuna.load_study(study_name=name, storage=storage)


def _measured(study) -> list:
    return [t for t in study.trials if t.state.name == "COMPLETE" and t.user_attrs.get("kind") == "measured"]


@pytest.mark.parametrize("stop, status, said", [(signal.SIGINT, 130, "interrupted"),
                                                (signal.SIGTERM, 143, "terminated (SIGTERM)")],
                         ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_stops_cleanly_and_keeps_the_results(tmp_path, stop, status, said):
    process = _start_search(tmp_path)
    _wait_for_measurements(tmp_path, process, 2)
    process.send_signal(stop)
    out, err = process.communicate(timeout=60)
    assert process.returncode == status and "Traceback" not in err
    assert f"{said}; completed trials are kept" in err
    completed = re.search(r"trials \((\d+) completed\)", out).group(1)  # the same count in both lines
    assert f"failures by reason (the study's {completed} completed trials" in out
    study = _study(tmp_path)
    assert not [t for t in study.trials if t.state.name == "RUNNING"]
    [path] = cache.record_paths(tmp_path)
    assert cache.read_record(path).budget.measured == len(_measured(study)) >= 2


@pytest.mark.parametrize("stops, parent", [([signal.SIGTERM] * 30, False),
                                           ([signal.SIGTERM, signal.SIGINT] * 15, True)],
                         ids=["sigterms", "worker-sigterm-and-sigint"])
def test_a_burst_of_stop_signals_stops_as_one_does(tmp_path, stops, parent):
    # A --devices worker whose parent is killed gets one SIGTERM per parent thread, milliseconds
    # apart; one under a scheduler gets its SIGTERM and its parent's SIGINT. Spread over 60 ms, the
    # burst reaches the stop and the interpreter's exit, where a signal not ignored would cut them.
    environment = {**os.environ, PARENT: str(os.getpid())} if parent else None
    process = _start_search(tmp_path, environment)
    _wait_for_measurements(tmp_path, process, 2)
    for stop in stops:
        process.send_signal(stop)
        time.sleep(0.002)
    out, err = process.communicate(timeout=60)
    # Where a SIGTERM and a SIGINT are both pending, CPython runs their handlers in signal-number
    # order, SIGINT's first, whichever came first: the stop is then an interruption.
    stopped = {143: "terminated (SIGTERM)", 130: "interrupted"} if parent else {143: "terminated (SIGTERM)"}
    assert process.returncode in stopped and "Traceback" not in err
    assert f"{stopped[process.returncode]}; completed trials are kept" in err
    assert not [t for t in _study(tmp_path).trials if t.state.name == "RUNNING"]


def test_a_worker_stops_at_its_parents_sigint_even_where_sigint_was_ignored(tmp_path):
    # A --devices parent started as a shell's background job ignores SIGINT and so would its
    # workers; the one SIGINT it sends them is how it stops them.
    process = _start_search(tmp_path, {**os.environ, PARENT: str(os.getpid())},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        _wait_for_measurements(tmp_path, process, 2)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()  # one that ignored the SIGINT would run on
    assert process.returncode == 130 and "interrupted; completed trials are kept" in err
    assert not [t for t in _study(tmp_path).trials if t.state.name == "RUNNING"]


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "PYTHONUNBUFFERED"])
@pytest.mark.parametrize("stop, status, said", [(signal.SIGINT, 130, "interrupted"),
                                                (signal.SIGTERM, 143, "terminated (SIGTERM)")],
                         ids=["ctrl-c", "sigterm"])
def test_a_stopped_search_whose_reader_left_says_so_and_exits_as_stopped(tmp_path, buffered, stop, status, said):
    """Ctrl-C on `tuner search | head -1` stops the reader too: the summary meant for it failed, and
    with it the line that says what the stop kept (the first print where stdout is unbuffered, the
    exit's flush else) and the stop's exit status, 141 instead of 130."""
    reader, writer = os.pipe()
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED" or not buffered}
    process = subprocess.Popen(
        [sys.executable, "-m", "tuner", "search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "200",
         "--cache-dir", str(tmp_path)], stdout=writer, stderr=subprocess.PIPE, text=True, preexec_fn=answers_ctrl_c,
        env={**environment, **({} if buffered else {"PYTHONUNBUFFERED": "1"})})
    os.close(writer)
    os.close(reader)  # the reader left
    try:
        measured = _wait_for_measurements(tmp_path, process, 1).budget.measured
        process.send_signal(stop)
        err = process.communicate(timeout=120)[1]
    finally:
        process.kill()
    assert (process.returncode, err.splitlines()[-1]) == (status, f"tuner search: {said}; completed trials are kept, "
                                                                  "run the same command to resume"), err
    assert "Traceback" not in err
    [path] = cache.record_paths(tmp_path)
    assert cache.read_record(path).budget.measured >= measured


def test_sigterm_taken_once_raises_once():
    previous = stop_on_sigterm(once=True)
    try:
        with pytest.raises(Terminated):
            signal.raise_signal(signal.SIGTERM)
        try:
            signal.raise_signal(signal.SIGTERM)  # ignored: the stop the first one began is under way
        except Terminated:
            pytest.fail("a second SIGTERM raised Terminated again")
        assert stop_status() == 143  # the exit status, were the output to fail now
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stop_status() is None  # handlers set again (as by a test): no stop under way


_PENDING_TOGETHER = """
import atexit, os, signal
from tuner.stopping import PARENT, follow_parent, stop_on_sigterm
both = {signal.SIGINT, signal.SIGTERM}
atexit.register(lambda: print(signal.getsignal(signal.SIGINT) == signal.getsignal(signal.SIGTERM) == signal.SIG_IGN))
os.environ[PARENT] = str(os.getppid())
follow_parent()
signal.pthread_sigmask(signal.SIG_BLOCK, both)  # no thread has started, so only this one takes them
stop_on_sigterm(once=True)
os.kill(os.getpid(), signal.SIGTERM)
os.kill(os.getpid(), signal.SIGINT)
try:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, both)
except KeyboardInterrupt as stop:
    print(type(stop).__name__)
os.kill(os.getpid(), signal.SIGTERM)
print("stopped once")
"""


def test_stop_signals_caught_together_stop_once_without_a_traceback():
    # Both caught before either handler runs, as in a burst: CPython runs SIGINT's, then SIGTERM's,
    # which finds the handler the first one left. From the exit on, the system ignores both.
    done = subprocess.run([sys.executable, "-c", _PENDING_TOGETHER], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.split("\n") == ["KeyboardInterrupt", "stopped once", "True", ""]


def test_sigterm_taken_as_ctrl_c_raises_each_time():
    # The --devices parent's: a second SIGTERM kills its workers, as a second Ctrl-C does.
    previous = stop_on_sigterm()
    try:
        for _ in range(2):
            with pytest.raises(Terminated):
                signal.raise_signal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_stop_signal_during_a_shielded_write_stops_the_process_once_the_write_is_whole():
    previous = stop_on_sigterm()
    written = []
    try:
        with pytest.raises(Terminated):
            with shielded():
                signal.raise_signal(signal.SIGTERM)
                written.append("the rest of the write")
        assert written == ["the rest of the write"]
        with pytest.raises(Terminated):  # the handler is back
            signal.raise_signal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_killed_search_loses_no_completed_trial_and_resumes(tmp_path, capsys):
    process = _start_search(tmp_path)
    record = _wait_for_measurements(tmp_path, process, 2)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    time.sleep(ORPHAN_GRACE_SECONDS)  # a trial asked for but not yet signed by its worker is orphaned after this
    study = _study(tmp_path)
    measured = _measured(study)
    assert len(measured) >= record.budget.measured >= 2
    assert record.best.trial in [t.number for t in measured]
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", str(len(measured) + 1),
                 "--cache-dir", str(tmp_path)]) == 0
    resumed = _study(tmp_path)
    assert len(_measured(resumed)) == len(measured) + 1
    assert not [t for t in resumed.trials if t.state.name == "RUNNING"]  # the killed worker's trial failed


def test_a_stray_storage_is_named_and_replaces_the_record_only_once_it_measured_its_configurations(
        tmp_path, capsys, monkeypatch):
    args = ["search", "--backend", "cuda", "--simulate", *SMALL, "--cache-dir", str(tmp_path / "cache")]
    assert main([*args, "--trials", "3"]) == 0
    path = next(tmp_path.glob("cache/records/*/*.json"))
    before, held = path.read_bytes(), len(cache.read_record(path).ranked)
    assert held > 1
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUNER_STORAGE", "stray")
    capsys.readouterr()
    assert main([*args, "--trials", "1"]) == 0
    out, err = capsys.readouterr()
    assert f" in {tmp_path / 'stray'} (from $TUNER_STORAGE) has 0 trials" in err
    assert path.read_bytes() == before and "replaces the cache record" not in err
    assert (f"is kept until this study has measured its configurations again ({held - 1} left): rerun with "
            f"--trials {held}") in out
    assert main([*args, "--trials", str(held)]) == 0
    assert "replaces the cache record" in capsys.readouterr().err
    assert cache.read_record(path).study["storage"] == str(tmp_path / "stray")


def test_a_search_of_another_study_says_once_that_its_record_replaces_the_cached_one(tmp_path, capsys):
    args = ["search", "--backend", "cuda", "--simulate", *SMALL, "--cache-dir", str(tmp_path)]
    assert main([*args, "--trials", "1"]) == 0
    first = json.loads(next(tmp_path.glob("records/*/*.json")).read_text())["study"]
    capsys.readouterr()
    assert main([*args, "--trials", "2", "--study", "other"]) == 0
    said = (f"tuner: this study's record of float32-16x16x16 replaces the cache record made by study "
            f"'{first['name']}' in {first['storage']} (best ")
    assert capsys.readouterr().err.count(said) == 1
    assert main([*args, "--trials", "3", "--study", "other"]) == 0
    assert "replaces the cache record" not in capsys.readouterr().err  # its own record now: nothing to say


def test_a_good_storage_option_overrides_a_malformed_tuner_storage(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TUNER_STORAGE", "postgres://host/database")
    storage = tmp_path / "ok.journal"
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir", str(tmp_path),
                 "--storage", str(storage)]) == 0
    out, err = capsys.readouterr()
    assert f" in {storage} has 0 trials" in err and "$TUNER_STORAGE" not in err, err
    assert f"--storage {storage}" in out


def test_a_journal_named_like_a_database_url_is_taken_as_a_path(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--backend", "cuda", "--simulate", *SMALL, "--trials", "1", "--cache-dir", "cache",
                 "--storage", "./sqlite:x.journal"]) == 0
    assert (tmp_path / "sqlite:x.journal").is_file()


def _held_record(tmp_path, capsys) -> tuple[list[str], int]:
    """The arguments of a search of another study than the one whose record the cache holds, and the
    record's configurations."""
    args = ["search", "--backend", "cuda", "--simulate", *SMALL, "--cache-dir", str(tmp_path)]
    assert main([*args, "--trials", "3"]) == 0
    capsys.readouterr()
    return [*args, "--study", "other"], len(cache.read_record(next(tmp_path.glob("records/*/*.json"))).ranked)


def test_a_study_with_no_variant_passed_exits_1_though_another_studys_record_is_held(tmp_path, capsys, monkeypatch):
    import tuner.search
    from tuner import record
    from tuner.measure import Measured

    args, _ = _held_record(tmp_path, capsys)
    monkeypatch.setattr(tuner.search, "measure", lambda runtime, *_: Measured(
        record.Measurement("verify", "wrong result (forced)", clock=runtime.clock)))
    assert main([*args, "--trials", "1"]) == 1
    out = capsys.readouterr().out
    assert "no variant has passed verification yet: nothing cached" in out and "is kept until" not in out, out


def test_the_kept_records_advice_counts_the_configurations_queued_before_its_own(tmp_path, capsys):
    """A warm start appends the held record's configurations to the queue: those queued by an earlier
    run are measured first."""
    from tuner.cli.search import open_device
    from tuner.search import Search

    args, held = _held_record(tmp_path, capsys)
    problem = cache.read_record(next(tmp_path.glob("records/*/*.json"))).problem
    search = Search(open_device("cuda", True), problem, root=tmp_path, name="other")
    recorded = {config.as_dict().__repr__() for config in cache.read_record(search.path).configs}
    ahead = list(itertools.islice((config for config in search.space if repr(config.as_dict()) not in recorded), 3))
    assert len(search.enqueue(ahead)) == 3
    assert main([*args, "--trials", "1"]) == 0
    assert f"({held} left): rerun with --trials {1 + 2 + held}\n" in capsys.readouterr().out


def test_the_kept_records_advice_counts_a_configuration_the_record_lists_twice_once(tmp_path, capsys):
    """A record edited by hand may list a configuration twice (it still loads): it is measured once."""
    args, held = _held_record(tmp_path, capsys)
    path = next(tmp_path.glob("records/*/*.json"))
    data = json.loads(path.read_text())
    data["runners_up"].append(data["runners_up"][-1])  # the last: the first is measured by the run below
    path.write_text(json.dumps(data))
    assert len(cache.read_record(path).ranked) == held + 1
    assert main([*args, "--trials", "1"]) == 0
    assert f"({held - 1} left): rerun with --trials {held}\n" in capsys.readouterr().out


def test_the_kept_records_advice_is_never_below_the_budget_asked(tmp_path, capsys):
    args, held = _held_record(tmp_path, capsys)
    assert main([*args, "--trials", "50", "--timeout", "0.001"]) == 0
    out = capsys.readouterr().out
    assert "this run: measured 1 " in out and f"({held - 1} left): run the same command again\n" in out, out
