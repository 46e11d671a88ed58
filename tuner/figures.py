"""The report's figures as PNG: a study's history, parameter importances, tiles and failures
(Optuna's matplotlib plots), the cached entries and the benchmark results (plain matplotlib),
each with its heading and caption, or the reason it was not drawn."""
import base64
import io
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import optuna

from . import simulator
from .formats import counted
from .record import Record
from .studies import StudyTrials, failure_reasons

# The block tile and the per-thread register tile, or (tensor-core studies) the warp tile.
TILE_PARAMETERS = ("block_m", "block_n", "thread_m", "thread_n", "warp_m", "warp_n")
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

    tiles = [name for name in TILE_PARAMETERS if name in passed[0].params]
    axes = plot_slice(_subset(passed), params=tiles, target_name=f"GFLOP/s{unit}")
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


def _entry_label(found: Record) -> str:
    simulated = ", simulated" if found.device.simulated else ""
    return (f"{found.family} {found.problem.key} on {found.device.backend}{simulated}\n"
            f"{found.device.name} [{found.fingerprint[:8]}]")


def _records(records: list[Record]) -> bytes:
    import matplotlib.pyplot as plt

    rows = range(len(records))
    colours = ["tab:grey" if found.device.simulated else "tab:blue" for found in records]
    gflops = [found.best.measurement.gflops for found in records]
    fractions = [found.best.measurement.fraction_of_peak for found in records]
    figure, (left, right) = plt.subplots(1, 2, sharey=True, figsize=(12, 1.5 + 0.6 * len(records)))
    left.barh(rows, gflops, color=colours)
    left.set_yticks(rows, [_entry_label(found) for found in records])
    left.invert_yaxis()
    if max(gflops) > 100 * min(gflops):  # GPU and simulated entries together span orders of magnitude
        left.set_xscale("log")
    else:
        left.xaxis.set_major_formatter("{x:.3g}")
    left.set_xlabel("GFLOP/s of the best configuration (grey: simulated CPU time)")
    right.barh(rows, [100 * (fraction or 0) for fraction in fractions], color=colours)
    right.set_xlim(0, max([100 * fraction for fraction in fractions if fraction is not None], default=0) * 1.1 or 100)
    right.set_xlabel("% of the device's nominal peak")
    for row, found, fraction in zip(rows, records, fractions):
        if fraction is None:
            right.text(1, row, "no peak (simulator)" if found.device.simulated
                       else f"no {found.problem.dtype} peak known", va="center")
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
                     [rate.get(shape, 0) for shape in shapes], width, label=kernel,
                     color=plt.get_cmap("tab20")(index % 20))  # ggplot's cycle has 7 colours, too few
        axes.set_xticks([position + 0.4 - width / 2 for position in range(len(shapes))], shapes, rotation=30)
        axes.set_yscale("log")
        axes.set_ylabel(f"GFLOP/s ({result['clock']})")
        axes.set_title(dtype)
        axes.legend(fontsize="small")
    simulated = simulator.describes(result["device"])
    dry_run = " (a dry run on the simulator: the times mean nothing)" if simulated else ""
    figure.suptitle(f"{result['device']['name']}: tuned kernels, cuBLAS and the seed's kernels{dry_run}")
    return _png(figure)


def draw(runs: StudyTrials, records: list[Record], results: list, root: Path) -> tuple[list[Figure], dict[str, str]]:
    """The report's figures of a study, the cache's `records` (found under `root`) and the
    benchmark `results`; and, by heading, why each figure left out was not drawn."""
    import matplotlib.pyplot as plt

    figures, not_drawn = [], {}
    unit, measured, passed = runs.unit, runs.measured, runs.passed

    def add(name: str, title: str, caption: str, missing: str, png) -> None:
        if missing:
            not_drawn[title] = missing
            return
        with warnings.catch_warnings(), plt.style.context("ggplot"):  # the style of Optuna's plots, for all
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # One variant gives an axis of one value, which matplotlib widens itself after saying so.
            warnings.filterwarnings("ignore", "Attempting to set identical", UserWarning)
            figures.append(Figure(name, title, caption, png()))

    add("history", "Optimisation history",
        f"GFLOP/s{unit} of each measured variant and the best so far, against the "
        f"{counted(len(measured), 'measured variant')} in the order of measurement (the study's "
        f"{counted(len(runs.trials), 'trial')} less the invalid and "
        "repeated suggestions, which cost no device time). A variant that failed is infeasible, drawn at 0."
        + (" The dashed line is the seed kernel's configuration." if runs.seed else ""),
        "" if measured else "no variant has been measured", lambda: _history(measured, unit, runs.seed))
    add("importances", "Parameter importances",
        f"How much each parameter explains GFLOP/s{unit}, by PED-ANOVA (Optuna's default evaluator), over the "
        f"{counted(len(passed), 'variant')} that passed verification. With few variants, these mean little.",
        "" if len(passed) >= 2 else "needs two variants that passed verification",
        lambda: _importances(passed, unit))
    add("tiles", "GFLOP/s by tile parameters",
        f"GFLOP/s{unit} of the {counted(len(passed), 'variant')} that passed, against the block tile (block_m, "
        "block_n) and the per-thread register tile (thread_m, thread_n) or, on the tensor cores, the warp tile "
        "(warp_m, warp_n): Optuna's slice plot, coloured by the order they were measured in.",
        "" if passed else "no variant has passed verification",
        lambda: _tiles(passed, unit))
    reasons = failure_reasons(runs.trials)
    add("failures", "Failures by reason",
        "Measured variants that failed, by status (compile, launch, wrong, implausible) and reason, and invalid "
        "suggestions, never compiled, by the rule they broke (a number that differs between a rule's reasons shown "
        "as N; a suggestion breaking several rules counts for each).",
        "" if reasons else "no variant failed and no suggestion was invalid",
        lambda: _failures(reasons))
    add("records", "Cached entries",
        f"The best configuration of each cached entry ({len(records)}, from the user's cache and the shipped "
        "one): GFLOP/s (on a log scale when they span over 100x), and the fraction of the device's nominal peak. "
        "Grey bars are simulated CPU time, not GPU performance.", "" if records else f"no cache records in {root}",
        lambda: _records(records))
    for index, (where, result) in enumerate(results):
        add(f"bench-{index}", f"Benchmark comparison {index + 1}",
            f"{where}: GFLOP/s of the tuned kernel, cuBLAS and the seed's kernels per shape, on a log scale, "
            f"{result['clock']}.", "", lambda result=result: _bench(result))
    return figures, not_drawn
