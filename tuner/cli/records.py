"""`tuner list` and `tuner show`: the cached records, from the user's cache and the shipped one."""
import json
import os
import sys

from .. import cache
from ..backends import get_backend
from ..formats import counted, duration, rate
from ..config import Tiling
from ..record import Record, file_stem
from .arguments import add_cache_dir

SHOWN_MATCHES = 4  # ids named when `tuner show` is given a part of several, or shows the newest of several


def print_best(record: Record) -> None:
    """A record's best configuration: its rate, its share of peak, its time, and its parameters."""
    best = record.best.measurement
    simulated = " (simulated CPU time)" if record.device.simulated else ""
    fraction = (f", {best.fraction_of_peak:.1%} of peak" if best.fraction_of_peak is not None
                else ", no peak to compare with" if simulated
                else f", no {record.problem.dtype} peak known for this device")
    print(f"best: {rate(best.gflops)}{simulated}{fraction}, median {duration(best.seconds)} "
          f"over {counted(best.reps, 'run')}")
    print("  " + " ".join(f"{name}={json.dumps(value)}" for name, value in record.best.config.as_dict().items()))


def _records(args) -> list[cache.Stored]:
    """The records of the user's cache and the shipped one; unreadable ones are named on stderr
    and skipped."""
    root = cache.cache_dir(args.cache_dir)
    named = f"--cache-dir {args.cache_dir}" if args.cache_dir else (
        f"TUNER_CACHE_DIR={os.environ['TUNER_CACHE_DIR']}" if os.environ.get("TUNER_CACHE_DIR") else "")
    if named and not root.is_dir():
        print(f"tuner: note: {named} does not exist: only the shipped records are shown", file=sys.stderr)
    elif (root / "records").exists() and not (root / "records").is_dir():
        print(f"tuner: note: {root / 'records'} is not a folder: only the shipped records are shown", file=sys.stderr)
    catalog = cache.Catalog.read(root)
    for error in catalog.skipped:
        print(f"tuner: skipping {error}", file=sys.stderr)
    return list(catalog.stored)


def _row(stored: cache.Stored) -> dict:
    """One record as `tuner list` shows it."""
    record = stored.record
    data = record.as_dict()
    return {"id": stored.id, "source": "shipped" if stored.shipped else "user", "fingerprint": record.fingerprint,
            "device": record.device.name, "backend": record.device.backend, "arch": record.device.arch,
            "simulated": record.device.simulated, "family": record.family, "problem": data["problem"],
            "clock": record.clock, "gflops": record.best.measurement.gflops,
            "fraction_of_peak": record.best.measurement.fraction_of_peak, "config": data["best"]["config"],
            "budget": data["budget"], "searched": data["searched"]}


