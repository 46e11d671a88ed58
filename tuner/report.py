"""`tuner report`: an HTML page and PNG figures of one study, the cache and the benchmark results.

The page embeds its figures as base64 PNG, so it opens offline on its own; the same figures are
written beside it as PNG files. Study figures come from Optuna's matplotlib visualisation, the
others from plain matplotlib charts. Times measured on the simulator are labelled simulated CPU
time wherever they appear.
"""
import base64
import io
import json
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import optuna
from optuna.trial import TrialState

from . import cache
from .problem import Problem
from .storage import open_storage, redacted
from .space import SEED

SIMULATED = "simulated CPU time"
TILE_PARAMETERS = ("block_m", "block_n", "thread_m", "thread_n")
# Where the repository's benchmark results live when tuner runs from a checkout.
BENCH_RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
BENCH_FILE = "versus_cublas.json"
DEFAULT_OUT = Path("tuner-report")
SHOWN_REASONS = 5  # failure reasons printed at the end of a search
FIGURES = ("history", "importances", "tiles", "failures", "records")  # and bench-0, bench-1...


@dataclass
class Figure:
    """One PNG of the report: its file stem, heading, caption and bytes."""

    name: str
    title: str
    caption: str
    png: bytes

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode()


@dataclass
class Report:
    """What `write_report` wrote, and what it could not draw and why."""

    page: Path
    figures: list[Figure] = field(default_factory=list)
    not_drawn: dict[str, str] = field(default_factory=dict)


def _kind(trial) -> str:
    return trial.user_attrs.get("kind", "")


def _passed(trial) -> bool:
    return _kind(trial) == "measured" and trial.user_attrs["measurement"]["status"] == "ok"


def _rule(reason: str) -> str:
    """A reason with its numbers replaced by N, so that one rule broken with different sizes
    counts as one; cut to a line's length."""
    text = re.sub(r"\d+(\.\d+)?", "N", reason.strip().splitlines()[0] if reason.strip() else "no reason given")
    return text if len(text) <= 90 else text[:87] + "..."


def failure_reasons(trials) -> Counter:
    """Failed measurements by status and reason, and invalid suggestions by the rule broken
    (one count per rule a suggestion breaks)."""
    reasons = Counter()
    for trial in trials:
        if _kind(trial) == "invalid":
            reasons.update(f"invalid: {_rule(reason)}" for reason in trial.user_attrs.get("reasons", []))
        elif _kind(trial) == "measured" and not _passed(trial):
            measurement = trial.user_attrs["measurement"]
            reasons[f"{measurement['status']}: {_rule(measurement['reason'])}"] += 1
    return reasons


def print_failures(trials) -> None:
    """The failure lines at the end of `tuner search`: the commonest reasons, then how many more."""
    reasons = failure_reasons(trials)
    if not reasons:
        print(f"failures by reason (the study's {len(trials)} completed trials): none")
        return
    print(f"failures by reason (the study's {len(trials)} completed trials; a suggestion breaking several rules "
          "counts for each):")
    for reason, count in reasons.most_common(SHOWN_REASONS):
        print(f"  {count:4} {reason}")
    if len(reasons) > SHOWN_REASONS:
        print(f"  and {len(reasons) - SHOWN_REASONS} more (tuner report draws them all)")


def find_study(root: Path, storage: str | None, name: str | None) -> tuple[optuna.Study, str, list[str]]:
    """The study named `name`, else the one most recently worked on, from `storage` (an Optuna
    URL or a journal file) or every journal under the cache's studies/; with its storage's label
    (what optuna-dashboard opens) and the names of the other studies found."""
    if storage:
        if "://" not in storage and not Path(storage).is_file():
            raise ValueError(f"--storage {storage!r} is not a file; pass a journal file or an Optuna storage URL")
        storages = {redacted(storage): open_storage(storage)}
        where = redacted(storage)
    else:
        journals = sorted((root / "studies").glob("*.journal"))
        storages = {str(path): open_storage(str(path)) for path in journals}
        where = str(root / "studies")
    found = [(label, summary.study_name) for label, opened in storages.items()
             for summary in optuna.get_all_study_summaries(opened, include_best_trial=False)]
    if not found:
        raise ValueError(f"no study in {where}: run `tuner search` first, or pass --cache-dir or --storage")
    if name is not None:
        matches = [(label, study) for label, study in found if study == name]
        if not matches:
            raise ValueError(f"no study named {name!r} in {where}; "
                             f"the studies there are: {', '.join(study for _, study in found)}")
        label, name = matches[0]
    else:
        label, name = max(found, key=lambda pair: _last_activity(optuna.load_study(
            study_name=pair[1], storage=storages[pair[0]])))
    others = [study for _, study in found if study != name]
    return optuna.load_study(study_name=name, storage=storages[label]), label, others


