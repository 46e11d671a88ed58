"""`tuner report`: the HTML page and PNG figures of a study, the cache and the benchmark results."""
from pathlib import Path

from .. import cache
from .arguments import _path, add_cache_dir, add_storage


def _report(args) -> int:
    from ..benchmarks import BENCH_FILE, BENCH_RESULTS
    from ..report import DEFAULT_OUT, write_report

    if args.bench and not Path(args.bench).exists():
        raise ValueError(f"--bench {args.bench}: no such file or folder; pass a {BENCH_FILE} or a folder holding them")
    report = write_report(cache.cache_dir(args.cache_dir), Path(args.out) if args.out else DEFAULT_OUT,
                          study_name=args.study, storage=args.storage,
                          bench=Path(args.bench) if args.bench else BENCH_RESULTS)
    print(f"report: {report.page.resolve()}")
    if report.figures:
        print(f"figures: {', '.join(f'{figure.name}.png' for figure in report.figures)} "
              f"in {report.page.parent.resolve()}")
    for title, why in report.not_drawn.items():
        print(f"not drawn: {title}: {why}")
    for reason in report.skipped:
        print(f"skipped: {reason}")
    return 0


def add_parsers(subparsers) -> None:
    report = subparsers.add_parser("report", help="write an HTML page and PNG figures of a study and the cache")
    add_cache_dir(report)
    report.add_argument("--study", metavar="NAME", help="the study to report (default: the one searched last)")
    add_storage(report, "the journals in the cache")
    report.add_argument("--out", metavar="DIR", type=_path, help="where to write report.html and the figures (default: "
                        "tuner-report in the current directory)")
    report.add_argument("--bench", metavar="PATH", type=_path,
                        help="a versus_cublas.json, or a folder searched for them (default: the repository's "
                             "bench/results)")
    report.set_defaults(run=_report)
