"""The per-GPU cache: one human-readable JSON record per (fingerprint, family, dtype, shape).

Records live under <cache dir>/records/<backend>-<device>-<fingerprint>/<stem>.json, the stem being
the problem's key after its family's prefix (float32-<m>x<n>x<k> for a matmul,
batched-float32-<b>x<m>x<n>x<k> for a stack; record.file_stem). A record is read only at the path its own
device and problem name: one moved or copied into another device's folder or another shape's file is
refused, never used as tuned there. Records are written atomically (a temporary file, then a rename)
under an exclusive lock, so a reader never sees half a record, and the temporary file of a writer
killed mid-write is removed by the next writer. A record holds one study's measurements only:
nothing read back from an older record is merged into a new one (a search re-measures the
configurations of the record it replaces). Records measured for this project on real GPUs ship
read-only in the repository's cache/.
"""
import functools
import json
import os
import stat
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import platformdirs

from . import record
from .disk import closed_folder, locked, read_regular_file, user_path, write_atomically
from .formats import printable


class CacheError(ValueError):
    """A record that cannot be read or is not a record; the message names the file."""


class MisfiledRecord(CacheError):
    """A sound record at another record's path; the message says what to do."""


class NotReadable(CacheError):
    """A record, or a folder of records, that this user may not read (another user's, in a shared
    cache): nothing is wrong with it, and the message says who can open it up."""


def _not_readable(path: Path, error: PermissionError, records: str = "") -> NotReadable:
    """NotReadable for the record file at `path`, or for the folder there that holds `records` (a
    pattern of their files), which `error` refused this user: naming the first folder on the way
    that they may not enter, else `path` itself, with its owner and mode where seen."""
    blocked = closed_folder(path) or path
    try:
        info = os.stat(blocked)
        whose = f"; it belongs to {'you' if info.st_uid == os.geteuid() else f'user {info.st_uid}'}, mode " \
                f"{stat.S_IMODE(info.st_mode):o}"
    except OSError:
        whose = ""
    file = blocked == path and not records
    what, mode = ("it", "a+r") if file else (f"the folder {blocked}", "a+rX")
    return NotReadable(f"{path / records if records else path}: you may not read {what} ({error.strerror or error}"
                       f"{whose}): its owner can let you (chmod {mode}), or use a cache directory of your own "
                       "(--cache-dir, TUNER_CACHE_DIR)")


def cache_dir(override: str | os.PathLike | None = None, option: str = "--cache-dir ") -> Path:
    """--cache-dir if given (the `option` that gave it, for messages), else $TUNER_CACHE_DIR, else
    the user's cache directory; ValueError if that is something other than a directory."""
    if override is not None and not isinstance(override, (str, os.PathLike)):
        raise TypeError(f"{option.strip()} must be a path, not {type(override).__name__}")
    if override:
        root, given = user_path(override), f"{option}{override}"
    elif os.environ.get("TUNER_CACHE_DIR"):
        root = user_path(os.environ["TUNER_CACHE_DIR"], "TUNER_CACHE_DIR")
        given = f"TUNER_CACHE_DIR={os.environ['TUNER_CACHE_DIR']}"
    else:
        root, given = _user_cache_dir(), f"the cache directory {_user_cache_dir()}"
    if root.exists() and not root.is_dir():
        raise ValueError(f"{given} is not a directory; give a directory (a missing one is created)")
    return root


@functools.cache
def _user_cache_dir() -> Path:
    """The platform's user cache directory for tuner, asked once: tuner.matmul looks it up per call.
    A relative $XDG_CACHE_HOME is ignored, as the XDG specification says and platformdirs does since
    4.11.8 (an older one takes it). ValueError where there is no home to put it in (HOME unset or
    relative, and this user missing from the password database, as in a container run under an
    arbitrary user id)."""
    try:
        found = Path(platformdirs.user_cache_dir("tuner"))
    except RuntimeError:  # platformdirs: "could not determine the home directory"
        found = None
    if found == Path(os.environ.get("XDG_CACHE_HOME", ""), "tuner") and not found.is_absolute():
        found = Path(os.path.expanduser("~/.cache/tuner"))  # platformdirs' default without it, on Linux
    if found is None or not found.is_absolute():  # an older platformdirs leaves the ~ of a home it cannot find
        raise ValueError("no home directory to hold the cache (HOME is unset or not an absolute path, and this user "
                         "has no entry in the password database): set TUNER_CACHE_DIR (or --cache-dir) to a "
                         "directory, or HOME to an absolute path")
    return found


def shipped_dir() -> Path:
    """The read-only records that ship with the project (the repository's cache/)."""
    return Path(str(files("tuner.shipped_cache")))


def record_path(root: Path, device_slug: str, stem: str) -> Path:
    """Where the record of a device's folder and a problem's file stem (record.file_stem) lies."""
    return root / "records" / device_slug / f"{stem}.json"