def _last_activity(study: optuna.Study) -> datetime:
    moments = [trial.datetime_complete or trial.datetime_start for trial in study.get_trials(deepcopy=False)]
    return max((moment for moment in moments if moment), default=datetime.min)


def _subset(trials) -> optuna.Study:
    """An in-memory study of `trials`, renumbered in order, for Optuna's plots."""
    study = optuna.create_study(direction="maximize")
    study.add_trials(trials)
    return study


def _png(figure) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def _history(measured, unit: str, seed: float | None) -> bytes:
    from optuna.visualization.matplotlib import plot_optimization_history

    axes = plot_optimization_history(_subset(measured), target_name=f"GFLOP/s{unit}")
    axes.set_xlabel("measured variant")
    axes.xaxis.get_major_locator().set_params(integer=True)
    if seed:
        axes.axhline(seed, linestyle="--", color="grey", label="seed kernel's configuration")
        axes.legend()
    axes.figure.set_size_inches(8, 4.5)
    return _png(axes.figure)


def _importances(passed, unit: str) -> bytes:
    from optuna.visualization.matplotlib import plot_param_importances

    axes = plot_param_importances(_subset(passed), target_name=f"GFLOP/s{unit}")
    axes.figure.set_size_inches(8, 4.5)
    return _png(axes.figure)


def _tiles(passed, unit: str) -> bytes:
    from optuna.visualization.matplotlib import plot_slice

    axes = plot_slice(_subset(passed), params=list(TILE_PARAMETERS), target_name=f"GFLOP/s{unit}")
    axes[0].figure.set_size_inches(12, 4)
    return _png(axes[0].figure)


def _failures(reasons: Counter) -> bytes:
    import matplotlib.pyplot as plt

    ranked = reasons.most_common()[::-1]
    figure, axes = plt.subplots(figsize=(10, 1.2 + 0.35 * len(ranked)))
    axes.barh([reason for reason, _ in ranked], [count for _, count in ranked], color="tab:red")
    axes.set_xlabel("suggestions")
    axes.set_title("Failures by reason")
    axes.xaxis.get_major_locator().set_params(integer=True)
    return _png(figure)


def _entry_label(data: dict) -> str:
    simulated = ", simulated" if data["device"]["arch"] == "simulator" else ""
    return (f"{Problem(**data['problem']).key} on {data['device']['backend']}{simulated}\n"
            f"{data['device']['name']} [{data['fingerprint'][:8]}]")


def _records(records: list[dict]) -> bytes:
    import matplotlib.pyplot as plt

    rows = range(len(records))
    colours = ["tab:grey" if data["device"]["arch"] == "simulator" else "tab:blue" for data in records]
    gflops = [data["best"]["measurement"]["gflops"] for data in records]
    fractions = [data["best"]["measurement"]["fraction_of_peak"] for data in records]
    figure, (left, right) = plt.subplots(1, 2, sharey=True, figsize=(12, 1.5 + 0.6 * len(records)))
    left.barh(rows, gflops, color=colours)
    left.set_yticks(rows, [_entry_label(data) for data in records])
    left.invert_yaxis()
    if max(gflops) > 100 * min(gflops):  # GPU and simulated entries together span orders of magnitude
        left.set_xscale("log")
    else:
        left.xaxis.set_major_formatter("{x:.3g}")
    left.set_xlabel("GFLOP/s of the best configuration (grey: simulated CPU time)")
    right.barh(rows, [100 * (fraction or 0) for fraction in fractions], color=colours)
    right.set_xlim(0, max([100 * fraction for fraction in fractions if fraction is not None], default=0) * 1.1 or 100)
    right.set_xlabel("% of the device's nominal peak")
    for row, fraction in zip(rows, fractions):
        if fraction is None:
            right.text(1, row, "no peak (simulator)", va="center")
    figure.suptitle("Cached entries")
    return _png(figure)


