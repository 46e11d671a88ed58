"""`tuner replay`: searches replayed offline on a recorded space, and how close they came."""
import json

from ..formats import counted, duration
from ..sampler import SAMPLERS
from .arguments import SEED_LIMIT, _count, _positive, _seed


def _replay(args) -> int:
    from ..recorded import load
    from ..replay import NEAR, summarize

    if args.seed + args.repeat > SEED_LIMIT:
        raise ValueError(f"--seed {args.seed} with --repeat {args.repeat} goes past the last seed, {SEED_LIMIT - 1}: "
                         "choose a smaller --seed")
    space = load(args.file)
    summary = summarize(space, args.trials, args.repeat, args.sampler, args.seed, args.pending).as_dict()
    if args.json:
        print(json.dumps({"space": space.name, "configurations": len(space.results), "left_out": space.left_out,
                          "optimum_seconds": space.optimum, **summary}))
        return 0
    fraction, near = summary["fraction_of_optimum"], summary["within_5_percent"]
    left_out = (f" (and {counted(space.left_out, 'other')} left out, with values outside its domains)"
                if space.left_out else "")
    print(f"{space.name}: {counted(len(space.results), 'recorded configuration')}{left_out}, the best "
          f"{duration(space.optimum)}")
    fewer = (f", {summary['mean_evaluations']:,.1f}".removesuffix(".0") + " on average: the space ran out or the "
             "sampler converged"
             if summary["mean_evaluations"] < args.trials else "")
    print(f"{args.sampler}, {counted(args.repeat, 'search', 'searches')} of up to {counted(args.trials, 'evaluation')}"
          f"{fewer} (seeds {args.seed}..{args.seed + args.repeat - 1}): fraction of the optimum found: mean "
          f"{fraction['mean']:.3f}, min {fraction['min']:.3f}, max {fraction['max']:.3f}, sd {fraction['stdev']:.3f}")
    within = f"median {counted(near['median_evaluations'], 'evaluation')}" if near["runs"] else "never"
    print(f"within {NEAR - 1:.0%} of the optimum: {near['runs']} of {counted(args.repeat, 'search', 'searches')}, "
          f"{within}; recorded cost {summary['mean_recorded_cost_seconds']:,.0f} s per search")
    return 0


def add_parsers(subparsers) -> None:
    replay = subparsers.add_parser(
        "replay",
        help="replay searches on a recorded space (a Kernel Tuner cache or T4 output file, or a tuner sweep file)")
    replay.add_argument("file", help="a Kernel Tuner cache file or T4 output file (.json or .json.gz), or a "
                                     "bench/sweep.py .jsonl file")
    replay.add_argument("--trials", type=_positive, default=100, help="evaluations per search (default 100)")
    replay.add_argument("--repeat", type=_positive, default=20, help="independent searches (default 20)")
    replay.add_argument("--sampler", choices=SAMPLERS, default="local")
    replay.add_argument("--seed", type=_seed, default=0, help="seed of the first search; the others follow it")
    replay.add_argument("--pending", type=_count, default=0, metavar="N",
                        help="suggestions held running before each is told, as N compile workers hold them; "
                             "at most --trials less 1 count, as a search never measures those held past its budget")
    replay.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    replay.set_defaults(run=_replay, on_stop="nothing is kept, since the summary needs every search; a smaller "
                                             "--repeat or --trials ends sooner")
