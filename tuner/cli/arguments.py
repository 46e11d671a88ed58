"""Argument types and options that several commands share.

argparse names a type's function in its message for a value the type cannot convert ("invalid
_positive value: 'x'"), so the types keep the names those messages have always shown."""
import argparse

DTYPE_HELP = ("the precision: float32 (default), float64, float16 (float32 accumulate and result), and on cuda "
              "only the tensor-core ones tf32 (float32 in and out, TF32 multiplies) and float16-tc")


def add_cache_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-dir", metavar="DIR", help="cache directory (default: $TUNER_CACHE_DIR, "
                        "else the user cache directory)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {text}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value
