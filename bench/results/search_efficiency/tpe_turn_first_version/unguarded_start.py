"""How long TPE's turn stays on invalid suggestions without the guard (Options.stall), on the project's
CUDA float32 space, where 1.5% of the product is valid (docs/search.md, TPE's turn):

    python unguarded_start.py SEEDS > unguarded_start.txt

The default sampler of this commit with its stall made unreachable, as the first version of TPE's
turn was: a random start drawn from the whole product, and TPE's proposals taken as they are.
Each valid new suggestion is answered with a random value, an invalid or repeated one as a
search answers it. Prints, per seed, the longest run of suggestions in a row that were not
measured before tpe_first configurations were, stopping a seed at LIMIT suggestions."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna

sys.path[:0] = [str(Path(__file__).resolve().parents[3])]
from provenance import provenance  # noqa: E402

from tuner.sampler import LocalSearchSampler, Options  # noqa: E402
from tuner.backends import CUDA  # noqa: E402
from tuner.space import Space  # noqa: E402
from tuner.trials import MAX_UNMEASURED_IN_A_ROW, answer, suggest  # noqa: E402

LIMIT = 2000
UNGUARDED = Options(stall=10**9)


def longest_unmeasured(seed: int) -> dict:
    space = Space.of(CUDA, "float32")
    domains = space.domains()

    def valid(values: tuple) -> bool:
        return not space.violations(space.config_type(**dict(zip(domains, values))))

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=LocalSearchSampler(domains, valid, seed, UNGUARDED))
    values, measured, in_a_row, longest, asked = np.random.default_rng(seed), {}, 0, 0, 0
    while len(measured) < UNGUARDED.tpe_first and asked < LIMIT:
        trial, asked = study.ask(), asked + 1
        key = tuple(suggest(trial, domains).values())
        if valid(key) and key not in measured:
            measured[key], in_a_row = float(values.random()), 0
            answer(study, trial, "measured", measured[key], 0.0)
        else:
            in_a_row += 1
            longest = max(longest, in_a_row)
            answer(study, trial, *(("duplicate", measured[key], 0.0) if key in measured else ("invalid", 0.0, 1.0)))
    return {"seed": seed, "longest_unmeasured_in_a_row": longest, "asked": asked, "measured": len(measured)}


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({**provenance(f"python unguarded_start.py {sys.argv[1]}", "CPU (no GPU needed)"),
                      "commit": commit, "stop_after_unmeasured_in_a_row": MAX_UNMEASURED_IN_A_ROW, "limit": LIMIT}))
    for seed in range(int(sys.argv[1])):
        print(json.dumps(longest_unmeasured(seed)), flush=True)


if __name__ == "__main__":
    main()
