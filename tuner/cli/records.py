"""`tuner list` and `tuner show`: the cached records, from the user's cache and the shipped one.

Neither opens a device, so what they say of a record compares it with the other records (newest,
superseded, shadowed, unusable), never with this machine: which record tuner.matmul takes here
depends on this machine's GPU model and fingerprint (`tuner devices`), as tuner/tuned.py says."""
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
    """A record's best configuration: its rate, its share of peak, its time, and its parameters;
    where it breaks a rule of this version's space, which configuration tuner.matmul runs instead."""
    best = record.best.measurement
    simulated = " (simulated CPU time)" if record.device.simulated else ""
    fraction = (f", {best.fraction_of_peak:.1%} of peak" if best.fraction_of_peak is not None
                else ", no peak to compare with" if simulated
                else f", no {record.problem.dtype} peak known for this device")
    print(f"best: {rate(best.gflops)}{simulated}{fraction}, median {duration(best.seconds)} "
          f"over {counted(best.reps, 'run')}")
    print(f"  {record.best.config.describe(get_backend(record.device.backend))}")
    rank, rule = _serving(record)
    if rule:
        print(f"  not run: it breaks a rule of this version's space ({rule}); " + (
            f"tuner.matmul runs runner-up {rank}" if rank else
            "so does every configuration of the record, which tuner.matmul skips: tuner regenerate re-tunes it"))


def _serving(record: Record) -> tuple[int | None, str]:
    """The place in its ranking of the configuration tuner.matmul runs from `record` (0: its best;
    None where every one breaks a rule of this version's space), and the first rule its best
    breaks ("" for none)."""
    broken = record.broken_rules()
    return next((place for place, rules in enumerate(broken) if not rules), None), (broken[0] or [""])[0]


def _records(args) -> list[cache.Stored]:
    """The records of the user's cache and the shipped one; unreadable ones are named on stderr
    and skipped."""
    root = cache.cache_dir(args.cache_dir)
    named = f"--cache-dir {args.cache_dir}" if args.cache_dir else (
        f"TUNER_CACHE_DIR={os.environ['TUNER_CACHE_DIR']}" if os.environ.get("TUNER_CACHE_DIR") else "")
    if named and not root.is_dir():
        print(f"tuner: note: {named} does not exist: only the shipped records are shown", file=sys.stderr)
    elif os.path.exists(root / "records") and not os.path.isdir(root / "records"):  # False where it cannot be seen
        print(f"tuner: note: {root / 'records'} is not a folder: only the shipped records are shown", file=sys.stderr)
    catalog = cache.Catalog.read(root)
    for error in catalog.skipped:
        print(f"tuner: skipping {error}", file=sys.stderr)
    return list(catalog.stored)


def _product_on_gpu(stored: cache.Stored) -> tuple:
    """What records of one product on one GPU model, one per software version, share."""
    return stored.record.family, stored.record.problem, json.dumps(stored.record.device.model, sort_keys=True)


def _used(records: list[cache.Stored]) -> dict[tuple, cache.Stored]:
    """The record tuner.matmul uses of each product on each GPU model under each fingerprint: of
    those it can use (one configuration breaking no rule), the user's before the shipped one."""
    used = {}
    for stored in records:  # the user's first
        if stored.record.valid_configs():
            used.setdefault((*_product_on_gpu(stored), stored.record.fingerprint), stored)
    return used


def _newest(used: dict[tuple, cache.Stored]) -> dict[tuple, cache.Stored]:
    """Of each product on each GPU model, the newest of the `used` records: the one tuner.matmul
    takes for that product on a machine of that model whose fingerprint has no record of its family
    and dtype (once it passes verification there)."""
    newest = {}
    for (*product, _), stored in used.items():
        key = tuple(product)
        newest[key] = max(newest.get(key, stored), stored, key=lambda found: found.record.finished_at)
    return newest


def _row(stored: cache.Stored, used: dict[tuple, cache.Stored], newest: dict[tuple, cache.Stored]) -> dict:
    """One record as `tuner list` shows it, given the `used` records and the `newest` of each
    product on each GPU model."""
    record = stored.record
    data = record.as_dict()
    rank, rule = _serving(record)
    product = _product_on_gpu(stored)
    shadowed = rank is not None and used[(*product, record.fingerprint)] is not stored
    newer = newest[product] if rank is not None and not shadowed and newest[product] is not stored else None
    return {"id": stored.id, "source": "shipped" if stored.shipped else "user", "fingerprint": record.fingerprint,
            "device": record.device.name, "backend": record.device.backend, "arch": record.device.arch,
            "simulated": record.device.simulated, "family": record.family, "problem": data["problem"],
            "clock": record.clock, "gflops": record.best.measurement.gflops,
            "fraction_of_peak": record.best.measurement.fraction_of_peak, "config": data["best"]["config"],
            "budget": data["budget"], "searched": data["searched"],
            "status": "unusable" if rank is None else "shadowed" if shadowed else "superseded" if newer else "newest",
            "superseded_by": newer and newer.id, "best_breaks": rule or None,
            "serves": None if rank is None else {"rank": rank, "config": record.configs[rank].as_dict(),
                                                 "gflops": record.ranked[rank].measurement.gflops}}


