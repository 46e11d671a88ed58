"""`tuner render` and `tuner space`: source for both backends, one-line errors for mistakes."""
import ast
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tuner import cache, cli
from tuner.cli import main
from tuner.space import Space

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("argv", [
    ["render", "--backend", "cuda"],
    ["render", "--backend", "roc", "--dtype", "float64", "block_m=32", "prefetch=false"],
    ["render", "--backend", "cuda", "--seed-kernel"],
])
def test_render_prints_source(capsys, argv):
    assert main(argv) == 0
    ast.parse(capsys.readouterr().out)


@pytest.mark.parametrize("argv, message", [
    (["render", "--backend", "cuda", "block_m=48"], "block_m=48 is not one of 16, 32, 64, 128"),
    (["render", "--backend", "cuda", "blockm=64"], "valid names: block_m, block_n"),
    (["render", "--backend", "cuda", "block_m=16", "block_m=32"], "block_m is given twice; give each parameter once"),
    (["render", "--backend", "roc", "--dtype", "float16"], "choose one of: float32, float64"),
    (["render", "--backend", "roc", "max_registers=64"], "not available on roc"),
    (["render", "--backend", "cuda", "thread_m=8", "thread_n=8", "block_m=16", "block_n=16"], "warp"),
])
def test_mistakes_get_one_line(capsys, argv, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err and captured.err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["search", "--backend", "cuda", "--trails", "5"], "tuner search: error: unrecognized arguments: --trails 5; "
                                                       "did you mean --trials? (see tuner search --help)"),
    (["list", "--verbose"], "tuner list: error: unrecognized arguments: --verbose (see tuner list --help)"),
    (["--json", "list"], "tuner: error: --json is an option of tuner list: give it after the command (see tuner "
                         "--help)"),
])
def test_an_option_the_command_does_not_take_is_named_by_that_command(capsys, argv, message):
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2 and capsys.readouterr().err == message + "\n"


