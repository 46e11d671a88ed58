"""`tuner search`, `list`, `show`, `report`, `regenerate`, `replay` and `devices`: the tuning job,
the per-GPU cache and offline replays."""
import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from .. import cache
from ..backends import BACKENDS, get_backend
from ..compile_ahead import default_workers
from ..problem import Problem
from ..runtime import NoGPU, Runtime, RuntimeUnavailable, detect_runtime, open_runtime, simulator_enabled
from ..sampler import SAMPLERS
from ..stopping import follow_parent, stop_on_sigterm
from ..storage import GRACE_INTERVALS, HEARTBEAT_SECONDS, redacted

DEFAULT_SHAPE = {"gpu": (4096, 4096, 4096), "simulator": (32, 32, 32)}
DEFAULT_TRIALS = {"gpu": 60, "simulator": 6}
SHOWN_REASONS = 5  # failure reasons printed at the end of a search


def _open(backend: str | None, simulate: bool) -> Runtime:
    """The GPU runtime of `backend` (or of the GPU found), or the simulator, said plainly, when
    asked for or when there is no GPU."""
    if simulate:
        return open_runtime(get_backend(backend or "cuda"), simulate=True)
    try:
        return detect_runtime(backend)
    except NoGPU as reason:
        print(f"tuner: no GPU here ({reason}): running on Numba's CUDA simulator instead; "
              "its times are simulated CPU time, not GPU performance", file=sys.stderr)
        return open_runtime(get_backend(backend or "cuda"), simulate=True)


def _problem(args, runtime: Runtime) -> Problem:
    problem = Problem(*(args.shape or DEFAULT_SHAPE["simulator" if runtime.simulated else "gpu"]), dtype=args.dtype)
    refusal = runtime.refuses(problem)
    if refusal:
        raise ValueError(f"--shape {refusal}; pass a smaller --shape")
    return problem


def _search(args) -> int:
    from optuna.trial import TrialState
    from tqdm import tqdm

    from ..search import Search

    if args.devices is not None:
        return _search_on_devices(args)
    stop_on_sigterm()
    follow_parent()
    runtime = _open(args.backend, args.simulate)
    problem = _problem(args, runtime)
    if args.trials is None and args.timeout is None:
        args.trials = DEFAULT_TRIALS["simulator" if runtime.simulated else "gpu"]
    root = cache.cache_dir(args.cache_dir)
    search = Search(runtime, problem, root=root, seed=args.seed, sampler=args.sampler,
                    storage=args.storage, name=args.study, heartbeat=args.heartbeat)
    unit = " (simulated)" if runtime.simulated else ""
    measured = search.shared.measured_count(search.study)
    print(f"searching {problem.key} on {runtime.device.name} [{runtime.device.fingerprint}]; "
          f"times are {runtime.clock}; study {search.study.study_name!r} has {search.trial_count()} trials, "
          f"{measured} measured" + (f" of a budget of {args.trials}" if args.trials else ""), file=sys.stderr)
    bar = tqdm(total=args.trials, initial=min(measured, args.trials or measured), unit="variant", file=sys.stderr,
               dynamic_ncols=True, desc="study")

    def progress(outcome, measurement, best):
        bar.update(search.shared.measured_count(search.study) - bar.n)  # every worker's measurements
        bar.set_postfix_str(f"best {best:.3g} GFLOP/s{unit}" if best else "none passed yet")

    workers = args.compile_workers
    if workers is None:
        workers = 0 if runtime.simulated else default_workers()
    with bar:
        outcome = search.run(None, args.timeout, progress, budget=args.trials, compile_workers=workers)
    measured = search.shared.measured_count(search.study)
    completed = search.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    budget = f" (its budget: {args.trials})" if args.trials else ""
    print(f"this run: measured {outcome.measured} ({outcome.failed} failed), {outcome.invalid} invalid and "
          f"{outcome.duplicates} repeated suggestions answered without measuring; the study now has "
          f"{search.trial_count()} trials ({len(completed)} completed), {measured} measured{budget}"
          + (f"; stopped: {outcome.stopped}" if outcome.stopped else ""))
    if outcome.intervals:
        print(f"throughput: {len(outcome.intervals)} variants evaluated in {outcome.wall_seconds:.0f} s, a median of "
              f"{statistics.median(outcome.intervals):.2f} s each; verifying and timing took "
              f"{outcome.measuring_seconds / outcome.wall_seconds:.0%} of it"
              + (f" ({workers} compile workers ahead)" if workers else ""))
    if outcome.record:
        _print_record_summary(outcome.record)
    else:
        print("no variant has passed verification yet: nothing cached")
    print_failure_summary(completed)
    if outcome.record:
        print(f"cache record: {outcome.record_path}")
    print(f"figures: tuner report --study {search.study.study_name}"
          + (f" --cache-dir {args.cache_dir}" if args.cache_dir else "")
          + (f" --storage {redacted(args.storage)}" if args.storage and args.storage != os.environ.get("TUNER_STORAGE")
             else ""))
    if outcome.interrupted:
        print(f"tuner search: {'terminated (SIGTERM)' if outcome.terminated else 'interrupted'}; completed trials "
              "are kept, run the same command to resume", file=sys.stderr)
        return 143 if outcome.terminated else 130
    return 0 if outcome.record else 1


