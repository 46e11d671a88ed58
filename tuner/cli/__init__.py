"""The `tuner` command line: the parser of every command, and how `main` runs one and shows its
errors. Each command's options and handler live together in a module of this package, imported
by `main`, so that a Ctrl-C while they load ends in one line too."""
import argparse
import atexit
import contextlib
import difflib
import functools
import importlib
import json
import os
import re
import sys
import warnings
from importlib import metadata
from pathlib import Path

from .. import DISTRIBUTION
from ..formats import printable

# The modules of the commands, in the order --help lists them.
COMMANDS = ("kernel", "search", "records", "report", "regenerate", "replay", "devices")


class _Parser(argparse.ArgumentParser):
    """argparse that shows a usage mistake in one line instead of a usage block, and a failure to
    write --help or --version to stdout as main does any command's (argparse would ignore it)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _print_message(self, message, file=None):
        if file is None or file is not sys.stdout:  # stderr, or no stdout at all (closed): as argparse does
            super()._print_message(message, file)
            return
        try:
            file.write(message)
            file.flush()
        except BrokenPipeError:
            discard_output()
            self.exit(141)
        except OutputError as error:
            discard_output()
            self.exit(2, f"{self.prog}: error: {error}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tuner", description="Code-generation autotuner for tiled matmul in Numba.")
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {metadata.version(DISTRIBUTION)} ({DISTRIBUTION})")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        importlib.import_module(f".{command}", __name__).add_parsers(subparsers)
    parser.commands = subparsers.choices  # each command's parser, by name
    return parser


def parse(argv) -> argparse.Namespace:
    """The command line's arguments; an option the command does not take is named by that command's
    parser, with the option it likely meant, and one of the command's given before it is said so."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        taken = parser.commands[args.command]
        # argparse has no public list of a parser's actions. Its private _actions, unchanged since
        # argparse began, holds all, those of parents= and groups too, which an add_argument override misses.
        options = [option for action in taken._actions for option in action.option_strings]
        given = unknown[0].partition("=")[0]
        if given in options:
            parser.error(f"{given} is an option of tuner {args.command}: give it after the command")
        meant = difflib.get_close_matches(given, options, n=1)
        taken.error(f"unrecognized arguments: {' '.join(unknown)}" + (f"; did you mean {meant[0]}?" if meant else ""))
    return args


def is_user_error(error: Exception) -> bool:
    """Whether `error` is a mistake or a missing piece the user can fix, shown as one line."""
    from ..resources import CountUnavailable
    from ..runtime import RuntimeUnavailable

    return isinstance(error, (ValueError, OSError, ImportError, RuntimeUnavailable, CountUnavailable)) or \
        _database_failure(error) is not None


# What SQLite's OperationalError says where its file is busy, read-only, full or out of reach, which the
# user can fix and a rerun gets past. SQLite raises that class for tuner's own bugs too (no such table, a
# syntax error), which the servers' drivers raise as ProgrammingError.
_SQLITE_UNAVAILABLE = re.compile(r"locked|read-?only|unable to open|disk i/o|disk is full|not a database", re.I)


def _database_failure(error: Exception):
    """SQLAlchemy's OperationalError behind `error` (raised as it is or wrapped in Optuna's
    StorageInternalError), the study's database failing under a command (a server gone, a lock
    held too long by another process, a read-only file; for SQLite only those of
    _SQLITE_UNAVAILABLE); else None."""
    if "sqlalchemy.exc" not in sys.modules:  # never imported: no database was opened
        return None
    import sqlite3

    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import OperationalError

    cause = error.__cause__ if isinstance(error, StorageInternalError) else error
    if not isinstance(cause, OperationalError):
        return None
    return cause if not isinstance(cause.orig, sqlite3.Error) or _SQLITE_UNAVAILABLE.search(str(cause.orig)) else None


def explain(error: Exception, storage_from_environment: bool = False) -> str:
    """The one line for a user error, with what to do where the error does not say it; a storage
    that cannot be used named as TUNER_STORAGE=URL where `storage_from_environment`."""
    from ..disk import NotALockFile
    from ..kernel import UnsafeKernelDirectory
    from ..storage import StorageError

    if isinstance(error, json.JSONDecodeError):  # tuner's own files are read with their own errors: Optuna's journal
        return (f"a study journal holds a line that is not whole ({error}), as another process's write cut short "
                "leaves; run the command again, which moves the torn bytes aside")
    if isinstance(error, ImportError):
        return f"{error} (install tuner with its backend's extra: pip install -e '.[cuda]', or '.[roc]')"
    if isinstance(error, StorageError):
        return error.named(storage_from_environment)
    failure = _database_failure(error)
    if failure is not None:
        return (f"the study's database failed: {str(failure).strip().splitlines()[0]}; what it holds is kept: run "
                "the command again once it is free (no other process holding it locked, writable, its server up)")
    if isinstance(error, PermissionError) and isinstance(error.filename, (str, bytes, os.PathLike)):
        return _permission_denied(error)
    if isinstance(error, OSError) and not isinstance(error, (UnsafeKernelDirectory, NotALockFile)):  # say what to do
        return f"{error} (check --cache-dir, TUNER_CACHE_DIR, TUNER_KERNEL_DIR and disk space)"
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _permission_denied(error: PermissionError) -> str:
    """The line for a file or folder this user may not use: whose it is (the file, else the folder
    it would be made in, or this user may not look in, else the first folder on the way that this
    user may not enter) and what to do."""
    from ..disk import closed_folder

    path = os.fsdecode(error.filename)
    seen = path if os.path.lexists(path) else os.path.dirname(path) or "."
    what = "it" if seen == path else f"its folder {seen}"
    closed = None if os.path.exists(seen) else closed_folder(Path(path))
    if closed is not None:  # nothing behind it can be seen
        seen, what = str(closed), f"the folder {closed} on its way"
    try:
        info = os.stat(seen)
    except OSError:
        whose, remedy = "", "check its permissions and its folders'"
    else:
        mode = f"mode {info.st_mode & 0o7777:o}"
        whose, remedy = ((f"; {what} is yours, {mode}", f"give yourself access (chmod u+rwX {seen})")
                         if info.st_uid == os.geteuid() else
                         (f"; {what} belongs to user {info.st_uid}, {mode}", "its owner can let you use it"))
    return (f"this user may not use {path} ({error.strerror or error}{whose}): {remedy}, or give tuner a cache "
            "directory of your own (--cache-dir, TUNER_CACHE_DIR) or a --storage of your own")