def test_bad_backend_is_one_line_from_the_shell():
    done = subprocess.run([sys.executable, "-m", "tuner", "render", "--backend", "amd"],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "invalid choice: 'amd'" in done.stderr and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


def test_space_reports_size_and_seed(capsys, monkeypatch):
    """The domains and size as bench/results holds them; a progress bar only where stderr is a terminal."""
    committed = (ROOT / "bench" / "results" / "space_roc_float64.txt").read_text().splitlines()
    expected = committed[2:next(i for i, line in enumerate(committed) if line.startswith("valid configurations")) + 1]
    assert main(["space", "--backend", "roc", "--dtype", "float64"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[:-1] == expected and err == ""
    assert out.splitlines()[-1].startswith("seed kernel (fast_matmul, TPB=16): block_m=16 block_n=16 block_k=16 ")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["space", "--backend", "roc", "--dtype", "float64"]) == 0
    assert "checking configurations" in capsys.readouterr().err
    monkeypatch.setattr(Space, "candidates", lambda space: iter(()))
    monkeypatch.setattr(sys, "stderr", None)  # closed (2>&-): Python sets it to None
    assert main(["space", "--backend", "roc", "--dtype", "float64"]) == 0
    assert "valid configurations: 0\n" in capsys.readouterr().out


def test_version_names_the_distribution(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert re.fullmatch(r"tuner \d+\.\d+\.\d+\S* \(numba-matmul-tuner\)\n", capsys.readouterr().out)


def test_output_cut_short_by_its_reader_stops_quietly(monkeypatch, capsys):
    """`tuner render | head -1`: once the reader has left, a write fails with EPIPE."""
    class LeftReader:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

        def fileno(self):
            raise io.UnsupportedOperation("fileno")

    monkeypatch.setattr(sys, "stdout", LeftReader())
    assert main(["render", "--backend", "cuda"]) == 141
    assert capsys.readouterr().err == ""


def test_a_closed_stdout_or_stderr_takes_nothing_and_fails_nothing(monkeypatch, capsys, tmp_path):
    """`tuner render >&-`, `tuner search 2>&-`: Python sets a closed stream to None; what is meant for
    it goes nowhere, failing no command, and stderr's lines never land in stdout (`list --json`)."""
    out = sys.stdout
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["render", "--backend", "cuda"]) == 0
    assert main(["space", "--backend", "cuda", "--dtype", "tf32"]) == 0
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", None)
    assert main(["search", "--backend", "cuda", "--simulate", "--shape", "16", "16", "16", "--trials", "1",
                 "--cache-dir", str(tmp_path)]) == 0
    (next((tmp_path / "records").iterdir()) / "float32-1x1x1.json").write_text("{")
    capsys.readouterr()
    assert main(["list", "--json", "--cache-dir", str(tmp_path)]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1
    taken = []
    monkeypatch.setattr(cli, "_run", lambda args: taken.append(sys.stderr) or 0)  # a handler that keeps the stream
    assert main(["list"]) == 0 and not taken[0].closed  # a later write to it would fail


def test_the_sink_of_a_closed_stream_is_closed_as_python_exits_not_left_to_the_collector(tmp_path):
    """`tuner list 2>&-`: the /dev/null standing for stderr stays open while anything may write to it,
    and is closed as Python exits, not left to the garbage collector, which warns of an unclosed
    file (as pytest-xdist's workers printed it)."""
    script = ("import atexit, sys; from tuner import cli; "
              "atexit.register(lambda: print('closed at exit:', cli._nowhere().closed))  # runs last\n"
              "sys.stderr = None; cli.main(['list', '--cache-dir', sys.argv[1]]); sys.stderr = sys.__stderr__; "
              "print('open after main:', not cli._nowhere().closed)")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True)
    assert done.stdout.splitlines()[-2:] == ["open after main: True", "closed at exit: True"], done


def _tuner(argv, stdout, tmp_path, buffered=True):
    """`tuner argv` run as a user runs it, its stdout block-buffered unless told."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    env.update({"TUNER_CACHE_DIR": str(tmp_path)}, **({} if buffered else {"PYTHONUNBUFFERED": "1"}))
    return subprocess.run([sys.executable, "-m", "tuner", *argv], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          env=env)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("buffered", [True, False])
@pytest.mark.parametrize("argv", [["list"], ["space", "--backend", "roc", "--dtype", "float64"]])
def test_a_full_stdout_is_one_line_about_stdout_not_the_cache(tmp_path, argv, buffered):
    """`tuner list > /dev/full`: a write fails with ENOSPC as the command runs (unbuffered) or as its
    output is flushed at the end (buffered); neither is blamed on the cache or left to Python's exit."""
    with open("/dev/full", "w") as full:
        done = _tuner(argv, full, tmp_path, buffered)
    assert done.returncode == 2
    assert done.stderr == (f"tuner {argv[0]}: error: cannot write the output to stdout: No space left on device; "
                           "send it to a file or pipe that can take it\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("buffered", [True, False])
@pytest.mark.parametrize("argv, prog", [(["--help"], "tuner"), (["--version"], "tuner"),
                                        (["search", "--help"], "tuner search")])
def test_help_and_version_to_a_full_stdout_are_one_line_too(tmp_path, argv, prog, buffered):
    """argparse prints them and exits, ignoring a write that fails: Python's exit then fails on the
    buffered output (status 120, "Exception ignored"), or nothing at all is said (status 0)."""
    with open("/dev/full", "w") as full:
        done = _tuner(argv, full, tmp_path, buffered)
    assert (done.returncode, done.stderr) == (2, f"{prog}: error: cannot write the output to stdout: No space left on "
                                                 "device; send it to a file or pipe that can take it\n")


def test_output_held_back_by_a_command_that_then_fails_is_flushed_before_tuner_returns(monkeypatch, capsys):
    """A command that prints, then stops on a user's mistake: its buffered output is flushed in
    main, where a full disk is said in one line, not by Python's exit (status 120, a traceback)."""
    import argparse

    import tuner.cli

    class Full(io.StringIO):
        def flush(self):
            raise OSError(28, "No space left on device")

    def run(args):
        print("a line held back")
        raise ValueError("a mistake")

    monkeypatch.setattr(tuner.cli, "parse", lambda argv: argparse.Namespace(command="list", run=run))
    monkeypatch.setattr(sys, "stdout", Full())
    assert main([]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "tuner list: error: a mistake",
        "tuner list: error: cannot write the output to stdout: No space left on device; send it to a file or pipe "
        "that can take it"]


def test_a_path_in_bytes_that_are_no_utf8_is_printed_escaped_on_a_strict_stdout(tmp_path, monkeypatch):
    """TUNER_CACHE_DIR holds the bytes the user gave (here a Latin-1 name), which Python holds as
    surrogates; stdout in a locale such as en_US.UTF-8 refuses them (errors strict; Python escapes
    them there only in the C locale or its UTF-8 mode): the search that wrote its record prints the
    record's path with Python's escapes, as stderr would, rather than ending in an encoding error
    (status 2) after its work is done."""
    root = tmp_path / os.fsdecode(b"caf\xe9")
    monkeypatch.setenv("TUNER_CACHE_DIR", str(root))
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    stderr = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")  # as Python's always is
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    status = main(["search", "--backend", "cuda", "--simulate", "--shape", "8", "8", "8", "--trials", "1"])
    stdout.flush(), stderr.flush()
    assert status == 0, stderr.buffer.getvalue().decode()
    [record] = cache.record_paths(root)
    assert f"cache record: {tmp_path}/caf\\udce9/records/" in stdout.buffer.getvalue().decode()


@pytest.mark.parametrize("argv", [["list"], ["--help"]])
def test_buffered_output_whose_reader_left_stops_quietly(tmp_path, argv):
    """`tuner list | head -c0`: the reader leaves before the buffered output is flushed at the end."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = _tuner(argv, writer, tmp_path)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (141, "")


def test_a_torn_journal_line_met_by_a_running_worker_says_what_to_do():
    """Another process's write cut short (a full disk) tears the journal under a running worker,
    whose Optuna then fails to parse it; the next run repairs it."""
    import json

    from tuner.cli import explain

    error = json.JSONDecodeError("Expecting ',' delimiter", '{"op_code": 5 "x"}', 14)
    assert explain(error).startswith("a study journal holds a line that is not whole (Expecting ',' delimiter")
    assert "run the command again, which moves the torn bytes aside" in explain(error)


@pytest.mark.parametrize("command", ["search", "report"])
def test_a_study_file_this_user_may_not_write_says_whose_it_is_not_disk_space(tmp_path, capsys, monkeypatch, command):
    """A journal's lock file of another user (faked: root meets no permissions) names the file, its owner and mode,
    and what to do, for every command."""
    from tuner import disk

    studies = tmp_path / "studies"
    studies.mkdir()
    (studies / "cuda-device.journal").touch()  # report reads the journals there; search makes its own

    def refused(lock):
        lock.path.touch(mode=0o644)
        raise PermissionError(13, "Permission denied", str(lock.path))

    monkeypatch.setattr(disk.FileLock, "acquire", refused)
    monkeypatch.setattr("tuner.storage.os.access", lambda path, mode: True)  # report then opens it for writing too
    argv = ["--backend", "cuda", "--simulate", "--shape", "8", "8", "8", "--trials", "1"] if command == "search" else [
        "--out", str(tmp_path / "report")]
    assert main([command, *argv, "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"tuner {command}: error: this user may not use ({studies}/\S+\.flock) \(Permission denied; "
                        r"it is yours, mode 644\): give yourself access \(chmod u\+rwX \1\), or give tuner a cache "
                        r"directory of your own \(--cache-dir, TUNER_CACHE_DIR\) or a --storage of your own\n",
                        err), err


def _explained(path) -> str:
    """explain's line for this user's PermissionError on looking up `path`."""
    try:
        os.stat(path)
    except PermissionError as error:
        return cli.explain(error)
    return "not refused"


def test_a_path_behind_a_folder_this_user_may_not_enter_names_that_folder_whose_it_is_and_what_to_do(reachable):
    """A --storage journal deep in another user's private folder: the folder that bars the way is
    named, with its owner and mode and what to do, not a bare "check its permissions". Run where
    modes bind (processes.where_permissions_bind)."""
    from processes import where_permissions_bind

    closed = reachable / "closed"
    studies = closed / "cache" / "studies"
    studies.mkdir(parents=True)
    cli.explain(PermissionError(13, "Permission denied", str(studies)))  # imports what the child runs
    closed.chmod(0)
    whose, remedy = ("belongs to user 0, mode 0", "its owner can let you use it") if os.geteuid() == 0 else (
        "is yours, mode 0", f"give yourself access (chmod u+rwX {closed})")
    assert where_permissions_bind(_explained, studies) == (
        f"this user may not use {studies} (Permission denied; the folder {closed} on its way {whose}): {remedy}, "
        "or give tuner a cache directory of your own (--cache-dir, TUNER_CACHE_DIR) or a --storage of your own")


def test_a_warning_during_a_search_gets_a_line_of_its_own_above_the_progress_bar(capsys, monkeypatch):
    import warnings

    from tqdm import tqdm

    from tuner.cli import _one_line_warning
    from tuner.cli.search import _warnings_above

    monkeypatch.setattr(warnings, "formatwarning", _one_line_warning)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with tqdm(total=3, file=sys.stderr, desc="study") as bar, _warnings_above(bar):
            bar.update(1)
            warnings.warn("tuner: trial 7 of the study is left out")
            bar.update(1)
    lines = re.split(r"[\r\n]+", capsys.readouterr().err)
    assert "tuner: trial 7 of the study is left out" in lines
    assert warnings.showwarning is not None and "above" not in warnings.showwarning.__name__


def test_importing_the_command_line_loads_neither_numpy_nor_numba():
    """So that main starts at once: it imports the commands, and catches a Ctrl-C while they load."""
    code = "import sys, tuner, tuner.cli; print(sorted({'numpy', 'numba', 'optuna'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n", done.stdout


def test_ctrl_c_while_the_commands_load_ends_in_one_line(monkeypatch, capsys):
    import tuner.cli

    def interrupted(name, package=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(tuner.cli.importlib, "import_module", interrupted)
    assert main(["list"]) == 130
    assert capsys.readouterr().err == "tuner: interrupted\n"


def test_the_public_names_load_at_their_first_use():
    code = ("import sys, tuner; assert 'numpy' not in sys.modules; from tuner import matmul, Config; "
            "print(matmul.__module__, Config.__module__, tuner.tuned.__name__, sorted(tuner.__all__) == tuner.__all__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "tuner.tuned tuner.config tuner.tuned True\n", done.stdout
    missing = subprocess.run([sys.executable, "-c", "import tuner; tuner.nothing"], capture_output=True, text=True)
    assert "AttributeError: module 'tuner' has no attribute 'nothing'" in missing.stderr
    probed = "import tuner; print(hasattr(tuner, '__main__'), hasattr(tuner, 'a.b'), hasattr(tuner, ''))"
    assert subprocess.run([sys.executable, "-c", probed], capture_output=True, text=True,
                          check=True).stdout == "False False False\n"


def test_an_empty_path_option_is_not_given(monkeypatch, tmp_path):
    """`--cache-dir "$UNSET"` leaves the cache where TUNER_CACHE_DIR or the default puts it, not in
    the current directory."""
    from tuner.cache import cache_dir
    from tuner.cli.arguments import _path

    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    assert _path("") == "" and cache_dir(_path("")) == tmp_path


def test_the_package_names_its_version_and_lists_only_its_public_names():
    """As a fresh interpreter sees it: a submodule imported since is an attribute, as in any package."""
    code = ("from importlib import metadata; import tuner; assert tuner.__version__ == "
            "metadata.version(tuner.DISTRIBUTION); print(*[name for name in dir(tuner) if name[:2] != '__'])")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    import tuner

    assert shown == sorted(["DISTRIBUTION", *tuner.__all__])


def test_a_journal_study_name_in_an_error_or_warning_cannot_forge_what_the_terminal_shows(
        tmp_path, capsys, monkeypatch):
    """An error or a tuner warning may quote what a journal holds (the studies there, another study's
    product, another host's worker): anyone's text, shown with its hidden characters replaced."""
    import optuna

    from tuner.storage import open_storage

    journal = str(tmp_path / "j.journal")
    optuna.create_study(study_name="\x1b[2J\x1b[Hall good", storage=open_storage(journal), direction="maximize")
    capsys.readouterr()  # Optuna's own line about it
    assert main(["report", "--storage", journal, "--study", "nosuch", "--cache-dir", str(tmp_path),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "the studies there are: \ufffd[2J\ufffd[Hall good" in err and "\x1b" not in err, err
    said = cli._one_line_warning("tuner: waiting for the trials claimed by ho\x1b[2Jst:1", UserWarning, "x.py", 1)
    assert said == "tuner: waiting for the trials claimed by ho\ufffd[2Jst:1\n"


def test_a_database_error_that_no_rerun_gets_past_is_not_passed_off_as_the_users():
    """A locked, read-only or unreachable study database is one line saying to run again once it is
    free; SQLite's missing table or syntax error is tuner's bug, whose traceback a report needs."""
    import sqlite3

    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import OperationalError

    from tuner.cli import is_user_error

    def failing(message: str, wrapped: bool = False) -> Exception:
        error = OperationalError("UPDATE trials", {}, sqlite3.OperationalError(message))
        if not wrapped:
            return error
        try:
            raise StorageInternalError("An exception is raised during the commit.") from error
        except StorageInternalError as storage_error:
            return storage_error

    for message in ("database is locked", "attempt to write a readonly database", "unable to open database file"):
        assert is_user_error(failing(message)) and is_user_error(failing(message, wrapped=True))
    for message in ("no such table: trials", 'near "SELEC": syntax error'):
        assert not is_user_error(failing(message)) and not is_user_error(failing(message, wrapped=True))

    class ServerDriverError(Exception):
        """A database server's driver error (psycopg2's, PyMySQL's): its bugs are ProgrammingErrors."""

    gone = OperationalError("UPDATE trials", {}, ServerDriverError("SSL SYSCALL error: EOF detected"))
    assert is_user_error(gone)