def _search_on_devices(args) -> int:
    """`tuner search --devices`: the same search in one worker process per listed GPU."""
    from ..workers import check_devices, parse_devices, run_workers

    backend, devices = get_backend(args.backend), parse_devices(args.devices)
    simulated = args.simulate or simulator_enabled()
    if not simulated:
        check_devices(backend, devices)
    if args.storage:
        os.environ["TUNER_STORAGE"] = args.storage  # the workers' default, so no password shows in a process list
    if args.compile_workers is None and not simulated:
        args.compile_workers = default_workers(len(devices))  # the host's cores shared out between the devices
    return run_workers(worker_command(args, simulated), backend, devices)


def worker_command(args, simulated: bool) -> list[str]:
    """The `tuner search` command line of one worker: these arguments without --devices (and
    without --storage, which the workers find in $TUNER_STORAGE)."""
    command = [sys.executable, "-m", "tuner", "search", "--backend", args.backend, "--dtype", args.dtype,
               "--seed", str(args.seed), "--sampler", args.sampler, "--heartbeat", str(args.heartbeat)]
    command += ["--simulate"] if simulated else []
    command += ["--shape", *map(str, args.shape)] if args.shape else []
    for option in ("trials", "timeout", "study", "cache_dir", "compile_workers"):
        if getattr(args, option) is not None:
            command += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
    return command


def print_failure_summary(trials) -> None:
    """The failure lines at the end of `tuner search`: the commonest reasons, then how many more."""
    from ..studies import failure_reasons

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


def _print_record_summary(record: dict) -> None:
    best = record["best"]["measurement"]
    simulated = " (simulated CPU time)" if record["device"]["arch"] == "simulator" else ""
    fraction = (f", {best['fraction_of_peak']:.1%} of peak" if best["fraction_of_peak"] is not None
                else ", no peak to compare with" if simulated else ", peak unknown for this device")
    print(f"best: {best['gflops']:.3g} GFLOP/s{simulated}{fraction}, median {best['seconds'] * 1e3:.3f} ms "
          f"over {best['reps']} runs")
    print("  " + " ".join(f"{name}={json.dumps(value)}" for name, value in record["best"]["config"].items()))


def _records(args) -> list[tuple[str, str, dict]]:
    """(id, source, record) for the user's cache and the shipped one; unreadable ones are
    reported on stderr and skipped."""
    user = cache.cache_dir(args.cache_dir)
    found = cache.readable_records(user, lambda error: print(f"tuner: skipping {error}", file=sys.stderr))
    return [(cache.record_id(root, path), "user" if root == user else "shipped", data) for root, path, data in found]


def _summary(record_id: str, source: str, record: dict) -> dict:
    best = record["best"]
    return {"id": record_id, "source": source, "fingerprint": record["fingerprint"],
            "device": record["device"]["name"], "backend": record["device"]["backend"],
            "arch": record["device"]["arch"], "problem": record["problem"], "clock": record["clock"],
            "gflops": best["measurement"]["gflops"], "fraction_of_peak": best["measurement"]["fraction_of_peak"],
            "config": best["config"], "budget": record["budget"], "searched": record["searched"]}