def _bench(result: dict) -> bytes:
    import matplotlib.pyplot as plt

    dtypes = list(dict.fromkeys(row["dtype"] for row in result["rows"]))
    kernels = list(dict.fromkeys(row["kernel"] for row in result["rows"]))
    figure, panels = plt.subplots(1, len(dtypes), figsize=(7 * len(dtypes), 4.5), squeeze=False)
    for axes, dtype in zip(panels[0], dtypes):
        rows = [row for row in result["rows"] if row["dtype"] == dtype]
        shapes = list(dict.fromkeys("x".join(map(str, row["shape"])) for row in rows))
        width = 0.8 / len(kernels)
        for index, kernel in enumerate(kernels):
            rate = {"x".join(map(str, row["shape"])): row["gflops"] for row in rows if row["kernel"] == kernel}
            axes.bar([position + index * width for position in range(len(shapes))],
                     [rate.get(shape, 0) for shape in shapes], width, label=kernel)
        axes.set_xticks([position + 0.4 - width / 2 for position in range(len(shapes))], shapes, rotation=30)
        axes.set_yscale("log")
        axes.set_ylabel(f"GFLOP/s ({result['clock']})")
        axes.set_title(dtype)
        axes.legend(fontsize="small")
    simulated = result["device"].get("arch") == "simulator"
    dry_run = " (a dry run on the simulator: the times mean nothing)" if simulated else ""
    figure.suptitle(f"{result['device']['name']}: tuned kernels, cuBLAS and the seed's kernels{dry_run}")
    return _png(figure)


def bench_results(path: Path) -> tuple[list[tuple[Path, dict]], list[str]]:
    """The versus_cublas.json results at `path` (a file, or a folder searched through), and a note
    for each file that could not be read."""
    paths = sorted(path.rglob(BENCH_FILE)) if path.is_dir() else [path] if path.is_file() else []
    results, skipped = [], []
    for found in paths:
        try:
            result = json.loads(found.read_text())
        except (OSError, ValueError) as error:
            skipped.append(f"{found}: unreadable ({type(error).__name__}: {error})")
            continue
        if _is_bench_result(result):
            results.append((found, result))
        else:
            skipped.append(f"{found}: not a {BENCH_FILE} result (it needs device.name, clock, and rows of "
                           "dtype, shape, kernel and gflops)")
    return results, skipped


def _is_bench_result(result) -> bool:
    return (isinstance(result, dict) and isinstance(result.get("device"), dict) and "name" in result["device"]
            and "clock" in result and isinstance(result.get("rows"), list) and bool(result["rows"])
            and all(isinstance(row, dict) and {"dtype", "shape", "kernel", "gflops"} <= set(row)
                    and isinstance(row["shape"], list) and isinstance(row["gflops"], (int, float))
                    and row["gflops"] > 0 for row in result["rows"]))


PAGE = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True).from_string("""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>tuner report: {{ study }}</title>
<style>
body { font-family: sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
.simulated { background: #fff3cd; border: 1px solid #e0b000; padding: 0.8em; }
figure { margin: 2em 0; }
img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; }
code { background: #f4f4f4; padding: 0 0.2em; }
</style>
</head>
<body>
<h1>tuner report: {{ study }}</h1>
{% if simulated %}
<p class="simulated"><strong>Simulated.</strong> This study ran on Numba's CUDA simulator: its times are the
CPU time of the simulation ({{ clock }}), labelled so everywhere, and say nothing about GPU speed.</p>
{% endif %}
<table>
{% for name, value in summary %}
<tr><th>{{ name }}</th><td>{{ value }}</td></tr>
{% endfor %}
</table>
{% for figure in figures %}
<figure id="{{ figure.name }}">
<h2>{{ figure.title }}</h2>
<img src="{{ figure.data_uri }}" alt="{{ figure.title }}">
<figcaption>{{ figure.caption }} (<a href="{{ figure.name }}.png">{{ figure.name }}.png</a>)</figcaption>
</figure>
{% endfor %}
{% if not_drawn %}
<h2>Not drawn</h2>
<ul>
{% for name, why in not_drawn.items() %}
<li>{{ name }}: {{ why }}</li>
{% endfor %}
</ul>
{% endif %}
<h2>Benchmark comparison</h2>
{% for path, result, rows in bench %}
<p>{{ path }}: {{ result.device.name }}, {{ result.clock }}
{%- if result.device.arch == "simulator" %} (a dry run on the simulator: the times mean nothing){% endif %}.</p>
<table>
<tr><th>dtype</th><th>shape</th><th>kernel</th><th>GFLOP/s</th><th>x cuBLAS</th><th>x seed</th><th>of peak</th></tr>
{% for row in rows %}
<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{% else %}
<p>No benchmark results: no {{ bench_file }} in {{ bench_path }}. <code>bench/versus_cublas.py OUT</code> writes
one on a GPU (see bench/README.md); pass it with <code>--bench</code>.</p>
{% endfor %}
{% for note in bench_skipped %}
<p>Skipped {{ note }}</p>
{% endfor %}
{% if others %}
<h2>Other studies</h2>
<p>Pass <code>--study NAME</code> to report one of them:</p>
<ul>
{% for name in others %}
<li><code>{{ name }}</code></li>
{% endfor %}
</ul>
{% endif %}
{% if skipped %}
<h2>Skipped cache records</h2>
<ul>
{% for note in skipped %}
<li>{{ note }}</li>
{% endfor %}
</ul>
{% endif %}
<h2>Live</h2>
<p><code>optuna-dashboard {{ storage }}</code> serves the same study in a browser, updated as a search runs
(<code>pip install optuna-dashboard</code>).</p>
<p>Written {{ written }} by <code>tuner report</code>.</p>
</body>
</html>
""")


