"""`tuner report`: an HTML page and PNG figures of one study, the cache and the benchmark results.

The page embeds its figures as base64 PNG, so it opens offline on its own; the same figures are
written beside it as PNG files. The page is templates/report.html.j2, the figures come from
figures.py, the study from studies.py and the benchmark results from benchmarks.py. Times measured
on the simulator are labelled simulated CPU time wherever they appear.
"""
import contextlib
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
import functools
from importlib.resources import files
from pathlib import Path

import jinja2
import optuna

from . import cache, simulator
from .backends import BACKENDS
from .benchmarks import BENCH_FILE, BENCH_RESULTS, bench_rows, bench_results
from .disk import write_output
from .figures import FIGURES, Figure, draw
from .formats import counted, duration, rate
from .studies import SIMULATED, StudyTrials, find_study, identity
from .trials import Kind, kind

TEMPLATE = "report.html.j2"
DEFAULT_OUT = Path("tuner-report")


@dataclass
class Report:
    """What `write_report` wrote, and what it could not draw and why."""

    page: Path
    figures: list[Figure] = field(default_factory=list)
    not_drawn: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # files it could not read, each with why


@functools.cache
def _page() -> jinja2.Template:
    loader = jinja2.FunctionLoader(lambda name: files("tuner.templates").joinpath(name).read_text())
    environment = jinja2.Environment(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True)
    return environment.get_template(TEMPLATE)


def _overview(runs: StudyTrials, storage: str) -> list[tuple[str, str]]:
    """The page's first table: the study, its product and device, its trials, its best and the seed."""
    study, trials, measured, passed = runs.study, runs.trials, runs.measured, runs.passed
    entry, unit = runs.entry, runs.unit
    kinds = Counter(kind(trial) for trial in trials)
    held = identity(study)
    rows = [("study", f"{study.study_name} in {storage}"),
            ("product", held.get("problem", "unknown")),
            ("device", f"{entry.device.name} [{entry.fingerprint}]" if entry
             else f"fingerprint {held.get('fingerprint', 'unknown')}"),
            ("trials", f"{len(trials)} completed: {len(measured)} measured ({len(passed)} passed, "
                       f"{len(measured) - len(passed)} failed), {kinds[Kind.INVALID]} invalid, "
                       f"{counted(kinds[Kind.DUPLICATE], 'repeated suggestion')} answered from the study")]
    if entry and not runs.own_entry:
        rows += [("best", f"{counted(len(passed), 'variant')} passed; the cache record of this product and device "
                          f"was made by another study, {entry.study['name']!r} in {entry.study['storage']} (best "
                          f"{rate(entry.best.measurement.gflops)}{unit})"),
                 ("cache entry", str(runs.entry_path))]
    elif entry:
        best = entry.best.measurement
        fraction = f"{best.fraction_of_peak:.1%} of peak" if best.fraction_of_peak is not None else "no peak"
        rows += [("best", f"{rate(best.gflops)}{unit}, {fraction}, median {duration(best.seconds)} "
                          f"over {counted(best.reps, 'run')} (trial {entry.best.trial} of the study)"),
                 ("best configuration", entry.best.config.describe(BACKENDS[entry.device.backend])),
                 ("cache entry", str(runs.entry_path))]
    elif passed:
        rows.append(("best", f"no cache record of this study's product and device was found, so none is named; "
                             f"{counted(len(passed), 'variant')} passed"))
    else:
        rows.append(("best", "no variant has passed verification: nothing cached"))
    if runs.seed and runs.own_entry:
        rows.append(("seed kernel's configuration", f"{rate(runs.seed)}{unit}; the best is "
                     f"{entry.best.measurement.gflops / runs.seed:.2f}x that"))
    return rows


@contextlib.contextmanager
def _writing(out: Path):
    """An OSError while writing in `out` (a folder where a file goes, named, a full disk) as one line naming --out."""
    try:
        yield
    except OSError as error:
        named = f"{Path(error.filename).name}: " if isinstance(error, IsADirectoryError) and error.filename else ""
        raise ValueError(f"--out {out}: cannot write there ({named}{error.strerror}); pass a writable --out DIR") \
            from None


def _clear(out: Path) -> None:
    """Remove the figures an earlier report left in `out`, so that the folder holds this page's."""
    for stale in out.glob("*.png"):
        if stale.stem in FIGURES or re.fullmatch(r"bench-\d+", stale.stem):
            stale.unlink()


def write_report(root: Path, out: Path, *, study_name: str | None = None, storage: str | None = None,
                 bench: Path = BENCH_RESULTS) -> Report:
    """Write `out`/report.html and its PNG figures for one study (see find_study), the records
    cached under `root` (and the shipped ones), and the benchmark results at `bench`."""
    import matplotlib

    matplotlib.use("Agg")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study, label, others = find_study(root, storage, study_name)
    with _writing(out):
        out.mkdir(parents=True, exist_ok=True)
        _clear(out)
    catalog = cache.Catalog.read(root)
    skipped = [str(error) for error in catalog.skipped]
    runs = StudyTrials.of(study, catalog)
    results, bench_skipped = bench_results(bench)
    figures, not_drawn = draw(runs, [stored.record for stored in catalog.stored], results, root)
    report = Report(out / "report.html", figures, not_drawn, skipped + bench_skipped)
    page = _page().render(
        study=study.study_name, simulated=bool(runs.unit), clock=SIMULATED, overview=_overview(runs, label),
        figures=figures, not_drawn=not_drawn,
        bench=[(where, result, bench_rows(result), simulator.describes(result["device"])) for where, result in results],
        bench_file=BENCH_FILE,
        bench_path=bench, bench_skipped=bench_skipped, others=others, skipped=skipped, storage=label,
        written=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    with _writing(out):
        for figure in figures:
            write_output(out / f"{figure.name}.png", figure.png)
        # UTF-8, as the page's <meta charset> says; a path in a cache directory named in bytes that are no
        # UTF-8 (surrogates, to Python) written as the escapes Python shows it with.
        write_output(report.page, page.encode("utf-8", "backslashreplace"))
    return report
