"""Recorded tuning spaces: each configuration's measured time, read from a Kernel Tuner cache file
or from this project's sweep files, so that searches can be replayed offline."""
import gzip
import io
import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

from .disk import NotARegularFile, read_regular_file

# A space the size of the hotspot kernel's (about 400,000 configurations of 32 repetitions each)
# takes about 400 MB of JSON, which loads into 1.8 GiB of memory
# (bench/results/large_recording_load.txt); a larger file than 1 GiB is refused before it can fill
# the memory.
MAX_BYTES = 1 << 30


class RecordingError(ValueError):
    """A file that is not a readable recorded space."""


@dataclass(frozen=True)
class Result:
    """One recorded configuration: its time (None if it failed), why it failed, and the seconds
    the recording spent on it (compile, verification and benchmark), which a replay charges."""

    seconds: float | None
    failure: str
    cost: float


@dataclass
class RecordedSpace:
    """A recorded space: ordered parameter domains, and a result per recorded configuration
    (a tuple of values in domain order). A combination with no result is invalid. Recorded
    configurations with a value outside the domains, which no search can suggest, are left out
    and counted in `left_out`."""

    name: str
    domains: dict[str, tuple]
    results: dict[tuple, Result]
    left_out: int = 0

    @property
    def optimum(self) -> float:
        """The best recorded time, in seconds."""
        return min(result.seconds for result in self.results.values() if result.seconds is not None)

    def __post_init__(self):
        reachable = {key: result for key, result in self.results.items()
                     if all(value in domain for value, domain in zip(key, self.domains.values()))}
        self.left_out += len(self.results) - len(reachable)
        self.results = reachable
        if not any(result.seconds is not None for result in self.results.values()):
            raise RecordingError(f"{self.name}: no configuration within its parameter domains was measured "
                                 "successfully")


def load(path: str | Path) -> RecordedSpace:
    """Read a Kernel Tuner cache file (JSON, gzipped or not, possibly left open), a Kernel Tuner
    output file in the T4 format, or a tuner sweep file (JSON lines from bench/sweep.py: one that
    starts with its header, or any .jsonl file)."""
    path = Path(path)
    raw = _read(path)
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.GzipFile(fileobj=io.BytesIO(raw)).read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise RecordingError(f"{path}: over {MAX_BYTES >> 20} MiB uncompressed, too large for a recorded space; "
                                 "for a tuner sweep, replay its .jsonl file, not its Kernel Tuner export")
        text = raw.decode()
    except (UnicodeDecodeError, EOFError, gzip.BadGzipFile, zlib.error):
        raise RecordingError(f"{path}: neither JSON nor gzipped JSON") from None
    if text.lstrip().startswith('{"header"') or path.suffix == ".jsonl":
        return _from_sweep(path, text)
    document = _json(path, text)
    if isinstance(document, dict) and "results" in document and "cache" not in document:
        return _from_t4(path, document)
    return _from_kernel_tuner(path, document)


