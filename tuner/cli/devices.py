"""`tuner devices`: the devices found, the simulator's included, and their fingerprints."""
import json
import os
import sys

from ..backends import BACKENDS, get_backend
from .. import simulator
from ..runtime import RuntimeUnavailable, chosen_backend, open_runtime


def _devices(args) -> int:
    found = []
    chosen = chosen_backend(args.backend)
    for name in ([chosen] if chosen else list(BACKENDS)):
        if simulator.enabled():
            print(f"{name}: GPUs not probed: NUMBA_ENABLE_CUDASIM={os.environ['NUMBA_ENABLE_CUDASIM']}",
                  file=sys.stderr)
        else:
            try:
                found += [device.as_dict() for device in open_runtime(get_backend(name)).devices()]
            except RuntimeUnavailable as reason:
                print(f"{name}: no GPU ({reason})", file=sys.stderr)
        found.append(simulator.describe(name).as_dict())
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for device in found:
        print(f"{device['backend']:5} {device['fingerprint']}  {device['name']} ({device['arch']})  "
              f"driver {device['driver']}, runtime {device['runtime']}")
    return 0


def add_parsers(subparsers) -> None:
    devices = subparsers.add_parser("devices", help="print the detected devices and their fingerprints")
    devices.add_argument("--backend", choices=tuple(BACKENDS),
                         help="cuda or roc (default: $TUNER_BACKEND, else both)")
    devices.add_argument("--json", action="store_true", help="print the devices as JSON")
    devices.set_defaults(run=_devices)
