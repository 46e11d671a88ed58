"""The benchmark results `tuner report` draws: bench/versus_cublas.py's JSON files, read and checked.

bench/versus_cublas.py writes them; reading them lives here, in the package, rather than in
bench/, because `tuner report --bench PATH` must work for an installed tuner, and an install holds
tuner/ only. Without --bench, the report looks in the repository's bench/results, which exists
when tuner runs from a checkout.
"""
import json
from pathlib import Path

from .schema import Count, Number

BENCH_RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
BENCH_FILE = "versus_cublas.json"


def bench_results(path: Path) -> tuple[list[tuple[Path, dict]], list[str]]:
    """The versus_cublas.json results at `path` (a file, or a folder searched through), and a note
    for each file that could not be read."""
    paths = sorted(path.rglob(BENCH_FILE)) if path.is_dir() else [path] if path.is_file() else []
    results, skipped = [], []
    if path.exists() and not paths and not path.is_dir():
        skipped.append(f"{path}: not a regular file or a folder; pass a {BENCH_FILE} or a folder holding them")
    for found in paths:
        try:
            result = json.loads(found.read_text())
        except (OSError, ValueError) as error:
            skipped.append(f"{found}: unreadable ({type(error).__name__}: {error})")
            continue
        if is_bench_result(result):
            results.append((found, result))
        else:
            skipped.append(f"{found}: not a {BENCH_FILE} result (it needs device.name, clock, and rows of "
                           "a dtype and a kernel named by strings, a shape of positive integers and a positive gflops)")
    return results, skipped


def is_bench_result(result) -> bool:
    """Whether `result` holds what the report draws: a device name, a clock and rows of a dtype and a
    kernel named by strings, a shape of positive integers and a positive rate."""
    return (isinstance(result, dict) and isinstance(result.get("device"), dict) and "name" in result["device"]
            and "clock" in result and isinstance(result.get("rows"), list) and bool(result["rows"])
            and all(isinstance(row, dict) and {"dtype", "shape", "kernel", "gflops"} <= set(row)
                    and isinstance(row["dtype"], str) and isinstance(row["kernel"], str)
                    and isinstance(row["shape"], list) and bool(row["shape"])
                    and not any(Count(1)(size, "size") for size in row["shape"])
                    and not Number(positive=True)(row["gflops"], "gflops") for row in result["rows"]))


def bench_rows(result: dict) -> list[list[str]]:
    """The cells of a benchmark result's table, as bench/versus_cublas.py prints them."""
    def shown(value, form: str) -> str:
        return format(value, form) if isinstance(value, (int, float)) else "-"

    return [[row["dtype"], "x".join(map(str, row["shape"])), row["kernel"], shown(row["gflops"], ".4g"),
             shown(row.get("ratio_to_cublas"), ".3f"), shown(row.get("ratio_to_seed"), ".2f"),
             shown(row.get("fraction_of_peak"), ".1%")] for row in result["rows"]]
