"""A cache record as types: what one search found for one product on one device, and its format.

On disk a record is JSON that anyone could have edited. Loading migrates an older format up to
the current one, checks every field for its type, range and known names (schema.py), then builds
the types. A configuration may hold values that break today's rules: the record still loads, and
`valid_configs` leaves those out, so that `tuner regenerate` re-tunes the product instead of
skipping the record. No kernel source is ever read from a record: kernels are rendered
from the installed templates.
"""
import math
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone

from .backends import BACKENDS
from .config import Config, Tiling, WarpConfig, config_type
from .devices import Device
from .dtypes import PRECISIONS
from .family import families, get_family
from .formats import duration, rate
from .problem import Problem
from .schema import Count, ListOf, MapOf, Number, OneOf, Text, Timestamp, check
from .space import Space

FORMAT = 2
RUNNERS_UP = 4
# How far above a device's nominal peak a believed rate may be, where the backend's peak bounds
# rates (Backend.peak_bounds_rates): the peak comes from a table of cores per multiprocessor,
# which a new architecture can outgrow.
PEAK_SLACK = 2
MAX_BYTES = 1 << 20  # a record is a few kilobytes; a larger file is not one
MAX_DIMENSION = 1 << 31  # rows or columns of one matrix


@dataclass(frozen=True)
class Measurement:
    """What one variant did: its status, and for "ok" its median time and rate."""

    status: str
    reason: str = ""
    relative_error: float | None = None
    seconds: float | None = None  # median of `reps` repetitions, on the runtime's clock
    spread: float | None = None  # (p90 - p10) / median of the repetitions
    reps: int = 0
    gflops: float | None = None
    fraction_of_peak: float | None = None
    clock: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict:
        return asdict(self)

    def doubt(self, problem: Problem, device: Device | None) -> str:
        """Why this passing measurement of `problem` cannot be one the tuner made on `device`, or "".
        A record or a study journal can be edited by hand, so a rate is believed only if it is the
        product's operations over the median time, its fraction of peak is that rate over the
        device's nominal peak, it is at most PEAK_SLACK times that peak where the backend's peak
        bounds rates, and the error is within the family's tolerance. With no `device` (one that
        no record names), the peak checks are left out."""
        precision = PRECISIONS[problem.dtype]
        peak = None if device is None or device.simulated else device.peak(precision.units)
        tolerance = get_family(problem.family).tolerance(precision)
        if not (self.relative_error is not None and 0 <= self.relative_error <= tolerance):
            return f"its relative error {self.relative_error} is not within the tolerance {tolerance:.0e}"
        if not math.isclose(self.gflops, problem.flops / self.seconds / 1e9, rel_tol=1e-6):
            return (f"its rate {rate(self.gflops)} is not the product's operations over its median "
                    f"{duration(self.seconds)}")
        if peak and BACKENDS[device.backend].peak_bounds_rates and self.gflops > PEAK_SLACK * peak:
            return f"its rate {rate(self.gflops)} is over {PEAK_SLACK} times the device's nominal peak {rate(peak)}"
        if device is None:
            return ""
        expected = self.gflops / peak if peak else None
        if (self.fraction_of_peak is None) != (expected is None) or (
                expected is not None and not math.isclose(self.fraction_of_peak, expected, rel_tol=1e-6)):
            return f"its fraction of peak {self.fraction_of_peak} is not its rate over the device's nominal peak"
        return ""


@dataclass(frozen=True)
class Entry:
    """One ranked configuration of a record, with the trial that measured it."""

    trial: int
    config: Tiling
    measurement: Measurement

    def as_dict(self) -> dict:
        return {"trial": self.trial, "config": self.config.as_dict(), "measurement": self.measurement.as_dict()}


@dataclass(frozen=True)
class Budget:
    """What the study spent: trials asked, variants measured (failed ones included), suggestions
    answered without measuring, and the measuring process's seconds compiling (or loading),
    counting, verifying and timing, those of the variants their static ceiling ruled out included."""

    trials: int
    measured: int
    failed: int
    invalid: int
    duplicates: int
    measuring_seconds: float


