"""Where the default's replays stand after 100 evaluations: each seed's fraction of the optimum
and its last six improvements (evaluation: configuration's first seven values = fraction); first,
the fraction at each value of the first parameter with the optimum's other values.

    python trace.py SPACE SEEDS     (e.g. convolution_milo_W7800 0,1,2)
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))

from tuner import recorded, replay  # noqa: E402


def main() -> None:
    space = recorded.load(HERE.parents[4] / "shared" / "data" / f"benchmark_hub_{sys.argv[1]}.json.gz")
    names, measured, answer = list(space.domains), [], replay.answer

    def recording(study, trial, kind, value, *rest):
        answer(study, trial, kind, value, *rest)
        if kind == replay.Kind.MEASURED:
            measured.append((tuple(trial.params[name] for name in names[:7]), space.optimum * value))

    optimum = next(key for key, result in space.results.items() if result.seconds == space.optimum)
    print(names[0], " ".join(f"{value}:{_fraction(space, (value, *optimum[1:]))}" for value in space.domains[names[0]]))
    replay.answer = recording
    for seed in map(int, sys.argv[2].split(",")):
        measured.clear()
        run = replay.replay(space, 100, "local", seed)
        best, steps = 0.0, []
        for count, (configuration, fraction) in enumerate(measured, 1):
            if fraction > best:
                best = fraction
                steps.append(f"{count}:{configuration}={fraction:.3f}")
        print(seed, f"{run.fraction(space.optimum, 100):.3f}", " ".join(steps[-6:]))


def _fraction(space, key: tuple) -> str:
    result = space.results.get(key)
    return f"{space.optimum / result.seconds:.2f}" if result and result.seconds else "-"


if __name__ == "__main__":
    main()
