"""`tuner search`: the tuning job, in this process or in one worker process per GPU (--devices),
and the summary it prints at the end."""
import argparse
import contextlib
import os
import shlex
import statistics
import sys
import warnings

from .. import cache, family, simulator
from ..backends import SIMULATOR_DEFAULT, get_backend
from ..compile_ahead import default_workers
from ..dtypes import PRECISIONS
from ..launch import python_module
from ..problem import Problem
from ..formats import counted, rate
from ..record import file_stem
from ..runtime import NoGPU, Runtime, chosen_backend, detect_runtime, open_runtime
from ..sampler import SAMPLERS
from ..space import Space
from ..stopping import follow_parent, stop_on_sigterm
from ..storage import GRACE_INTERVALS, HEARTBEAT_SECONDS, redacted
from . import discard_output
from .arguments import (DTYPE_HELP, SIMULATE_HELP, STORAGE_GIVEN, _positive, _seconds, _seed, _study_name,
                        add_backend, add_cache_dir, add_compile_workers, add_storage, from_environment)
from .records import print_best

DEFAULT_SHAPE = (4096, 4096, 4096)  # on a GPU; the simulator has its own (simulator.SHAPE)
DEFAULT_TRIALS = 60
SHOWN_REASONS = 5  # failure reasons printed at the end of a search
# Options a --devices parent keeps from its workers: --storage reaches them through $TUNER_STORAGE,
# so that no password shows in a process list.
PARENT_ONLY = ("devices", "storage")


def open_device(backend: str | None, simulate: bool) -> Runtime:
    """The GPU runtime of `backend` (or of the GPU found), or the simulator, said plainly, when
    asked for or when there is no GPU."""
    backend = chosen_backend(backend)
    if simulate:
        return open_runtime(get_backend(backend or SIMULATOR_DEFAULT), simulate=True)
    try:
        return detect_runtime(backend)
    except NoGPU as reason:
        print(f"tuner: no GPU here ({reason}): running on Numba's CUDA simulator instead; "
              "its times are simulated CPU time, not GPU performance", file=sys.stderr)
        return open_runtime(get_backend(backend or SIMULATOR_DEFAULT), simulate=True)


def default_trials(runtime: Runtime) -> int:
    """Variants a search measures unless told otherwise."""
    return simulator.TRIALS if runtime.simulated else DEFAULT_TRIALS


def compile_workers(requested: int | None, runtime: Runtime) -> int:
    """The compile workers of a search in this process, `tuner search`'s or `tuner regenerate`'s:
    --compile-workers if given, else none on the simulator, which runs no compiled code, else the
    host's default."""
    if requested is not None:
        return requested
    return 0 if runtime.simulated else default_workers()


def _problem(args, runtime: Runtime) -> Problem:
    shape = args.shape or (simulator.SHAPE if runtime.simulated else DEFAULT_SHAPE)
    problem = family.chosen(args).problem_of(tuple(shape), args, args.dtype)
    lacks = runtime.lacks(PRECISIONS[args.dtype])
    if lacks:
        raise ValueError(lacks)
    refusal = runtime.refuses(problem)
    if refusal:
        raise ValueError(f"{problem.options}: {refusal}; pass smaller sizes")
    return problem


@contextlib.contextmanager
def _warnings_above(bar):
    """Show warnings on lines of their own above the progress `bar`, not inside its line (without
    catch_warnings, whose change of filters would show again a warning shown once already)."""
    shown = warnings.showwarning

    def above(message, category, filename, lineno, file=None, line=None):
        bar.write(warnings.formatwarning(message, category, filename, lineno, line).rstrip("\n"), file=sys.stderr)

    warnings.showwarning = above
    try:
        yield
    finally:
        warnings.showwarning = shown