@dataclass(frozen=True)
class Record:
    """The best configurations a study measured for `problem` on `device`, best first."""

    device: Device
    problem: Problem
    clock: str
    ranked: tuple[Entry, ...]
    budget: Budget
    started: str  # ISO 8601, UTC
    finished: str
    study: dict  # the study's name and storage label

    @property
    def fingerprint(self) -> str:
        return self.device.fingerprint

    @property
    def finished_at(self) -> datetime:
        """When its search finished, to order records by: a time without an offset is taken as UTC."""
        moment = datetime.fromisoformat(self.finished)
        return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)

    @property
    def family(self) -> str:
        """The kernel family its configurations are of (its problem's)."""
        return self.problem.family

    @property
    def best(self) -> Entry:
        return self.ranked[0]

    @property
    def runners_up(self) -> tuple[Entry, ...]:
        return self.ranked[1:]

    @property
    def configs(self) -> list[Tiling]:
        """The ranked configurations, best first."""
        return [entry.config for entry in self.ranked]

    @property
    def home(self) -> str:
        """Where the record belongs under records/: its device's folder and its product's file."""
        return f"{self.device.slug}/{file_stem(self.problem)}.json"

    def broken_rules(self) -> list[list[str]]:
        """The hard rules of this version's space that each ranked configuration breaks, best first (its
        rules are not part of the fingerprint, so a record can outlive them)."""
        space = Space.of(BACKENDS[self.device.backend], self.problem.dtype, self.family)
        return [space.broken_rules(config) for config in self.configs]

    def valid_configs(self) -> list[Tiling]:
        """The ranked configurations that break no hard rule of this version's space, best first. A
        configuration that a heuristic of the search prunes was measured and still runs, so it stays."""
        return [config for config, broken in zip(self.configs, self.broken_rules()) if not broken]

    def as_dict(self) -> dict:
        """The record as the current format writes it."""
        return {
            "format": FORMAT,
            "family": self.family,
            "fingerprint": self.fingerprint,
            "device": self.device.as_dict(),
            "problem": self.problem.as_dict(),
            "clock": self.clock,
            "best": self.best.as_dict(),
            "runners_up": [entry.as_dict() for entry in self.runners_up],
            "budget": asdict(self.budget),
            "searched": {"started": self.started, "finished": self.finished},
            "study": dict(self.study),
        }

    @classmethod
    def from_dict(cls, data) -> "Record":
        """The record `data` holds, in any known format; RecordError saying what is wrong."""
        if not isinstance(data, dict):
            raise RecordError("not a tuner record (its top level is not a JSON object)")
        if type(data.get("format")) is not int or data["format"] not in KNOWN_FORMATS:
            raise RecordError(f"not a tuner record of a known format (its \"format\" is not one of "
                              f"{', '.join(map(str, KNOWN_FORMATS))})")
        while data["format"] != FORMAT:
            data = MIGRATIONS[data["format"]](data)
        wrong = check(data, {**SCHEMA, "family": OneOf(families())}, "record") or check(
            data["problem"], _problem_schema(get_family(data["family"]).problem), "record.problem")
        if wrong:
            raise RecordError(wrong)
        device = Device.from_dict(data["device"])
        if data["fingerprint"] != device.fingerprint or data["device"]["fingerprint"] != device.fingerprint:
            raise RecordError("fingerprint does not match the device it describes")
        if data["problem"]["dtype"] not in BACKENDS[device.backend].precisions():
            raise RecordError(f"dtype {data['problem']['dtype']} is not one of the {device.backend} backend's")
        problem = get_family(data["family"]).problem(**data["problem"])
        ranked = tuple(parse_entry(entry, problem.dtype) for entry in (data["best"], *data["runners_up"]))
        for place, entry in enumerate(ranked):
            doubt = entry.measurement.doubt(problem, device)
            if doubt:
                raise RecordError(f"{'the best' if place == 0 else f'runner-up {place}'}'s measurement is not "
                                  f"one the tuner made: {doubt}")
            if place and entry.measurement.gflops > ranked[place - 1].measurement.gflops:
                raise RecordError(f"runner-up {place} is faster than the configuration ranked above it: a record "
                                  "ranks its configurations best first")
        return cls(device, problem, data["clock"], ranked, Budget(**data["budget"]), data["searched"]["started"],
                   data["searched"]["finished"], dict(data["study"]))


def file_stem(problem: Problem) -> str:
    """The name of a problem's record file, without .json: its key, after its family's prefix."""
    return f"{get_family(problem.family).record_prefix}{problem.key}"


class RecordError(ValueError):
    """Data that is not a sound record; the message says what is wrong."""