def _status(row: dict, fingerprints: dict[str, str]) -> str:
    """The last column of a `tuner list` line: whether tuner.matmul uses the record, and what of it."""
    if row["status"] == "unusable":
        return (f"unusable: every configuration breaks a rule (its best: {row['best_breaks']}); "
                "tuner regenerate re-tunes it")
    status = (f"superseded by {fingerprints[row['superseded_by']]}" if row["superseded_by"] else
              "shadowed by your record of the same id" if row["status"] == "shadowed" else "newest")
    rank = row["serves"]["rank"]
    return f"{status}, runner-up {rank} serves (its best breaks a rule: {row['best_breaks']})" if rank else status


def _list(args) -> int:
    records = _records(args)
    used = _used(records)
    newest = _newest(used)
    rows = [_row(stored, used, newest) for stored in records]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no cache records in {cache.cache_dir(args.cache_dir)} (run tuner search first)")
    fingerprints = {row["id"]: row["fingerprint"] for row in rows}
    for row in rows:
        simulated = " simulated" if row["simulated"] else ""
        gflops = row["serves"]["gflops"] if row["serves"] else row["gflops"]
        print(f"{row['id']}  {rate(gflops)}{simulated}  {row['budget']['measured']} measured  "
              f"{row['searched']['finished']}  [{row['source']}]  {_status(row, fingerprints)}")
    return 0


def _show(args) -> int:
    records = _records(args)
    matches = [stored for stored in records if args.record in stored.id]
    named = [stored for stored in matches if stored.id == args.record] or matches
    chosen = [stored for stored in named if not stored.shipped] or named  # the user's before the shipped ones
    if chosen and _one_product_on_one_gpu(chosen):
        stored = max(chosen, key=lambda found: found.record.finished_at)
        record = stored.record
        if len(chosen) > 1:
            print(f"tuner: note: {len(chosen)} records of {file_stem(record.problem)} on {record.device.name}, one per "
                  f"software version, match {args.record!r}: showing the newest (older: "
                  f"{_ids([found for found in chosen if found is not stored])})", file=sys.stderr)
    elif matches:
        raise ValueError(f"{len(matches)} records match {args.record!r} ({_ids(matches)}); give a longer part of one")
    else:
        raise ValueError(f"no record matches {args.record!r}; `tuner list` shows the ids")
    newest = _newest(_used(records)).get(_product_on_gpu(stored), stored)
    if newest is not stored and record.valid_configs():
        print(f"tuner: note: superseded by {newest.id}, a newer record of its product on its GPU model: "
              "tuner.matmul on that model takes a record of the machine's own fingerprint where it has one of "
              "the family and dtype, else the newest that passes verification there", file=sys.stderr)
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
    device_backend = get_backend(device.backend)
    for entry, rules in zip(record.runners_up, record.broken_rules()[1:]):
        print(f"  runner-up: {rate(entry.measurement.gflops)}  "
              + entry.config.describe(device_backend)
              + (f"  (not run: it breaks a rule: {rules[0]})" if rules else ""))
    spent = record.budget
    print(f"budget: {counted(spent.trials, 'trial')}, {spent.measured} measured ({spent.failed} failed), "
          f"{spent.invalid} invalid, {counted(spent.duplicates, 'repeated suggestion')}, "
          f"{spent.measuring_seconds:,.0f} s compiling (or loading), counting, verifying and timing; "
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
    return len({_product_on_gpu(stored) for stored in records}) == 1


def _source(record: Record) -> tuple[str, Tiling, str]:
    """What tuner.matmul runs from a record (_serving): said in a line, the configuration, and its
    kernel source rendered from the installed templates."""
    from ..source import render
    from ..space import Space

    rank, rule = _serving(record)
    if rank is None:
        raise ValueError(f"none of the record's configurations is valid in this version's space (its best: "
                         f"{rule}); `tuner regenerate` re-tunes its product")
    heading = (f"the kernel of runner-up {rank}, which tuner.matmul runs (its best breaks a rule: {rule})" if rank
               else "the best configuration's kernel")
    config = record.configs[rank]
    return heading, config, render(Space.of(get_backend(record.device.backend), record.problem.dtype, record.family),
                                   config)


def add_parsers(subparsers) -> None:
    listing = subparsers.add_parser("list", help="list the cached records, each against the others (no device is "
                                                 "opened: tuner devices prints this machine's fingerprints)")
    add_cache_dir(listing)
    listing.add_argument("--json", action="store_true", help="print the records as JSON")
    listing.set_defaults(run=_list)

    show = subparsers.add_parser("show", help="show one cached record in full")
    show.add_argument("record", help="a record id from `tuner list`, or a part of one: the user's records before the "
                                     "shipped ones, the newest of one product's on one GPU model")
    add_cache_dir(show)
    show.add_argument("--json", action="store_true", help="print the record as JSON")
    show.add_argument("--source", action="store_true",
                      help="also print the kernel source of the configuration tuner.matmul runs (the best, unless it "
                           "breaks a rule of this version's space), rendered from the installed templates")
    show.set_defaults(run=_show)
