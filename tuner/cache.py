"""The per-GPU cache: one human-readable JSON record per (fingerprint, dtype, shape).

Records live under <cache dir>/records/<backend>-<device>-<fingerprint>/<dtype>-<m>x<n>x<k>.json.
They are written atomically (a temporary file, then a rename) under an exclusive lock, so a
reader never sees half a record and concurrent searches merge instead of overwriting each other.
Records measured for this project on real GPUs ship read-only in the repository's cache/.
"""
import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import platformdirs

FORMAT = 1
RUNNERS_UP = 4
REQUIRED = ("format", "fingerprint", "device", "problem", "clock", "best", "runners_up", "budget", "searched")
REQUIRED_IN = {"device": ("backend", "name", "arch"), "problem": ("m", "n", "k", "dtype"),
               "best": ("config", "measurement")}


class CacheError(ValueError):
    """A record that cannot be read or is not a record; the message names the file."""


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """--cache-dir if given, else $TUNER_CACHE_DIR, else the user's cache directory."""
    if override:
        return Path(override)
    if os.environ.get("TUNER_CACHE_DIR"):
        return Path(os.environ["TUNER_CACHE_DIR"])
    return Path(platformdirs.user_cache_dir("tuner"))


def shipped_dir() -> Path:
    """The read-only records that ship with the project (the repository's cache/)."""
    return Path(str(files("tuner.shipped_cache")))


def record_path(root: Path, device_slug: str, problem_key: str) -> Path:
    return root / "records" / device_slug / f"{problem_key}.json"


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on `path`'s companion .lock file, held for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_record(path: Path) -> dict:
    """The record in `path`, or CacheError saying what is wrong with it."""
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CacheError(f"{path}: unreadable ({error})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise CacheError(f"{path}: not a format-{FORMAT} tuner record")
    missing = [key for key in REQUIRED if key not in record]
    missing += [f"{part}.{key}" for part, keys in REQUIRED_IN.items() if isinstance(record.get(part), dict)
                for key in keys if key not in record[part]]
    missing += [part for part in REQUIRED_IN if part in record and not isinstance(record[part], dict)]
    entries = [record.get("best"), *record.get("runners_up", [])]
    if not missing and not all(isinstance(e, dict) and isinstance(e.get("measurement"), dict)
                               and isinstance(e["measurement"].get("gflops"), (int, float))
                               and isinstance(e.get("config"), dict) for e in entries):
        missing.append("a config and gflops in every ranked entry")
    if missing:
        raise CacheError(f"{path}: missing {', '.join(missing)}")
    return record


def _merge(old: dict, new: dict) -> dict:
    """`new`, with its ranking extended by the old record's distinct configurations."""
    entries, seen = [], set()
    for entry in [new["best"], *new["runners_up"], old["best"], *old["runners_up"]]:
        key = json.dumps(entry["config"], sort_keys=True)
        if key not in seen:
            seen.add(key)
            entries.append(entry)
    entries.sort(key=lambda entry: -entry["measurement"]["gflops"])
    return {**new, "best": entries[0], "runners_up": entries[1:RUNNERS_UP + 1]}


def write_record(path: Path, record: dict) -> None:
    """Store `record` at `path`, merged with what another writer may have stored there."""
    with _locked(path):
        if path.exists():
            try:
                record = _merge(read_record(path), record)
            except CacheError:
                pass  # an unreadable old record is replaced, not merged
        text = json.dumps(record, indent=2, sort_keys=True) + "\n"
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as tmp:
            tmp.write(text)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp.name, path)


def record_paths(root: Path) -> Iterator[Path]:
    """Every record file under `root`, in a stable order."""
    yield from sorted((root / "records").glob("*/*.json"))


def record_id(root: Path, path: Path) -> str:
    """A record's name in `tuner list` and `tuner show`: <device dir>/<dtype>-<shape>."""
    return str(path.relative_to(root / "records").with_suffix(""))