def _list(args) -> int:
    rows = [_summary(*found) for found in _records(args)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no cache records in {cache.cache_dir(args.cache_dir)} (run tuner search first)")
    for row in rows:
        simulated = " simulated" if row["arch"] == "simulator" else ""
        print(f"{row['id']}  {row['gflops']:.3g} GFLOP/s{simulated}  {row['budget']['measured']} measured  "
              f"{row['searched']['finished']}  [{row['source']}]")
    return 0


def _show(args) -> int:
    matches = [found for found in _records(args) if args.record in found[0]]
    exact = [found for found in matches if found[0] == args.record]
    if exact or len(matches) == 1:
        record = (exact or matches)[0][2]  # the user's record before a shipped one of the same id
    else:
        raise ValueError(f"{len(matches)} records match {args.record!r}; "
                         "give a longer part of an id from `tuner list`" if matches else
                         f"no record matches {args.record!r}; `tuner list` shows the ids")
    source = _source(record) if args.source else None
    if args.json:
        print(json.dumps({**record, "source": source} if args.source else record, indent=2, sort_keys=True))
        return 0
    device = record["device"]
    print(f"{device['name']} ({device['arch']}, {device['multiprocessors']} multiprocessors), "
          f"fingerprint {record['fingerprint']}; driver {device['driver']}; runtime {device['runtime']}")
    print(f"problem {record['problem']}; times are {record['clock']}")
    _print_record_summary(record)
    for entry in record["runners_up"]:
        print(f"  runner-up: {entry['measurement']['gflops']:.3g} GFLOP/s  "
              + " ".join(f"{name}={json.dumps(value)}" for name, value in entry["config"].items()))
    print(f"budget: {record['budget']}; searched {record['searched']['started']} to {record['searched']['finished']}")
    print(f"study: {record['study']['name']} in {record['study']['storage']}")
    if source is not None:
        print("\n# the best configuration's kernel, rendered from the installed templates (records hold no source)")
        sys.stdout.write(source)
    return 0


def _source(record: dict) -> str:
    """The kernel source of a record's best configuration, rendered from the installed templates."""
    from ..config import Config
    from ..source import render
    from ..space import InvalidConfig, Space

    space = Space.of(get_backend(record["device"]["backend"]), record["problem"]["dtype"])
    try:
        return render(space, Config(**record["best"]["config"]))
    except InvalidConfig as broken:
        raise ValueError(f"the record's best configuration breaks a rule of this version's space ({broken}); "
                         "`tuner regenerate` re-tunes its product") from None


def _report(args) -> int:
    from ..benchmarks import BENCH_RESULTS
    from ..report import DEFAULT_OUT, write_report

    report = write_report(cache.cache_dir(args.cache_dir), Path(args.out) if args.out else DEFAULT_OUT,
                          study_name=args.study, storage=args.storage,
                          bench=Path(args.bench) if args.bench else BENCH_RESULTS)
    print(f"report: {report.page.resolve()}")
    if report.figures:
        print(f"figures: {', '.join(f'{figure.name}.png' for figure in report.figures)} "
              f"in {report.page.parent.resolve()}")
    for title, why in report.not_drawn.items():
        print(f"not drawn: {title}: {why}")
    return 0


def _regenerate(args) -> int:
    from ..regenerate import regenerate

    runtime = _open(args.backend, args.simulate)
    trials = args.trials or DEFAULT_TRIALS["simulator" if runtime.simulated else "gpu"]
    print(f"regenerating the cache for {runtime.device.name} [{runtime.device.fingerprint}]; times are "
          f"{runtime.clock}", file=sys.stderr)
    root = cache.cache_dir(args.cache_dir)
    changes = regenerate(runtime, root, trials=trials, seed=args.seed, report=lambda line: print(line, file=sys.stderr))
    if not changes:
        print(f"no {runtime.backend.name} records in the cache: nothing to regenerate (run tuner search first)")
    for change in changes:
        print(f"{change.problem.key}: {change.action}")
        for detail in change.details:
            print(f"  {detail}")
    if changes:
        actions = [change.action for change in changes]
        print(", ".join(f"{actions.count(action)} {action}" for action in dict.fromkeys(actions)) +
              f"; this device's records are in {root / 'records' / runtime.device.slug}")
    return 1 if "failed" in [change.action for change in changes] else 0


def _replay(args) -> int:
    from ..recorded import load
    from ..replay import NEAR, summarize

    space = load(args.file)
    summary = summarize(space, args.trials, args.repeat, args.sampler, args.seed, args.pending).as_dict()
    if args.json:
        print(json.dumps({"space": space.name, "configurations": len(space.results), "left_out": space.left_out,
                          "optimum_seconds": space.optimum, **summary}))
        return 0
    fraction, near = summary["fraction_of_optimum"], summary["within_5_percent"]
    left_out = f" ({space.left_out} more have values outside its domains and are left out)" if space.left_out else ""
    print(f"{space.name}: {len(space.results)} recorded configurations{left_out}, the best "
          f"{space.optimum * 1e3:.4g} ms")
    fewer = (f", {summary['mean_evaluations']:.4g} on average: the space ran out or the sampler converged"
             if summary["mean_evaluations"] < args.trials else "")
    print(f"{args.sampler}, {args.repeat} search{'es' if args.repeat > 1 else ''} of up to {args.trials} evaluations"
          f"{fewer} (seeds {args.seed}..{args.seed + args.repeat - 1}): fraction of the optimum found: mean "
          f"{fraction['mean']:.3f}, min {fraction['min']:.3f}, max {fraction['max']:.3f}, sd {fraction['stdev']:.3f}")
    within = f"median {near['median_evaluations']:g} evaluations" if near["runs"] else "never"
    print(f"within {NEAR - 1:.0%} of the optimum: {near['runs']} of {args.repeat} searches, {within}; "
          f"recorded cost {summary['mean_recorded_cost_seconds']:.0f} s per search")
    return 0


def _devices(args) -> int:
    from ..devices import describe_simulator

    found = []
    for name in ([args.backend] if args.backend else list(BACKENDS)):
        if simulator_enabled():
            print(f"{name}: GPUs not probed: NUMBA_ENABLE_CUDASIM=1", file=sys.stderr)
        else:
            try:
                found += [device.as_dict() for device in open_runtime(get_backend(name)).devices()]
            except RuntimeUnavailable as reason:
                print(f"{name}: no GPU ({reason})", file=sys.stderr)
        found.append(describe_simulator(name).as_dict())
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for device in found:
        print(f"{device['backend']:5} {device['fingerprint']}  {device['name']} ({device['arch']})  "
              f"driver {device['driver']}, runtime {device['runtime']}")
    return 0


def add_parsers(subparsers) -> None:
    search = subparsers.add_parser("search", help="tune on the device and cache the best configuration")
    search.add_argument("--backend", required=True, choices=tuple(BACKENDS))
    search.add_argument("--simulate", action="store_true",
                        help="run on Numba's CUDA simulator (also when NUMBA_ENABLE_CUDASIM=1 or no GPU is found)")
    search.add_argument("--dtype", default="float32", help="float32 (default), float64 or float16 (cuda only)")
    search.add_argument("--shape", nargs=3, type=int, metavar=("M", "N", "K"),
                        help="the product's shape (default 4096 4096 4096 on a GPU, 32 32 32 simulated)")
    search.add_argument("--trials", type=_positive,
                        help="the study's budget of measured variants, shared by every worker on it: a rerun measures "
                             "only what is missing (default 60 on a GPU, 6 simulated)")
    search.add_argument("--timeout", type=_seconds, metavar="SECONDS", help="stop after this long")
    search.add_argument("--seed", type=int, default=0, help="seed of the sampler and of the test inputs")
    search.add_argument("--sampler", choices=SAMPLERS, default="local",
                        help="local (default: model-guided local search, see docs/search.md), tpe, random or nsga2")
    search.add_argument("--storage", metavar="URL", default=os.environ.get("TUNER_STORAGE"),
                        help="an Optuna storage URL, or a journal file path (default: $TUNER_STORAGE, else a journal "
                             "file in the cache); a URL with a password is best given in $TUNER_STORAGE")
    search.add_argument("--study", metavar="NAME", help="study name (default: from the problem and fingerprint)")
    search.add_argument("--devices", metavar="0,1,...",
                        help="run one worker process per listed GPU of this host, each pinned to its GPU, all on the "
                             "same study")
    search.add_argument("--compile-workers", type=_count, metavar="N",
                        help="processes that compile the next variants while one is measured (default on a GPU: "
                             "the host's cores less one per device, within its memory; 0 on the simulator, "
                             "which runs no compiled code)")
    search.add_argument("--heartbeat", type=_positive, default=HEARTBEAT_SECONDS, metavar="SECONDS",
                        help=f"with a database --storage, a worker's heartbeat interval; a trial silent for "
                             f"{GRACE_INTERVALS} intervals is retried (default {HEARTBEAT_SECONDS})")
    _add_cache_dir(search)
    search.set_defaults(run=_search)

    listing = subparsers.add_parser("list", help="list the cached records")
    _add_cache_dir(listing)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=_list)

    show = subparsers.add_parser("show", help="show one cached record in full")
    show.add_argument("record", help="a record id from `tuner list`, or a unique part of one")
    _add_cache_dir(show)
    show.add_argument("--json", action="store_true")
    show.add_argument("--source", action="store_true",
                      help="also print the best configuration's kernel source, rendered from the installed templates")
    show.set_defaults(run=_show)

    report = subparsers.add_parser("report", help="write an HTML page and PNG figures of a study and the cache")
    _add_cache_dir(report)
    report.add_argument("--study", metavar="NAME", help="the study to report (default: the one searched last)")
    report.add_argument("--storage", metavar="URL", default=os.environ.get("TUNER_STORAGE"),
                        help="an Optuna storage URL, or a journal file path (default: $TUNER_STORAGE, else the "
                             "journals in the cache)")
    report.add_argument("--out", metavar="DIR", help="where to write report.html and the figures (default: "
                        "tuner-report in the current directory)")
    report.add_argument("--bench", metavar="PATH", help="a versus_cublas.json, or a folder searched for them "
                        "(default: the repository's bench/results)")
    report.set_defaults(run=_report)

    regenerate = subparsers.add_parser(
        "regenerate", help="re-verify and re-time the cached records for this GPU and software, or re-tune them")
    regenerate.add_argument("--backend", choices=tuple(BACKENDS),
                            help="cuda or roc (default: $TUNER_BACKEND, else the GPU found)")
    regenerate.add_argument("--simulate", action="store_true", help="run on Numba's CUDA simulator")
    regenerate.add_argument("--trials", type=_positive,
                            help="variants to measure when re-tuning a product (default 60 on a GPU, 6 simulated)")
    regenerate.add_argument("--seed", type=int, default=0, help="seed of the sampler and of the test inputs")
    _add_cache_dir(regenerate)
    regenerate.set_defaults(run=_regenerate)

    replay = subparsers.add_parser(
        "replay", help="replay searches on a recorded space (a Kernel Tuner cache file or a tuner sweep file)")
    replay.add_argument("file", help="a Kernel Tuner cache file (.json or .json.gz) or a bench/sweep.py .jsonl file")
    replay.add_argument("--trials", type=_positive, default=100, help="evaluations per search (default 100)")
    replay.add_argument("--repeat", type=_positive, default=20, help="independent searches (default 20)")
    replay.add_argument("--sampler", choices=SAMPLERS, default="local")
    replay.add_argument("--seed", type=int, default=0, help="seed of the first search; the others follow it")
    replay.add_argument("--pending", type=_count, default=0, metavar="N",
                        help="suggestions held running before each is told, as N compile workers hold them")
    replay.add_argument("--json", action="store_true")
    replay.set_defaults(run=_replay)

    devices = subparsers.add_parser("devices", help="print the detected devices and their fingerprints")
    devices.add_argument("--backend", choices=tuple(BACKENDS))
    devices.add_argument("--json", action="store_true")
    devices.set_defaults(run=_devices)


def _add_cache_dir(parser: argparse.ArgumentParser) -> None:
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
