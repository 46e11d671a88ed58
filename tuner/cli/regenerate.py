"""`tuner regenerate`: re-verify and re-time this device's cached records, or re-tune them."""
import sys

from .. import cache
from ..backends import BACKENDS
from ..record import file_stem
from ..stopping import stop_on_sigterm
from .arguments import SIMULATE_HELP, _positive, _seed, add_cache_dir, add_compile_workers
from .search import compile_workers, default_trials, open_device


def _regenerate(args) -> int:
    from ..regenerate import regenerate

    stop_on_sigterm(once=True)  # a SIGTERM stops it as Ctrl-C does, with what was measured kept
    runtime = open_device(args.backend, args.simulate)
    trials = args.trials or default_trials(runtime)
    print(f"regenerating the cache for {runtime.device.name} [{runtime.device.fingerprint}]; times are "
          f"{runtime.clock}", file=sys.stderr)
    root = cache.cache_dir(args.cache_dir)
    if not root.is_dir():
        print(f"tuner: note: the cache {root} does not exist: only the records shipped for this GPU model are "
              "regenerated", file=sys.stderr)
    changes = regenerate(runtime, root, trials=trials, seed=args.seed,
                         compile_workers=compile_workers(args.compile_workers, runtime),
                         say=lambda line: print(line, file=sys.stderr), done=_say)
    if not changes:
        print(f"no {runtime.backend.name} records in the cache, and none shipped for this GPU model: nothing to "
              "regenerate (run tuner search first)")
    actions = [change.action for change in changes]
    if actions:
        print(", ".join(f"{actions.count(action)} {action}" for action in dict.fromkeys(actions)) +
              f"; this device's records are in {root / 'records' / runtime.device.slug}")
    return 1 if "failed" in actions else 0


def _say(change) -> None:
    """One product's outcome, as soon as it is known (a later product may be stopped)."""
    print(f"{file_stem(change.problem)}: {change.action}")
    for detail in change.details:
        print(f"  {detail}")
    sys.stdout.flush()


def add_parsers(subparsers) -> None:
    regenerate = subparsers.add_parser(
        "regenerate", help="re-verify and re-time the cached records for this GPU and software, or re-tune them")
    regenerate.add_argument("--backend", choices=tuple(BACKENDS),
                            help="cuda or roc (default: $TUNER_BACKEND, else the GPU found)")
    regenerate.add_argument("--simulate", action="store_true", help=SIMULATE_HELP)
    regenerate.add_argument("--trials", type=_positive,
                            help="variants to measure when re-tuning a product (default 60 on a GPU, 6 simulated)")
    regenerate.add_argument("--seed", type=_seed, default=0, help="seed of the sampler and of the test inputs")
    add_compile_workers(regenerate)
    add_cache_dir(regenerate)
    regenerate.set_defaults(run=_regenerate, on_stop="what it measured is kept; run the same command to finish")