def _search(args) -> int:
    from tqdm import tqdm

    from ..search import Search

    if args.devices is not None:
        return _search_on_devices(args)
    stop_on_sigterm(once=True)
    follow_parent()
    Space.of(get_backend(args.backend), args.dtype)  # a precision the backend lacks is said before any device is opened
    runtime = open_device(args.backend, args.simulate)
    problem = _problem(args, runtime)
    if args.trials is None and args.timeout is None:
        args.trials = default_trials(runtime)
    root = cache.cache_dir(args.cache_dir)
    search = Search(runtime, problem, root=root, seed=args.seed, sampler=args.sampler,
                    storage=args.storage, name=args.study, heartbeat=args.heartbeat)
    search.check_writable()  # before the header: a folder that cannot be written is all the run says
    unit = " (simulated)" if runtime.simulated else ""
    measured = search.measured_count()
    spent = args.trials is not None and measured >= args.trials  # a rerun of a finished study
    in_environment = from_environment(args.storage)
    print(f"searching {file_stem(problem)} on {runtime.device.name} [{runtime.device.fingerprint}]; "
          f"times are {runtime.clock}; study {search.study.study_name!r} in {search.where}"
          f"{' (from $TUNER_STORAGE)' if in_environment else ''} has {counted(search.trial_count(), 'trial')}, "
          f"{measured} measured" + (f" of a budget of {args.trials}" if args.trials else ""), file=sys.stderr)
    # Drawn on a terminal only: in a log, its redrawn frames would pile up (the summary below says it all).
    bar = tqdm(total=args.trials, initial=min(measured, args.trials or measured), unit="variant", file=sys.stderr,
               dynamic_ncols=True, desc="study", **({} if sys.stderr.isatty() else {"disable": True}))

    def progress(outcome, measurement, best):
        bar.update(search.measured_count() - bar.n)  # every worker's measurements
        bar.set_postfix_str(f"best {rate(best)}{unit}" if best else "none passed yet")

    with bar, _warnings_above(bar):
        outcome = search.run(None, args.timeout, progress, budget=args.trials,
                             compile_workers=compile_workers(args.compile_workers, runtime))
    try:
        status = _summarize(args, search, outcome, spent, in_environment)
        sys.stdout.flush()  # here, so that a reader gone is met before a stop is said
    except BrokenPipeError:
        if not outcome.interrupted:
            raise  # main's quiet exit
        # The Ctrl-C that stopped the search stopped the reader too (`tuner search | head -1`): the stop
        # is what is said, and its status the exit's.
        discard_output()
    if outcome.interrupted:
        print(f"tuner search: {'terminated (SIGTERM)' if outcome.terminated else 'interrupted'}; completed trials "
              "are kept, run the same command to resume", file=sys.stderr)
        return 143 if outcome.terminated else 130
    return status


def _summarize(args, search, outcome, spent: bool, in_environment: bool) -> int:
    """Print what the run measured and the study holds, its best and failures, and where the record
    and figures are; 0 where the cache holds a record for the product, else 1."""
    measured = search.measured_count()
    completed = search.counted_trials()
    budget = f" (its budget: {args.trials})" if args.trials else ""
    print(f"this run: measured {outcome.measured} ({outcome.failed} failed), {outcome.invalid} invalid and "
          f"{counted(outcome.duplicates, 'repeated suggestion')} answered without measuring; the study now has "
          f"{counted(search.trial_count(), 'trial')} ({len(completed)} completed), {measured} measured{budget}"
          + (f"; stopped: {outcome.stopped}" if outcome.stopped else ""))
    if spent:
        print(f"the study had already measured its budget of {args.trials}: pass a larger --trials to go on")
    if outcome.intervals:
        first, *then = outcome.intervals  # the first includes starting up: the compile workers, a first compile
        each = f", then a median of {statistics.median(then):.2f} s each" if then else ""
        ahead = f" ({counted(outcome.compile_workers, 'compile worker')} ahead)" if outcome.compile_workers else ""
        print(f"throughput: {counted(len(outcome.intervals), 'variant')} evaluated in {outcome.wall_seconds:.0f} s, "
              f"the first after {first:.2f} s{each}; verifying and timing took "
              f"{outcome.measuring_seconds / outcome.wall_seconds:.0%} of it{ahead}")
    held, left = search.kept_record()
    kept = not outcome.record and bool(left)  # a good record, another study's
    if outcome.record:
        print_best(outcome.record)
    elif kept:
        needed = measured + search.queued_ahead(left) + len(left)
        again = "run the same command again" if not args.trials or needed <= args.trials else \
            f"rerun with --trials {needed}"  # never below the budget asked
        print(f"the cache record made by study {held.study['name']!r} in {held.study['storage']} is kept until this "
              f"study has measured its configurations again ({len(left)} left): {again}")
    else:
        print("no variant has passed verification yet: nothing cached")
    print_failure_summary(completed)
    if outcome.record:
        print(f"cache record: {outcome.record_path}")
    print(f"figures: tuner report --study {shlex.quote(search.study.study_name)}"
          + (f" --cache-dir {shlex.quote(args.cache_dir)}" if args.cache_dir else "")
          + (f" --storage {shlex.quote(redacted(args.storage))}" if args.storage and not in_environment else ""))
    return 0 if outcome.record or kept else 1


