"""What a cache record holds, and the schema every loaded record is checked against.

A record is data in a file that anyone could have edited. Each field is checked for its type,
its range and its known names before anything is built from it. A configuration must be a point
of the current space's domains. No kernel source is ever read from a record: kernels are
rendered from the installed templates.
"""
import math
from dataclasses import fields
from datetime import datetime, timezone

from .backends import BACKENDS
from .config import Config
from .devices import Device
from .dtypes import PRECISIONS
from .problem import Problem
from .space import DOMAINS, Space

FORMAT = 1
RUNNERS_UP = 4
MAX_BYTES = 1 << 20  # a record is a few kilobytes; a larger file is not one
MAX_TEXT = 500
MAX_DIMENSION = 1 << 31  # rows or columns of one matrix


class Text:
    """A string of at most MAX_TEXT characters."""

    def __call__(self, value, where: str) -> str:
        if not isinstance(value, str) or len(value) > MAX_TEXT:
            return f"{where} must be a string of at most {MAX_TEXT} characters"
        return ""


class Count:
    """An integer from `low` up to `high`."""

    def __init__(self, low: int = 0, high: int = 1 << 62):
        self.low, self.high = low, high

    def __call__(self, value, where: str) -> str:
        if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
            return f"{where} must be an integer from {self.low} to {self.high}"
        return ""


class Number:
    """A finite non-negative number; positive if asked; None if allowed."""

    def __init__(self, positive: bool = False, optional: bool = False):
        self.positive, self.optional = positive, optional

    def __call__(self, value, where: str) -> str:
        if value is None and self.optional:
            return ""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value < 0 or (self.positive and value == 0):
            return f"{where} must be a finite {'positive' if self.positive else 'non-negative'} number"
        return ""


class OneOf:
    """One of a fixed set of values (True is not 1 here)."""

    def __init__(self, values):
        self.values = tuple(values)

    def __call__(self, value, where: str) -> str:
        if not any(type(value) is type(known) and value == known for known in self.values):
            return f"{where} must be one of {', '.join(map(str, self.values))}"
        return ""


class Timestamp:
    """An ISO 8601 date and time."""

    def __call__(self, value, where: str) -> str:
        try:
            datetime.fromisoformat(value)
        except (TypeError, ValueError):
            return f"{where} must be an ISO 8601 date and time"
        return ""


class MapOf:
    """An object of at most 50 entries with short string keys and values of one kind."""

    def __init__(self, value):
        self.value = value

    def __call__(self, value, where: str) -> str:
        if not isinstance(value, dict) or len(value) > 50:
            return f"{where} must be an object of at most 50 entries"
        for key, item in value.items():
            problem = Text()(key, f"a key of {where}") or check(item, self.value, f"{where}[{key!r}]")
            if problem:
                return problem
        return ""


class ListOf:
    """A list of at most `most` values of one kind."""

    def __init__(self, value, most: int):
        self.value, self.most = value, most

    def __call__(self, value, where: str) -> str:
        if not isinstance(value, list) or len(value) > self.most:
            return f"{where} must be a list of at most {self.most} entries"
        for index, item in enumerate(value):
            problem = check(item, self.value, f"{where}[{index}]")
            if problem:
                return problem
        return ""


DEVICE = {
    "backend": OneOf(BACKENDS), "name": Text(), "arch": Text(), "multiprocessors": Count(),
    "memory_bytes": Count(), "clock_khz": Count(), "l2_bytes": Count(), "driver": Text(), "runtime": Text(),
    "software": MapOf(Text()), "peak_gflops": MapOf(Number(positive=True)), "fingerprint": Text(),
}
# Parameters added after records of FORMAT 1 were first written, with their neutral values (the
# kernel as it was before each existed): a configuration without one loads with that value.
ADDED = {name: Config.__dataclass_fields__[name].default for name in ("vector_fragments", "min_blocks",
                                                                      "double_buffer")}


class Parameters:
    """A configuration: every parameter a point of its domain, those in ADDED possibly absent."""

    def __init__(self):
        self.fields = {name: OneOf(domain) for name, domain in DOMAINS.items()}

    def __call__(self, value, where: str) -> str:
        if not isinstance(value, dict):
            return f"{where} must be an object"
        return check({**ADDED, **value}, self.fields, where)