def _read(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_BYTES; a FIFO or a device is refused without
    blocking or reading on."""
    try:
        raw = read_regular_file(path, MAX_BYTES)
    except NotARegularFile:
        raise RecordingError(f"{path}: not a regular file; give a Kernel Tuner cache file or a sweep file") from None
    except OSError as error:
        raise RecordingError(f"{path}: cannot be read ({error.strerror or error})") from None
    if len(raw) > MAX_BYTES:
        raise RecordingError(f"{path}: over {MAX_BYTES >> 20} MiB, too large for a recorded space")
    return raw


def _json(path: Path, text: str):
    """Parse a Kernel Tuner cache, closing it first if the run that wrote it never finished
    (Kernel Tuner appends entries and writes the closing braces only at the end)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    except RecursionError:
        raise RecordingError(f"{path}: not a Kernel Tuner cache file (nested too deeply)") from None
    try:
        return json.loads(text.rstrip().rstrip(",") + "}}")
    except (json.JSONDecodeError, RecursionError) as error:
        raise RecordingError(f"{path}: not a Kernel Tuner cache file ({str(error) or 'nested too deeply'})") from None


def _from_kernel_tuner(path: Path, document) -> RecordedSpace:
    if not isinstance(document, dict):
        raise RecordingError(f"{path}: not a Kernel Tuner cache file (its top level is not an object)")
    try:
        names = document["tune_params_keys"]
        if not (isinstance(names, list) and all(isinstance(name, str) for name in names)):
            raise RecordingError(f"{path}: its tune_params_keys must be a list of parameter names, not {names!r:.80}")
        if len(set(names)) != len(names):
            raise RecordingError(f"{path}: its tune_params_keys name a parameter twice: {names}")
        domains = {name: _domain(path, name, document["tune_params"][name]) for name in names}
        entries = document["cache"]
        if not isinstance(entries, dict):
            raise RecordingError(f"{path}: its cache must be an object of configurations, not a "
                                 f"{type(entries).__name__}")
        results = {}
        for entry in entries.values():
            key = tuple(entry[name] for name in names)
            time = entry["time"]
            if time == "InvalidConfig":
                continue
            cost = sum(entry.get(field) or 0 for field in ("compile_time", "verification_time", "benchmark_time")) / 1e3
            if isinstance(time, str):
                results[key] = Result(None, time, cost)
            elif _positive_seconds(time) and time / 1e3 > 0:  # milliseconds, which may round to 0 s
                results[key] = Result(time / 1e3, "", cost)
            else:
                results[key] = Result(None, f"time {time!r}", cost)
    except KeyError as error:
        raise RecordingError(f"{path}: not a Kernel Tuner cache file (it lacks {error})") from None
    except (TypeError, AttributeError) as error:
        raise RecordingError(f"{path}: not a Kernel Tuner cache file (a field of the wrong type: {error})") from None
    device = document.get("device_name") or "a device it does not name"
    return RecordedSpace(f"{document.get('kernel_name') or path.name} on {device}",
                         domains, results)


# T4's failures, under the names a Kernel Tuner cache gives them; "constraints" is an invalid
# combination, which a cache leaves out too.
_T4_FAILURES = {"compile": "CompilationFailedConfig", "runtime": "RuntimeFailedConfig", "correctness": "correctness"}
# T4's time units, each as how many make a second (divided by, as a Kernel Tuner cache's ms are).
_T4_UNITS = {"s": 1.0, "seconds": 1.0, "ms": 1e3, "milliseconds": 1e3, "miliseconds": 1e3, "us": 1e6,
             "microseconds": 1e6, "ns": 1e9, "nanoseconds": 1e9}


def _t4_per_second(path: Path, unit) -> float:
    """How many of a T4 time unit make a second."""
    per_second = _T4_UNITS.get(str(unit).lower())
    if per_second is None:
        raise RecordingError(f"{path}: its time unit {unit!r} is not one of: {', '.join(_T4_UNITS)}")
    return per_second


def _from_t4(path: Path, document: dict) -> RecordedSpace:
    """A Kernel Tuner output file in the T4 format (results, schema_version): the domains are the
    values its configurations take. Times are in the file's unit (metadata.timeunit), else in
    milliseconds as Kernel Tuner writes them; a correct result's time is its measurement named
    "time", in that measurement's unit where it gives one. A failed result needs no measurement."""
    try:
        entries = document["results"]
        if not isinstance(entries, list):
            raise RecordingError(f"{path}: not a T4 results file (its results are not a list)")
        unit = (document.get("metadata") or {}).get("timeunit") or "ms"
        per_second = _t4_per_second(path, unit)
        names = list(entries[0]["configuration"]) if entries else []
        values = {name: [] for name in names}
        results = {}
        for entry in entries:
            configuration = entry["configuration"]
            if set(configuration) != set(names):
                raise RecordingError(f"{path}: its configurations name different parameters: {names} and "
                                     f"{list(configuration)}")
            key = tuple(configuration[name] for name in names)
            for name, value in zip(names, key):
                values[name].append(value)
            invalidity = entry["invalidity"]
            if invalidity == "constraints" or key in results:
                continue
            times = entry.get("times") or {}
            spent = sum(times.get(field) or 0 for field in ("compilation", "compilation_time", "validation"))
            spent += times["benchmark"] if times.get("benchmark") else sum(times.get("runtimes") or ())
            cost = spent / per_second
            if invalidity != "correct":
                results[key] = Result(None, _T4_FAILURES.get(invalidity, str(invalidity)), cost)
                continue
            time = next(measured for measured in entry["measurements"] if measured["name"] == "time")
            seconds = (time["value"] / _t4_per_second(path, time.get("unit") or unit)
                       if _positive_seconds(time["value"]) else 0)
            if seconds > 0:
                results[key] = Result(seconds, "", cost)
            else:
                results[key] = Result(None, f"time {time['value']!r}", cost)
    except StopIteration:
        raise RecordingError(f"{path}: a T4 result has no measurement named 'time', which a replay needs") from None
    except KeyError as error:
        raise RecordingError(f"{path}: not a T4 results file (a result lacks {error})") from None
    except (TypeError, AttributeError, IndexError) as error:
        raise RecordingError(f"{path}: not a T4 results file (a field of the wrong type: {error})") from None
    domains = {name: _domain(path, name, taken) for name, taken in values.items()}
    return RecordedSpace(path.name, domains, results)


def _positive_seconds(value) -> bool:
    """Whether `value` is a time a search can compare: a finite number above 0 (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _domain(path: Path, name: str, values) -> tuple:
    """Parameter `name`'s domain from the values a recording gives it, each once: in ascending order
    when they are all numbers (the local search moves along it), else as written. RecordingError
    where they are no list of numbers, strings, booleans and nulls."""
    scalar = (str, int, float, bool, type(None))
    if not isinstance(values, list) or not all(
            isinstance(value, scalar) and not (isinstance(value, float) and not math.isfinite(value))
            for value in values):
        raise RecordingError(f"{path}: parameter {name!r} must take a list of numbers, strings, booleans or "
                             f"nulls, not {values!r:.80}")
    domain = list(dict.fromkeys(values))
    numeric = all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in domain)
    return tuple(sorted(domain) if numeric else domain)


def _from_sweep(path: Path, text: str) -> RecordedSpace:
    """A sweep file: the space's domains come from the project's own space for its backend and
    dtype; the configurations not measured (a sampled sweep) are left out of the replay."""
    from .backends import get_backend
    from .space import Space

    try:
        lines = list(enumerate(text.splitlines(), start=1))
        if not text.endswith("\n"):
            lines = lines[:-1]  # cut off mid-line by a sweep that was killed
        lines = [(number, line) for number, line in lines if line.strip()]
        parsed = []
        for number, line in lines:
            try:
                parsed.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise RecordingError(f"{path}: line {number} is not JSON ({error.msg}); not a tuner sweep "
                                     "file") from None
        lines = parsed
        header = lines[0][1]["header"]
        name = f"tuner {header['problem']} on {header['device']['name']}"
        dtype = header["problem"].rpartition("-")[0]  # the key is dtype-MxNxK, and a dtype may hold a dash
        space = Space.of(get_backend(header["device"]["backend"]), dtype)
        domains = space.domains()
        results = {}
        for number, row in lines[1:]:
            key = tuple(row["config"][name] for name in domains)
            cost = sum(row.get(field) or 0 for field in ("compile_seconds", "load_seconds", "verification_seconds"))
            if row["status"] == "ok":
                if not _positive_seconds(row["median_seconds"]):
                    raise RecordingError(f"{path}: line {number}: median_seconds must be a positive number of "
                                         f"seconds, not {row['median_seconds']!r}")
                results[key] = Result(row["median_seconds"], "", cost + sum(row["times"]))
            else:
                results[key] = Result(None, row["status"], cost)
    except RecordingError:
        raise  # a sweep file with a bad row, which names the row
    except (json.JSONDecodeError, KeyError, TypeError, IndexError, ValueError, AttributeError, RecursionError) as error:
        raise RecordingError(f"{path}: not a tuner sweep file ({type(error).__name__}: {error})") from None
    return RecordedSpace(name, domains, results)
