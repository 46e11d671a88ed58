"""`tuner list` and `tuner show`: the cached records, from the user's cache and the shipped one."""
import json
import sys

from .. import cache
from ..backends import get_backend
from .arguments import add_cache_dir


def print_best(record: dict) -> None:
    """A record's best configuration: its rate, its share of peak, its time, and its parameters."""
    best = record["best"]["measurement"]
    simulated = " (simulated CPU time)" if record["device"]["arch"] == "simulator" else ""
    fraction = (f", {best['fraction_of_peak']:.1%} of peak" if best["fraction_of_peak"] is not None
                else ", no peak to compare with" if simulated else ", peak unknown for this device")
    print(f"best: {best['gflops']:.3g} GFLOP/s{simulated}{fraction}, median {best['seconds'] * 1e3:.3f} ms "
          f"over {best['reps']} runs")
    print("  " + " ".join(f"{name}={json.dumps(value)}" for name, value in record["best"]["config"].items()))


def _records(args) -> list[tuple[str, str, dict]]:
    """(id, source, record) for the user's cache and the shipped one; unreadable ones are
    named on stderr and skipped."""
    user = cache.cache_dir(args.cache_dir)
    found = cache.readable_records(user, lambda error: print(f"tuner: skipping {error}", file=sys.stderr))
    return [(cache.record_id(root, path), "user" if root == user else "shipped", data) for root, path, data in found]


def _row(record_id: str, source: str, record: dict) -> dict:
    """One record as `tuner list` shows it."""
    best = record["best"]
    return {"id": record_id, "source": source, "fingerprint": record["fingerprint"],
            "device": record["device"]["name"], "backend": record["device"]["backend"],
            "arch": record["device"]["arch"], "problem": record["problem"], "clock": record["clock"],
            "gflops": best["measurement"]["gflops"], "fraction_of_peak": best["measurement"]["fraction_of_peak"],
            "config": best["config"], "budget": record["budget"], "searched": record["searched"]}


def _list(args) -> int:
    rows = [_row(*found) for found in _records(args)]
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
    print_best(record)
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


def add_parsers(subparsers) -> None:
    listing = subparsers.add_parser("list", help="list the cached records")
    add_cache_dir(listing)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=_list)

    show = subparsers.add_parser("show", help="show one cached record in full")
    show.add_argument("record", help="a record id from `tuner list`, or a unique part of one")
    add_cache_dir(show)
    show.add_argument("--json", action="store_true")
    show.add_argument("--source", action="store_true",
                      help="also print the best configuration's kernel source, rendered from the installed templates")
    show.set_defaults(run=_show)