def _bench_rows(result: dict) -> list[list[str]]:
    """The cells of a benchmark result's table, as bench/versus_cublas.py prints them."""
    def shown(value, form: str) -> str:
        return format(value, form) if isinstance(value, (int, float)) else "-"

    return [[row["dtype"], "x".join(map(str, row["shape"])), row["kernel"], shown(row["gflops"], ".4g"),
             shown(row.get("ratio_to_cublas"), ".3f"), shown(row.get("ratio_to_seed"), ".2f"),
             shown(row.get("fraction_of_peak"), ".1%")] for row in result["rows"]]


@dataclass
class _Study:
    """One study's trials sorted by what became of them, and the cache entry it wrote."""

    study: optuna.Study
    trials: list
    measured: list
    passed: list
    entry: dict | None
    entry_path: Path | None
    seed: float | None  # GFLOP/s of the seed kernel's configuration, if the study measured it
    unit: str  # " (simulated CPU time)" for a simulated study, else empty

    @classmethod
    def of(cls, study: optuna.Study, found: list) -> "_Study":
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        measured = [trial for trial in trials if _kind(trial) == "measured"]
        passed = [trial for trial in measured if _passed(trial)]
        simulated = any(trial.user_attrs["measurement"]["clock"] == SIMULATED for trial in measured)
        identity = study.user_attrs.get("identity", {})
        entry, path = next(((data.as_dict(), where) for where, data in found
                            if data.fingerprint == identity.get("fingerprint")
                            and data.problem.key == identity.get("problem")), (None, None))
        seed = next((trial.value for trial in passed if trial.params == SEED.as_dict()), None)
        return cls(study, trials, measured, passed, entry, path, seed, f" ({SIMULATED})" if simulated else "")


def _summary(runs: _Study, storage: str) -> list[tuple[str, str]]:
    """The page's first table: the study, its product and device, its trials, its best and the seed."""
    study, trials, measured, passed = runs.study, runs.trials, runs.measured, runs.passed
    entry, unit = runs.entry, runs.unit
    kinds = Counter(_kind(trial) for trial in trials)
    identity = study.user_attrs.get("identity", {})
    rows = [("study", f"{study.study_name} in {storage}"),
            ("product", identity.get("problem", "unknown")),
            ("device", f"{entry['device']['name']} [{entry['fingerprint']}]" if entry
             else f"fingerprint {identity.get('fingerprint', 'unknown')}"),
            ("trials", f"{len(trials)}: {len(measured)} measured ({len(passed)} passed, "
                       f"{len(measured) - len(passed)} failed), {kinds['invalid']} invalid, "
                       f"{kinds['duplicate']} repeated suggestions answered from the study")]
    if entry:
        best = entry["best"]["measurement"]
        fraction = f"{best['fraction_of_peak']:.1%} of peak" if best["fraction_of_peak"] is not None else "no peak"
        rows += [("best", f"{best['gflops']:.4g} GFLOP/s{unit}, {fraction}, median {best['seconds'] * 1e3:.4g} ms "
                          f"over {best['reps']} runs (trial {entry['best']['trial']} of the study)"),
                 ("best configuration", " ".join(f"{name}={json.dumps(value)}"
                                                 for name, value in entry["best"]["config"].items())),
                 ("cache entry", str(runs.entry_path))]
    else:
        rows.append(("best", "no variant has passed verification: nothing cached"))
    if runs.seed and entry:
        rows.append(("seed kernel's configuration", f"{runs.seed:.4g} GFLOP/s{unit}; the best is "
                     f"{entry['best']['measurement']['gflops'] / runs.seed:.2f}x that"))
    return rows