CONFIG = Parameters()
MEASUREMENT = {
    "status": OneOf(("ok",)), "reason": Text(), "relative_error": Number(optional=True),
    "seconds": Number(positive=True), "spread": Number(optional=True), "reps": Count(1),
    "gflops": Number(positive=True), "fraction_of_peak": Number(optional=True), "clock": Text(),
}
ENTRY = {"trial": Count(), "config": CONFIG, "measurement": MEASUREMENT}
SCHEMA = {
    "format": OneOf((FORMAT,)),
    "fingerprint": Text(),
    "device": DEVICE,
    "problem": {"m": Count(1, MAX_DIMENSION), "n": Count(1, MAX_DIMENSION), "k": Count(1, MAX_DIMENSION),
                "dtype": OneOf(PRECISIONS)},
    "clock": Text(),
    "best": ENTRY,
    "runners_up": ListOf(ENTRY, RUNNERS_UP),
    "budget": {"trials": Count(), "measured": Count(), "failed": Count(), "invalid": Count(),
               "duplicates": Count(), "measuring_seconds": Number()},
    "searched": {"started": Timestamp(), "finished": Timestamp()},
    "study": {"name": Text(), "storage": Text()},
}
assert set(CONFIG.fields) == {field.name for field in fields(Config)}


def check(value, schema, where: str) -> str:
    """What is wrong with `value` against `schema` (a checker, or a dict of exactly these
    keys), as a phrase naming the field by its dotted path; empty when nothing is."""
    if not isinstance(schema, dict):
        return schema(value, where)
    if not isinstance(value, dict):
        return f"{where} must be an object"
    unknown = sorted(map(str, set(value) - set(schema)))
    if unknown:
        return f"{where} has an unknown field {unknown[0][:40]!r}"
    for key, part in schema.items():
        if key not in value:
            return f"{where} lacks {key!r}"
        problem = check(value[key], part, f"{where}.{key}")
        if problem:
            return problem
    return ""


def problems(record) -> str:
    """What is wrong with a loaded record, in one phrase; empty for a sound record.

    Beyond the schema, the fingerprint must be the hash of the device described, so an edited
    device description cannot pass for the GPU it names.
    """
    problem = check(record, SCHEMA, "record")
    if problem:
        return problem
    fingerprint = device_of(record).fingerprint
    if record["fingerprint"] != fingerprint or record["device"]["fingerprint"] != fingerprint:
        return "fingerprint does not match the device it describes"
    if record["problem"]["dtype"] not in BACKENDS[record["device"]["backend"]].dtypes:
        return f"dtype {record['problem']['dtype']} is not one of the {record['device']['backend']} backend's"
    return ""


def configs(record: dict) -> list[Config]:
    """The ranked configurations of a checked record, best first."""
    return [Config(**entry["config"]) for entry in (record["best"], *record["runners_up"])]


def valid_configs(record: dict) -> list[Config]:
    """The ranked configurations that this version's space still accepts, best first. Its rules
    are not part of the fingerprint, so a record can outlive them."""
    space = Space.of(BACKENDS[record["device"]["backend"]], record["problem"]["dtype"])
    return [config for config in configs(record) if not space.violations(config)]


def entry(trial: int, config: dict, measurement: dict) -> dict:
    """One ranked configuration of a record."""
    return {"trial": trial, "config": config, "measurement": measurement}


def make(device: Device, problem: Problem, clock: str, ranked: list[dict], budget: dict,
         searched: tuple[datetime, datetime], study: dict) -> dict:
    """A record of `ranked` entries (best first) measured on `device` for `problem`."""
    started, finished = (moment.astimezone(timezone.utc).isoformat(timespec="seconds") for moment in searched)
    return {
        "format": FORMAT,
        "fingerprint": device.fingerprint,
        "device": device.as_dict(),
        "problem": {"m": problem.m, "n": problem.n, "k": problem.k, "dtype": problem.dtype},
        "clock": clock,
        "best": ranked[0],
        "runners_up": ranked[1:RUNNERS_UP + 1],
        "budget": budget,
        "searched": {"started": started, "finished": finished},
        "study": study,
    }


def device_of(record: dict) -> Device:
    """The device a checked record was measured on."""
    return Device.from_dict(record["device"])


def problem_of(record: dict) -> Problem:
    """The product a checked record was tuned for."""
    return Problem(**record["problem"])