def _search_on_devices(args) -> int:
    """`tuner search --devices`: the same search in one worker process per listed GPU."""
    from ..workers import check_devices, check_visible, parse_devices, run_workers

    backend, devices = get_backend(args.backend), parse_devices(args.devices)
    simulated = args.simulate or simulator.enabled()
    check_visible(backend, devices, os.environ)
    if not simulated:
        check_devices(backend, devices)
    environ = dict(os.environ)
    if args.storage and not from_environment(args.storage):
        environ.update({"TUNER_STORAGE": args.storage, STORAGE_GIVEN: "1"})  # the workers' default (PARENT_ONLY)
    if args.compile_workers is None and not simulated:
        args.compile_workers = default_workers(len(devices))  # the host's cores shared out between the devices
    return run_workers(worker_command(args, simulated), backend, devices, environ)


def worker_command(args, simulated: bool) -> list[str]:
    """The `tuner search` command line of one worker: every option of `args`, read off the
    search's own options so that none is forgotten, but those in PARENT_ONLY."""
    values = {**vars(args), "simulate": simulated}
    command = [*python_module("tuner"), "search"]
    for action in _options()._actions:  # argparse's private list, as in cli.parse (which says why)
        value = values[action.dest]
        if action.dest in PARENT_ONLY or value is None or value is False:
            continue
        flag = action.option_strings[-1:]  # none for a positional argument
        command += flag if action.nargs == 0 else [*flag, *map(str, value if isinstance(value, list) else [value])]
    return command


def print_failure_summary(trials) -> None:
    """The failure lines at the end of `tuner search`: the commonest reasons, then how many more."""
    from ..studies import failure_reasons

    reasons = failure_reasons(trials)
    if not reasons:
        print(f"failures by reason (the study's {counted(len(trials), 'completed trial')}): none")
        return
    print(f"failures by reason (the study's {counted(len(trials), 'completed trial')}; a suggestion breaking "
          "several rules "
          "counts for each):")
    for reason, count in reasons.most_common(SHOWN_REASONS):
        print(f"  {count:4} {reason}")
    if len(reasons) > SHOWN_REASONS:
        print(f"  and {len(reasons) - SHOWN_REASONS} more (tuner report draws them all)")


def _options() -> argparse.ArgumentParser:
    """The options of `tuner search`, for its parser and for its workers' command line."""
    search = argparse.ArgumentParser(add_help=False)
    add_backend(search)
    search.add_argument("--simulate", action="store_true", help=SIMULATE_HELP)
    search.add_argument("--dtype", default="float32", help=DTYPE_HELP)
    search.add_argument("--shape", nargs=3, type=_positive, metavar=("M", "N", "K"),
                        help="the product's shape (default 4096 4096 4096 on a GPU, 32 32 32 simulated)")
    search.add_argument("--trials", type=_positive,
                        help="the study's budget of measured variants, shared by every worker on it: a rerun measures "
                             "only what is missing (default 60 on a GPU, 6 simulated; none with --timeout alone)")
    search.add_argument("--timeout", type=_seconds, metavar="SECONDS", help="stop after this long")
    search.add_argument("--seed", type=_seed, default=0, help="seed of the sampler and of the test inputs")
    search.add_argument("--sampler", choices=SAMPLERS, default="local",
                        help="local (default: TPE's turn, then a model-guided local search; see docs/search.md), tpe, "
                             "random or nsga2")
    add_storage(search, "a journal file in the cache; a URL with a password is best given in $TUNER_STORAGE",
                recorded=True)
    search.add_argument("--study", metavar="NAME", type=_study_name,
                        help="study name (default: from the problem and fingerprint)")
    search.add_argument("--devices", metavar="0,1,...",
                        help="run one worker process per listed GPU of this host, each pinned to its GPU, all on the "
                             "same study")
    add_compile_workers(search)
    search.add_argument("--heartbeat", type=_positive, default=HEARTBEAT_SECONDS, metavar="SECONDS",
                        help=f"with a database --storage, a worker's heartbeat interval; a trial silent for "
                             f"{GRACE_INTERVALS} intervals is retried (default {HEARTBEAT_SECONDS})")
    for registered in family.families().values():
        registered.add_arguments(search)
    add_cache_dir(search)
    return search


def add_parsers(subparsers) -> None:
    search = subparsers.add_parser("search", parents=[_options()],
                                   help="tune on the device and cache the best configuration")
    search.set_defaults(run=_search)
