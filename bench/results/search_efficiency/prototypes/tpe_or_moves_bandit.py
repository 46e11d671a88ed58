"""Session 20's prototype, dropped: after TPE's turn, Thompson sampling between TPE's proposals and the
local sampler's moves, on how often each one's last `window` measured trials ranked in the `top` of those
measured before them. Its raw lines (written to /tmp/x/bandit/runs.jsonl) are tpe_or_moves_bandit.jsonl.gz,
summarised in tpe_or_moves_bandit.txt."""
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
import numpy as np
from optuna.trial import TrialState
sys.path.insert(0, "/work/main")
from tuner import recorded, replay as replay_module, sampler as S
from tuner.trials import is_measured

ARM = "bandit:arm"

class Bandit(S.LocalSearchSampler):
    def __init__(self, *a, top=5, window=15, first=50, arms=("tpe", "move"), **k):
        super().__init__(*a, **k)
        self.top, self.window, self.first, self.arms = top, window, first, arms

    def sample_relative(self, study, trial, search_space):
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        measured = [t for t in trials if is_measured(t)]
        if len(measured) < self.first:
            return super().sample_relative(study, trial, search_space)
        seen, scores = set(), {}
        for other in study.get_trials(deepcopy=False, states=S._SEEN):
            point, score = self.finished.get(other.number) or self._outcome(study, other)
            if point is not None:
                seen.add(point)
                if score is not None and (score > -np.inf or self.grid.valid(point)):
                    scores[point] = max(score, scores.get(point, -np.inf))
        # rewards: an arm's measured trial is a hit if it ranks among the `top` of those measured before it
        values = np.array([t.value for t in measured])
        hits = {arm: [] for arm in self.arms}
        for i, t in enumerate(measured):
            arm = t.system_attrs.get(ARM)
            if arm in hits:
                earlier = values[:i]
                hits[arm].append(int((earlier > values[i]).sum() < self.top))
        draws = {arm: self.rng.beta(1 + sum(h[-self.window:]), 1 + len(h[-self.window:]) - sum(h[-self.window:]))
                 for arm, h in hits.items()}
        arm = max(draws, key=draws.get)
        study._storage.set_trial_system_attr(trial._trial_id, ARM, arm)
        ranked, vals = S._ranked(scores)
        if arm == "tpe" and (proposal := self._tpe(study, trial, search_space, seen)):
            return self.grid.params(proposal)
        if arm == "gp" and (g := self._gaussian_process(ranked, vals, seen)):
            return self.grid.params(g[0])
        candidates = self._move(ranked, seen)
        return self.grid.params(candidates[0]) if candidates else {}

VARIANTS = {
    "default": None,
    "bandit tpe/move top5 w15": dict(top=5, window=15),
    "bandit tpe/move top3 w10": dict(top=3, window=10),
}
OPTIONS = S.Options()

def one(args):
    path, variant, seed = args
    space = recorded.load(path)
    kw = VARIANTS[variant]
    if kw is not None:
        def bandit(name, seed_, domains, valid, options):
            return Bandit(domains, valid, seed_, OPTIONS, **kw)
        replay_module.make_sampler = bandit
    else:
        replay_module.make_sampler = S.make_sampler
    t = time.time()
    run = replay_module.replay(space, 400, "local", seed)
    return path, variant, seed, [run.fraction(space.optimum, b) for b in (25, 50, 100, 200, 400)], time.time() - t

if __name__ == "__main__":
    import glob
    seeds = range(int(sys.argv[1]), int(sys.argv[2]))
    variants = sys.argv[3].split(",") if len(sys.argv) > 3 else list(VARIANTS)
    paths = sorted(glob.glob("/work/shared/data/*.json.gz"))
    jobs = [(p, v, s) for p in paths for v in variants for s in seeds]
    with ProcessPoolExecutor(2) as pool, open("/tmp/x/bandit/runs.jsonl", "a") as out:
        for path, variant, seed, fr, dt in pool.map(one, jobs, chunksize=2):
            out.write(json.dumps({"space": path.split("/")[-1], "variant": variant, "seed": seed, "fractions": fr,
                                  "seconds": dt}) + "\n")
            out.flush()
