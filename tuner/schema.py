"""Checkers for data read from files anyone could edit: each says what is wrong, or "".

A schema is a checker, or a dict of exactly these keys mapping to schemas; `check` walks it and
names a bad field by its dotted path.
"""
import math
from datetime import datetime

MAX_TEXT = 500


def unprintable(text: str) -> str:
    """The first character of `text` that a terminal would not show as itself (formats.hidden: a
    control, format, surrogate, line or paragraph separator), as U+XXXX; "" if none."""
    from .formats import hidden

    return next((f"U+{ord(character):04X}" for character in text if hidden(character)), "")


class Text:
    """A string of at most MAX_TEXT characters, each shown as itself: a record's text is printed,
    and an escape sequence, a line break or a bidi override in it would forge what is shown."""

    def __call__(self, value, where: str) -> str:
        if not isinstance(value, str) or len(value) > MAX_TEXT:
            return f"{where} must be a string of at most {MAX_TEXT} characters"
        odd = unprintable(value)
        return f"{where} holds a non-printing character ({odd})" if odd else ""


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
