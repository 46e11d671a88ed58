"""Session 15's prototype, dropped: after TPE's turn, each move's kind (local, wide, global,
Gaussian process, TPE proposal) is chosen by Thompson sampling, on how often that kind's last
WINDOW suggestions scored in the top QUANT of the configurations evaluated before them. It is
installed over tuner/sampler.py's `_move` (with gp_share 0, every move after the turn)."""
import numpy as np
from optuna.trial import TrialState

import tuner.sampler as sampler

ARMS = ["local", "wide", "global", "gp", "tpe"]
QUANT = 0.1
WINDOW = 25
KEY = "move"
LAST = [None, None]  # the ranked points and values of the sampler's last `_ranked`


def _rewards(self, study) -> dict:
    """Each kind's rewards (1 or 0), oldest first, over the complete trials it suggested."""
    cache = self.__dict__.setdefault("_reward_cache", {})
    done = sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda trial: trial.number)
    scores, rewards = [], {arm: [] for arm in ARMS}
    for trial in done:
        point, score = self.finished.get(trial.number) or self._outcome(study, trial)
        if score is None or (score == -np.inf and point is not None and not self.grid.valid(point)):
            continue
        arm = trial.system_attrs.get(KEY)
        if arm in rewards:
            if trial.number not in cache:
                cache[trial.number] = float(len(scores) >= 5 and score > -np.inf
                                            and score >= np.quantile(scores, 1 - QUANT))
            rewards[arm].append(cache[trial.number])
        scores.append(score)
    return rewards


def _candidates(self, arm: str, study, trial, search_space, ranked, values, seen) -> list:
    if arm == "gp":
        return self._gaussian_process(ranked, values, seen)
    if arm == "tpe":
        proposal = self._tpe(study, trial, search_space, seen)
        return [proposal] if proposal else []
    if arm == "global":
        return self._global(ranked, seen)
    near = self._neighbourhood(ranked, seen, wide=arm == "wide")
    if not near:
        return []
    preference = sampler.local_preference(ranked, np.array(near), self.grid.sizes)
    return [near[int(np.argmax(preference + self.options.noise * self.rng.gumbel(size=len(near))))]]


def install() -> None:
    """Put the adaptive choice in place of the sampler's fixed shares of moves."""
    original_sample, original_ranked = sampler.LocalSearchSampler.sample_relative, sampler._ranked

    def sample_relative(self, study, trial, search_space):
        self._context = (study, trial, search_space)
        return original_sample(self, study, trial, search_space)

    def ranked(scores):
        LAST[:] = original_ranked(scores)
        return LAST[0], LAST[1]

    def move(self, ranked_points, seen):
        study, trial, search_space = self._context
        rewards = _rewards(self, study)
        draws = [self.rng.beta(1 + sum(rewards[arm][-WINDOW:]), 1 + len(rewards[arm][-WINDOW:])
                               - sum(rewards[arm][-WINDOW:])) for arm in ARMS]
        for arm in (ARMS[index] for index in np.argsort(-np.array(draws))):
            candidates = _candidates(self, arm, study, trial, search_space, ranked_points, LAST[1], seen)
            if candidates:
                study._storage.set_trial_system_attr(trial._trial_id, KEY, arm)
                return candidates
        return []

    sampler._ranked = ranked
    sampler.LocalSearchSampler.sample_relative = sample_relative
    sampler.LocalSearchSampler._move = move