def _draw(report: Report, runs: _Study, records: list[dict], results: list, root: Path) -> None:
    """Draw the report's figures into `report`, or say there why one was not drawn."""
    import matplotlib.pyplot as plt

    unit, measured, passed = runs.unit, runs.measured, runs.passed

    def draw(name: str, title: str, caption: str, missing: str, png) -> None:
        if missing:
            report.not_drawn[title] = missing
            return
        with warnings.catch_warnings(), plt.style.context("ggplot"):  # the style of Optuna's plots, for all
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            report.figures.append(Figure(name, title, caption, png()))

    draw("history", "Optimisation history",
         f"GFLOP/s{unit} of each measured variant and the best so far, against the {len(measured)} measured "
         f"variants in the order they were measured (the study's {len(runs.trials)} trials less the invalid and "
         "repeated suggestions, which cost no device time). A variant that failed is infeasible, drawn at 0."
         + (" The dashed line is the seed kernel's configuration." if runs.seed else ""),
         "" if measured else "no variant has been measured", lambda: _history(measured, unit, runs.seed))
    draw("importances", "Parameter importances",
         f"How much each parameter explains GFLOP/s{unit}, by PED-ANOVA (Optuna's default evaluator), over the "
         f"{len(passed)} variants that passed verification. With few variants, these mean little.",
         "" if len(passed) >= 2 else "needs two variants that passed verification",
         lambda: _importances(passed, unit))
    draw("tiles", "GFLOP/s by tile parameters",
         f"GFLOP/s{unit} of the {len(passed)} variants that passed, against the block tile (block_m, block_n) "
         "and the per-thread register tile (thread_m, thread_n): Optuna's slice plot, coloured by the order "
         "they were measured in.", "" if passed else "no variant has passed verification",
         lambda: _tiles(passed, unit))
    reasons = failure_reasons(runs.trials)
    draw("failures", "Failures by reason",
         "Measured variants that failed, by status (compile, launch, wrong) and reason, and invalid suggestions, "
         "never compiled, by the rule they broke (numbers shown as N; a suggestion breaking several rules counts "
         "for each).", "" if reasons else "no variant failed and no suggestion was invalid",
         lambda: _failures(reasons))
    draw("records", "Cached entries",
         f"The best configuration of each cached entry ({len(records)}, from the user's cache and the shipped "
         "one): GFLOP/s (on a log scale when they span over 100x), and the fraction of the device's nominal peak. "
         "Grey bars are simulated CPU time, not GPU performance.", "" if records else f"no cache records in {root}",
         lambda: _records(records))
    for index, (where, result) in enumerate(results):
        draw(f"bench-{index}", f"Benchmark comparison {index + 1}",
             f"{where}: GFLOP/s of the tuned kernel, cuBLAS and the seed's kernels per shape, on a log scale, "
             f"{result['clock']}.", "", lambda result=result: _bench(result))


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
    try:
        out.mkdir(parents=True, exist_ok=True)
        _clear(out)
    except OSError as error:
        raise ValueError(f"--out {out}: cannot write there ({error.strerror}); pass a writable --out DIR") from None
    catalog = cache.Catalog.read(root)
    skipped = [str(error) for error in catalog.skipped]
    found = [(stored.path, stored.record) for stored in catalog.stored]
    runs = _Study.of(study, found)
    results, bench_skipped = bench_results(bench)
    report = Report(out / "report.html")
    _draw(report, runs, [stored.record.as_dict() for stored in catalog.stored], results, root)
    for figure in report.figures:
        (out / f"{figure.name}.png").write_bytes(figure.png)
    report.page.write_text(PAGE.render(
        study=study.study_name, simulated=bool(runs.unit), clock=SIMULATED, summary=_summary(runs, label),
        figures=report.figures, not_drawn=report.not_drawn,
        bench=[(where, result, _bench_rows(result)) for where, result in results], bench_file=BENCH_FILE,
        bench_path=bench, bench_skipped=bench_skipped, others=others, skipped=skipped, storage=label,
        written=datetime.now(timezone.utc).isoformat(timespec="seconds")))
    return report
