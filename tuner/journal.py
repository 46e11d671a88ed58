"""A study's journal file: checked when opened, and repaired after a torn write.

Optuna's journal is one JSON entry per line, appended under a lock. A write cut short (a process
killed mid-append, a full disk) leaves a torn line with no newline. Optuna skips a torn last line,
but the next append lands on the same line, and from then on the whole journal is unreadable.
Opening a journal here moves the torn bytes aside to a file of their own, keeps every whole entry
(an entry appended onto a torn line included), and says so in one line. Only bytes that are the
start of an Optuna entry, or NUL bytes (which a file system leaves where a power loss came
between a file's growth and its data), are ever moved: a file that is not a journal is refused,
never rewritten.
"""
import json
import warnings
from datetime import datetime, timezone
from pathlib import Path

from .disk import remove_stale_temporaries, write_atomically

ENTRY_START = b'{"op_code":'
# NUL bytes that a power loss leaves come from a few unwritten pages; more is no journal's.
MAX_NULS = 1 << 20


class JournalError(ValueError):
    """A --storage file that cannot be used as a journal; the message names it and says what to do."""


class NotAJournal(JournalError):
    """A path that holds something other than a study journal (a folder, or a file whose first
    line is no journal entry), as opposed to a journal that is damaged."""


class JournalRepairedWarning(UserWarning):
    """Torn bytes were moved out of a study's journal; the study goes on without them."""


def _entry(fragment: bytes) -> bool:
    try:
        return isinstance(json.loads(fragment), dict) and fragment.startswith(ENTRY_START)
    except ValueError:
        return False


def _torn(fragment: bytes) -> bool:
    """Whether `fragment` is the start of an entry whose write was cut short, after the NUL bytes,
    if any, that a power loss left where a write was lost."""
    start = fragment.lstrip(b"\0")
    if len(fragment) - len(start) > MAX_NULS:
        return False
    return start.startswith(ENTRY_START) or ENTRY_START.startswith(start)


def _split(line: bytes) -> list[bytes]:
    """A line as the entries written onto it: a torn entry (or NUL bytes) followed by whole ones."""
    starts, found = [0], line.find(ENTRY_START, 1)
    while found != -1:
        starts.append(found)
        found = line.find(ENTRY_START, found + 1)
    return [line[start:end] for start, end in zip(starts, starts[1:] + [len(line)])]


def what_to_do(default: bool, named: str) -> str:
    """What to do about a journal that cannot be used: `named` for one the user named, and for the
    `default` one of a device under the cache, which holds every study of that device, what frees it."""
    return ("move it aside or restore it from a copy (it holds every study of this device); tuner search --storage "
            "PATH keeps a study elsewhere") if default else named


def check(path: Path, label: str, default: bool = False) -> None:
    """Refuse, with what to do, a journal path that cannot hold a study: a missing directory, or
    a file that is not an Optuna journal. `default`: the device's journal, which the user did not name."""
    if not path.parent.is_dir():
        raise JournalError(f"{label}: its directory {path.parent} does not exist; create it, or give a "
                           "journal path in an existing directory")
    if path.exists() and not path.is_file():
        raise NotAJournal(f"{label} is not a file; {what_to_do(default, 'give a journal file path')}")
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as file:
            first = file.readline(MAX_NULS + 2)  # a longer first line passes as a torn one, unless it is NULs
        fragments = _split(first.rstrip(b"\r\n"))
        ended = first.endswith(b"\n")  # then it holds a whole entry; else it may be torn bytes alone
        if not (all(_entry(fragment) or _torn(fragment) for fragment in fragments)
                and (not ended or any(map(_entry, fragments)))):
            raise NotAJournal(f"{label} is not an Optuna journal (its first line is not a journal entry); "
                               + what_to_do(default, "give a new file name, or the journal of an existing study"))


def repair(path: Path, label: str, default: bool = False) -> None:
    """Make the journal at `path` whole again, torn bytes moved aside and every whole entry ending
    its own line (one whose newline was lost included); the caller holds the journal's append lock.
    `default` as in check."""
    path = path.resolve()  # a symbolic link's target is the journal every worker appends to
    remove_stale_temporaries(path)
    if not path.exists():
        return
    content = path.read_bytes()
    kept, torn = [], []
    for line in content.splitlines(keepends=True):
        if line.endswith(b"\n") and _entry(line.rstrip(b"\r\n")):
            kept.append(line)
            continue
        for fragment in filter(None, _split(line.rstrip(b"\r\n"))):  # a blank line goes
            if _entry(fragment):
                kept.append(fragment + b"\n")
            elif _torn(fragment):
                torn.append(fragment)
            else:
                raise JournalError(f"{label} holds a line that is no Optuna journal entry ({fragment[:60]!r}...); "
                                   + what_to_do(default, "restore the journal, or give a new file name"))
    repaired = b"".join(kept)
    if repaired == content:
        return
    if torn:
        aside = path.with_name(f"{path.name}.torn-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%fZ')}")
        # A new file renamed into place: on a full disk none is left (nor the journal changed), and
        # a symbolic link or a FIFO at the name is replaced, not written through or waited on.
        write_atomically(aside, b"\n".join(torn) + b"\n")
    write_atomically(path, repaired, keep_mode=True)
    if torn:
        warnings.warn(f"tuner: the study journal {label} had {sum(map(len, torn))} torn bytes (a write cut short by "
                      f"a crash, a power loss or a full disk); they were moved to {aside}, and the study goes on",
                      JournalRepairedWarning, stacklevel=3)