def _list(args) -> int:
    rows = [_row(stored) for stored in _records(args)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no cache records in {cache.cache_dir(args.cache_dir)} (run tuner search first)")
    for row in rows:
        simulated = " simulated" if row["simulated"] else ""
        print(f"{row['id']}  {rate(row['gflops'])}{simulated}  {row['budget']['measured']} measured  "
              f"{row['searched']['finished']}  [{row['source']}]")
    return 0


def _show(args) -> int:
    matches = [stored for stored in _records(args) if args.record in stored.id]
    named = [stored for stored in matches if stored.id == args.record] or matches
    chosen = [stored for stored in named if not stored.shipped] or named  # the user's before the shipped ones
    if chosen and _one_product_on_one_gpu(chosen):
        stored = max(chosen, key=lambda found: found.record.finished)
        record = stored.record
        if len(chosen) > 1:
            print(f"tuner: note: {len(chosen)} records of {file_stem(record.problem)} on {record.device.name}, one per "
                  f"software version, match {args.record!r}: showing the newest (older: "
                  f"{_ids([found for found in chosen if found is not stored])})", file=sys.stderr)
    elif matches:
        raise ValueError(f"{len(matches)} records match {args.record!r} ({_ids(matches)}); give a longer part of one")
    else:
        raise ValueError(f"no record matches {args.record!r}; `tuner list` shows the ids")
    heading, config, source = _source(record) if args.source else (None, None, None)
    data = record.as_dict()
    if args.json:
        shown = {**data, "source": source, "source_config": config.as_dict()} if args.source else data
        print(json.dumps(shown, indent=2, sort_keys=True))
        return 0
    device = record.device
    units = "host core" if device.simulated else "multiprocessor"  # the simulator's are the host's CPUs
    print(f"{device.name} ({device.arch}, {counted(device.multiprocessors, units)}), "
          f"fingerprint {record.fingerprint}; driver {device.driver}; runtime {device.runtime}")
    print(f"{record.family} {record.problem.key}; times are {record.clock}")
    print_best(record)
    for entry in record.runners_up:
        print(f"  runner-up: {rate(entry.measurement.gflops)}  "
              + " ".join(f"{name}={json.dumps(value)}" for name, value in entry.config.as_dict().items()))
    spent = record.budget
    print(f"budget: {counted(spent.trials, 'trial')}, {spent.measured} measured ({spent.failed} failed), "
          f"{spent.invalid} invalid, {counted(spent.duplicates, 'repeated suggestion')}, "
          f"{spent.measuring_seconds:,.0f} s compiling (or loading), verifying and timing; "
          f"searched {record.started} to {record.finished}")
    where = (" on the machine that measured it (this record ships with tuner; the tuner repository's bench/results/ "
             "holds the studies of its GPU runs)" if stored.shipped else "")
    print(f"study: {record.study['name']} in {record.study['storage']}{where}")
    if source is not None:
        print(f"\n# {heading}, rendered from the installed templates (records hold no source)")
        sys.stdout.write(source)
    return 0


def _ids(records: list[cache.Stored]) -> str:
    """The first SHOWN_MATCHES ids of `records`, and how many more."""
    more = f" and {len(records) - SHOWN_MATCHES} more" if len(records) > SHOWN_MATCHES else ""
    return ", ".join(stored.id for stored in records[:SHOWN_MATCHES]) + more


def _one_product_on_one_gpu(records: list[cache.Stored]) -> bool:
    """Whether `records` are of one product on one GPU model: under several software versions
    where there are more than one, as `tuner regenerate` leaves them."""
    return len({(stored.record.family, stored.record.problem, json.dumps(stored.record.device.model, sort_keys=True))
                for stored in records}) == 1


def _source(record: Record) -> tuple[str, Tiling, str]:
    """What tuner.matmul runs from a record, its best configuration valid in this version's space:
    said in a line, the configuration, and its kernel source rendered from the installed templates."""
    from ..source import render
    from ..space import Space

    space = Space.of(get_backend(record.device.backend), record.problem.dtype, record.family)
    valid = record.valid_configs()
    if not valid:
        raise ValueError(f"none of the record's configurations is valid in this version's space (its best: "
                         f"{space.broken_rules(record.best.config)[0]}); `tuner regenerate` re-tunes its product")
    if valid[0] == record.best.config:
        return "the best configuration's kernel", valid[0], render(space, valid[0])
    return (f"the kernel of its best configuration valid in this version's space, which tuner.matmul runs (its best "
            f"breaks a rule: {space.broken_rules(record.best.config)[0]})"), valid[0], render(space, valid[0])


def add_parsers(subparsers) -> None:
    listing = subparsers.add_parser("list", help="list the cached records")
    add_cache_dir(listing)
    listing.add_argument("--json", action="store_true", help="print the records as JSON")
    listing.set_defaults(run=_list)

    show = subparsers.add_parser("show", help="show one cached record in full")
    show.add_argument("record", help="a record id from `tuner list`, or a part of one: the user's records before the "
                                     "shipped ones, the newest of one product's on one GPU model")
    add_cache_dir(show)
    show.add_argument("--json", action="store_true", help="print the record as JSON")
    show.add_argument("--source", action="store_true",
                      help="also print the best configuration's kernel source, rendered from the installed templates")
    show.set_defaults(run=_show)
