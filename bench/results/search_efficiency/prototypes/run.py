"""Session 15's and 16's prototypes, replayed (../exploration_log.txt):

    [TUNER_ROOT=DIR] python run.py OUT.jsonl EVALUATIONS FIRST_SEED END_SEED SPACES VARIANTS

SPACES: comma-separated names of ../shared/data files without `benchmark_hub_` and `.json.gz`.
VARIANTS: JSON, name -> {"constants": {tuner/sampler.py's settings}} (the names as logged, the
constants of the time in capitals: GP_SHARE, Options.gp_share in code that has Options), with
"adaptive": true to
install adaptive_moves.py over the sampler, or "install": MODULE for another prototype of this
folder (session 16: fitted_gp, ordinal_tpe). The code replayed is TUNER_ROOT's (a checkout, with
doubling_density.patch applied for that prototype), this repository's by default. Lines already
in OUT are skipped."""
import concurrent.futures
import json
import multiprocessing
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CODE = Path(os.environ.get("TUNER_ROOT", HERE.parents[3]))
sys.path[:0] = [str(CODE / "bench"), str(CODE), str(HERE)]


def work(path: str, name: str, spec: dict, seed: int, evaluations: int) -> dict:
    import importlib

    import replay_experiment

    if spec.get("adaptive") or spec.get("install"):
        importlib.import_module(spec.get("install", "adaptive_moves")).install()
    import tuner.sampler

    options = hasattr(tuner.sampler, "Options")  # the settings' names: lower case since session 17
    replay_experiment.CANDIDATES[name] = {key.lower() if options else key: value
                                          for key, value in spec["constants"].items()}
    row = replay_experiment._run(path, "candidate", name, seed, evaluations)
    row["space"] = Path(path).name
    return row


def main() -> None:
    out, evaluations = Path(sys.argv[1]), int(sys.argv[2])
    seeds, spaces, variants = range(int(sys.argv[3]), int(sys.argv[4])), sys.argv[5].split(","), json.loads(sys.argv[6])
    done = set()
    if out.exists():
        done = {(row["space"], row["candidate"], row["seed"]) for row in map(json.loads, out.open())}
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
    data = HERE.parents[4] / "shared" / "data"
    todo = [(str(data / f"benchmark_hub_{space}.json.gz"), name, spec, seed) for space in spaces
            for name, spec in variants.items() for seed in seeds
            if (f"benchmark_hub_{space}.json.gz", name, seed) not in done]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context, max_tasks_per_child=1) as pool:
        for future in concurrent.futures.as_completed([pool.submit(work, *task, evaluations) for task in todo]):
            with out.open("a") as file:
                file.write(json.dumps(future.result()) + "\n")


if __name__ == "__main__":
    main()