def read_record(path: Path) -> record.Record:
    """The record in `path`, migrated and checked; CacheError saying what is wrong."""
    try:
        raw = read_regular_file(path, record.MAX_BYTES)
        if len(raw) > record.MAX_BYTES:
            raise OSError(f"over {record.MAX_BYTES} bytes, too large to be a record")
        data = json.loads(raw)
    except PermissionError as error:
        raise _not_readable(path, error) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise CacheError(f"{path}: unreadable ({type(error).__name__}: {str(error)[:200]})") from None
    try:
        loaded = record.Record.from_dict(data)
    except record.RecordError as error:
        raise CacheError(f"{path}: {error}") from None
    problem = _misfiled(path, loaded)
    if problem:
        raise MisfiledRecord(f"{path}: {problem}")
    return loaded


def _misfiled(path: Path, loaded: record.Record) -> str:
    """Why a sound record does not belong at `path`, or "" if it does."""
    if f"{path.parent.name}/{path.name}" == loaded.home:
        return ""
    return (f"holds the record of {loaded.home}, so it was moved or copied here by hand: move it back there, "
            "or delete it")


def write_record(path: Path, new: record.Record) -> None:
    """Store the record `new` at `path`, replacing what is there, under the record's lock."""
    with locked(path):
        store(path, new)


def store(path: Path, new: record.Record) -> None:
    """Write the record `new` to `path` atomically; the caller holds locked(path). A new record is
    its writer's alone (mode 600); one that replaces a record keeps that record's mode, so that a
    record its owner let others read (a shared cache's) stays readable. A record that would not
    load back, or belongs elsewhere, is a bug here and is refused unwritten."""
    data = new.as_dict()
    try:
        problem = _misfiled(path, record.Record.from_dict(data))
    except record.RecordError as error:
        problem = str(error)
    if problem:
        raise AssertionError(f"refusing to write an invalid record to {path}: {problem}")
    try:
        replaces = stat.S_ISREG(os.lstat(path).st_mode)  # not a symbolic link's target's mode
    except FileNotFoundError:
        replaces = False
    write_atomically(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(), keep_mode=replaces)


def record_paths(root: Path, unreadable: list | None = None) -> list[Path]:
    """Every record file under `root` (records/<device>/<name>.json, hidden names left out, as a
    glob leaves them), in a stable order; a CacheError (NotReadable where this user may not) for
    each folder there that cannot be listed is added to `unreadable` (if given), since its records
    go unseen."""
    def listing(folder: Path, pattern: str) -> list[Path]:
        try:
            with os.scandir(folder) as entries:
                return [Path(entry.path) for entry in entries if not entry.name.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):  # no records yet; a file beside the folders
            return []
        except OSError as error:  # a folder this user may not list, or that cannot be (a loop of links)
            if unreadable is not None:
                unreadable.append(_not_readable(folder, error, pattern) if isinstance(error, PermissionError) else
                                  CacheError(f"{folder / pattern}: unreadable ({type(error).__name__}: "
                                             f"{error.strerror or error})"))
            return []

    return sorted(path for folder in listing(root / "records", "*/*.json") for path in listing(folder, "*.json")
                  if path.name.endswith(".json"))


def record_id(root: Path, path: Path) -> str:
    """A record's name in `tuner list` and `tuner show`: <device dir>/<file stem>."""
    return str(path.relative_to(root / "records").with_suffix(""))


@dataclass(frozen=True)
class Stored:
    """A readable record, where it was found, and its name in `tuner list`."""

    record: record.Record
    path: Path
    id: str  # <device dir>/<file stem>
    shipped: bool  # from the project's read-only records rather than the user's cache

    def regenerated_on(self, device) -> bool:
        """Whether `tuner regenerate` on `device` takes this record's product: not the simulator's
        products on a GPU (no GPU's), nor one shipped only for another GPU model (tuner search tunes
        it there if it is wanted)."""
        found = self.record.device
        return not (found.simulated and not device.simulated) and not (self.shipped and found.model != device.model)


_REWRITE = "delete it; the next tuner search of its product writes it again"


@dataclass(frozen=True)
class Catalog:
    """Every readable record of the user's cache, then of the shipped ones; and why the others
    could not be read, as a terminal can show it (formats.printable: in a shared cache a file's
    name is anyone's). The one way modules look records up."""

    stored: tuple[Stored, ...]
    skipped: tuple[CacheError, ...]

    @classmethod
    def read(cls, root: Path) -> "Catalog":
        stored, skipped = [], []
        for directory in (root, shipped_dir()):
            refused = []  # the folders of records this user may not list, then the records not read
            for path in record_paths(directory, refused):
                try:
                    stored.append(Stored(read_record(path), path, record_id(directory, path), directory != root))
                except CacheError as error:
                    refused.append(error)
            for error in refused:
                user = directory == root and not isinstance(error, (MisfiledRecord, NotReadable))
                skipped.append(CacheError(printable(f"{error}; {_REWRITE}" if user else str(error))))
        return cls(tuple(stored), tuple(skipped))

    def select(self, *, backend: str | None = None, fingerprint: str | None = None, model: dict | None = None,
               family: str | None = None, dtype: str | None = None) -> list[Stored]:
        """The records that match every criterion given: the device's backend, fingerprint or
        hardware model (Device.model), the kernel family, or the product's dtype."""
        return [found for found in self.stored
                if (backend is None or found.record.device.backend == backend)
                and (family is None or found.record.family == family)
                and (fingerprint is None or found.record.fingerprint == fingerprint)
                and (model is None or found.record.device.model == model)
                and (dtype is None or found.record.problem.dtype == dtype)]