def _problem_schema(problem: type) -> dict:
    """What a record of a family holds of its problem: each size, and the dtype."""
    return {**{name: Count(1, MAX_DIMENSION) for name in problem.dimensions()}, "dtype": OneOf(PRECISIONS)}


def parse_entry(data: dict, dtype: str) -> Entry:
    """A ranked configuration from its dict (record.ENTRY's fields) in a `dtype` product's parameters."""
    kind = config_type(dtype)
    if set(data["config"]) != set(kind.names()):
        raise RecordError(f"a {dtype} record's configurations have the parameters {', '.join(kind.names())}")
    return Entry(data["trial"], kind(**data["config"]), Measurement(**data["measurement"]))


def make(device: Device, problem: Problem, clock: str, ranked: list[Entry], budget: Budget,
         searched: tuple[datetime, datetime], study: dict) -> Record:
    """A record of `ranked` entries (best first, the runners-up cut to RUNNERS_UP) measured on
    `device` for `problem`."""
    started, finished = (moment.astimezone(timezone.utc).isoformat(timespec="seconds") for moment in searched)
    return Record(device, problem, clock, tuple(ranked[:RUNNERS_UP + 1]), budget, started, finished, study)


# Parameters added after records of format 1 were first written, with their neutral values (the
# kernel as it was before each existed).
_ADDED_IN_FORMAT_1 = ("vector_fragments", "min_blocks", "double_buffer")


def _from_format_1(data: dict) -> dict:
    """Format 1 had no family (every record was a matmul) and could lack the parameters added
    while it was current."""
    neutral = {name: Config.__dataclass_fields__[name].default for name in _ADDED_IN_FORMAT_1}

    def filled(entry):
        if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
            return entry  # the schema check names what is wrong
        return {**entry, "config": {**neutral, **entry["config"]}}

    runners_up = data.get("runners_up")
    return {**data, "format": 2, "family": "matmul", "best": filled(data.get("best")),
            "runners_up": [filled(entry) for entry in runners_up] if isinstance(runners_up, list) else runners_up}


# Each older format, with the function that turns a record of it into the next format.
MIGRATIONS = {1: _from_format_1}
KNOWN_FORMATS = (*MIGRATIONS, FORMAT)


class Parameters:
    """A configuration: every parameter of Config (of WarpConfig, where it has warp tiles), with a
    value of its type. A value outside today's domain passes here; whether the space still accepts
    it is the space's to say, and whether its class is its dtype's is the record's."""

    def __init__(self):
        self.fields = {kind: {field.name: OneOf((False, True)) if field.type is bool else Count(0, 1 << 20)
                              for field in fields(kind)} for kind in (Config, WarpConfig)}

    def __call__(self, value, where: str) -> str:
        kind = WarpConfig if isinstance(value, dict) and "warp_m" in value else Config
        return check(value, self.fields[kind], where)


DEVICE = {
    "backend": OneOf(BACKENDS), "name": Text(), "arch": Text(), "multiprocessors": Count(),
    "memory_bytes": Count(), "clock_khz": Count(), "l2_bytes": Count(), "driver": Text(), "runtime": Text(),
    "software": MapOf(Text()), "peak_gflops": MapOf(Number(positive=True)), "fingerprint": Text(),
}
MEASUREMENT = {
    "status": OneOf(("ok",)), "reason": Text(), "relative_error": Number(optional=True),
    "seconds": Number(positive=True), "spread": Number(optional=True), "reps": Count(1),
    "gflops": Number(positive=True), "fraction_of_peak": Number(optional=True), "clock": Text(),
}
ENTRY = {"trial": Count(), "config": Parameters(), "measurement": MEASUREMENT}
SCHEMA = {
    "format": OneOf((FORMAT,)),
    "family": Text(),  # one of the registered families (checked at load)
    "fingerprint": Text(),
    "device": DEVICE,
    # An object here; what it holds is checked against its family's problem (_problem_schema).
    "problem": lambda value, where: "" if isinstance(value, dict) else f"{where} must be an object",
    "clock": Text(),
    "best": ENTRY,
    "runners_up": ListOf(ENTRY, RUNNERS_UP),
    "budget": {name: Number() if name == "measuring_seconds" else Count() for name in Budget.__dataclass_fields__},
    "searched": {"started": Timestamp(), "finished": Timestamp()},
    "study": {"name": Text(), "storage": Text()},
}