class OutputError(OSError):
    """A write to stdout that failed for another reason than its reader leaving (a full disk)."""


class _Output:
    """sys.stdout while a command runs: a write that fails raises OutputError, so that it is not taken
    for a failure of the cache; one whose reader left still raises BrokenPipeError. Text the stream's
    encoding cannot hold (a path named in bytes that are no UTF-8, from TUNER_CACHE_DIR say, on a
    terminal whose errors are strict) is written with Python's escapes, as stderr writes it."""

    def __init__(self, stream):
        self._stream = stream

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def write(self, text: str) -> int:
        try:
            return self._do(self._stream.write, text)
        except UnicodeEncodeError:  # raised before anything is written
            encoding = getattr(self._stream, "encoding", None) or "utf-8"
            return self._do(self._stream.write, text.encode(encoding, "backslashreplace").decode(encoding))

    def flush(self) -> None:
        self._do(self._stream.flush)

    @staticmethod
    def _do(operation, *arguments):
        try:
            return operation(*arguments)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise OutputError(f"cannot write the output to stdout: {error.strerror or error}; send it to a file or "
                              "pipe that can take it") from error


def discard_output() -> None:
    """Send what stdout still holds to /dev/null, so that the flush when Python exits cannot fail."""
    with contextlib.suppress(OSError, ValueError):  # a stdout with no file behind it has nothing to flush
        descriptor = sys.stdout.fileno()
        os.dup2(os.open(os.devnull, os.O_WRONLY), descriptor)


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """tuner's warnings (which start with "tuner: ") as the line they say; others as Python shows them."""
    if str(message).startswith("tuner: "):
        return f"{printable(str(message))}\n"  # it may quote a journal's text (another host's worker)
    return _python_warning(message, category, filename, lineno, line)


_python_warning = warnings.formatwarning


def main(argv=None) -> int:
    warnings.formatwarning = _one_line_warning
    stdout, stderr = sys.stdout, sys.stderr
    # A stream the caller closed (`>&-`) is None, which sys.stdout.write() fails on and print(file=None) takes
    # for stdout: what is meant for it goes nowhere instead.
    sys.stdout = _Output(_nowhere() if stdout is None else stdout)
    sys.stderr = _nowhere() if stderr is None else stderr
    try:
        args = parse(argv)
        status = _run(args)
        sys.stdout.flush()  # output still buffered fails here, not as Python exits
        return status
    except BrokenPipeError:  # the reader of our output left (`tuner list | head`): stop quietly, as Unix tools do
        from ..stopping import stop_status

        discard_output()
        return stop_status() or 141
    except KeyboardInterrupt:  # before a command ran (while the command line loaded): _run says it otherwise
        print("tuner: interrupted", file=sys.stderr)
        return 130
    except OutputError as error:
        discard_output()
        print(f"tuner {args.command}: error: {error}", file=sys.stderr)
        return 2
    finally:
        sys.stdout, sys.stderr = stdout, stderr


@functools.cache
def _nowhere():
    """/dev/null for a stream the caller closed, opened once and closed only as Python exits: what
    took it while a command ran (Optuna's log handler, made on its first import) may write to it
    after main returns. (logging's own flush at exit, which comes later, ignores a closed file.)"""
    sink = open(os.devnull, "w")
    atexit.register(sink.close)
    return sink


def _run(args) -> int:
    """Run the parsed command: its exit status, a user's mistake said in one line (a NUMBA_ENABLE_CUDASIM
    that Numba cannot read too, whatever the command), and a stop with what the command keeps (its
    `on_stop` default, where it sets one)."""
    from .. import simulator
    from ..stopping import Terminated
    from ..storage import redacted
    from .arguments import from_environment

    try:
        # A NUMBA_ENABLE_CUDASIM that Numba cannot read is refused here, before a command loads Numba,
        # which would warn of it with a traceback and take it for 0.
        simulator.enabled()
        return args.run(args) or 0
    except (BrokenPipeError, OutputError):
        raise
    except KeyboardInterrupt as stop:
        terminated = isinstance(stop, Terminated)
        print(f"tuner {args.command}: {'terminated (SIGTERM)' if terminated else 'interrupted'}"
              + (f"; {args.on_stop}" if getattr(args, "on_stop", None) else ""), file=sys.stderr)
        return 143 if terminated else 130
    except Exception as error:
        if not is_user_error(error):
            raise
        # The line may quote what a journal holds (the studies there, another study's product): anyone's text.
        storage = getattr(args, "storage", None) or ""
        print(f"tuner {args.command}: error: "
              f"{printable(redacted(explain(error, from_environment(storage)), storage))}", file=sys.stderr)
        return 2
