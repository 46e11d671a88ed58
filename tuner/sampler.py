"""The search strategies: Optuna samplers by name, the default being a turn of Optuna's
multivariate TPE, then a model-guided search over the finite set of valid configurations that
mixes local moves with global ones.

The default (`local`) works on any space given as ordered parameter domains and a test of
validity, so the same code tunes the project's kernels and replays recorded spaces with their
own parameters. It keeps no state of its own: every suggestion is worked out from the
study's trials, so a resumed study, or several workers on one study, go on where the study is.
Its configurations are the points of a grid (grid.py: validity, neighbours, a pool of valid
points); the density models of steps 3 and 4 are in preference.py, the Gaussian process of step 2
in gaussian_process.py. The names below are fields of its `Options`.

0. Until the study holds tpe_first measured configurations (or, sooner, invalid suggestions
   turn_waste times as many as the valid configurations evaluated, startup at least), Optuna's
   multivariate TPE makes every suggestion, its random start (startup trials) drawn from the whole
   product as Optuna's own; but after stall unmeasured trials in a row (where few combinations are
   valid, hundreds could be invalid), the next is an unseen valid configuration drawn at random,
   and so is one instead of a proposal of a configuration running (whose measurement would be
   waited for). Its model of the whole space finds the promising region in few evaluations. It may
   suggest invalid or repeated configurations; a search answers them without measuring, they do not
   count, and the steps below ignore the invalid ones. Once startup configurations are evaluated, a
   turn_gp_share of the turn's suggestions are step 2's Gaussian-process moves.
1. With tpe_first below startup, until startup configurations are evaluated, suggest an unseen
   valid one at random.
2. Then, with probability gp_share (stalled_gp_share once stalled_after measured configurations
   in a row found nothing better), a Gaussian-process move: fit a Gaussian process (a
   Matern-3/2 kernel over the parameters' domain positions, each scaled to [0, 1]) to the normal
   scores of the evaluated configurations' ranks, and suggest, among unseen valid configurations
   (a sample of the pool of step 4, and the neighbours of step 3 of the best), the one of greatest
   expected improvement. Its smooth model of the whole space ranks configurations that no
   evaluated one neighbours, as the density models below cannot.
3. Otherwise, with probability 1 - global_share, a local move: take the evaluated configurations
   best first, and the first expanded (two) that have unseen neighbours (configurations that
   differ from one of them in one parameter by one step of that parameter's ordered domain: a
   power of two up or down, a flag flipped; with doubling, also twice or half a numeric value
   in its domain).
   A wide_share of the suggestions take wide neighbours instead, which differ in one parameter
   by any other value, so that a domain along whose order the performance is not smooth is
   crossed in one move. Among those neighbours, suggest the one a TPE-style model
   prefers: the ratio of the parameter-value densities of the best (preference.GOOD_FRACTION)
   of the evaluated configurations to the rest, with ordinal smoothing, plus Gumbel noise for ties.
4. Otherwise, or when no evaluated configuration has unseen neighbours, a global move: among
   the unseen configurations known to be valid (a pool grown by random draws), suggest the one
   that is likeliest under a joint kernel density around the best evaluated ones (at most
   preference.GOOD_CAP) over the per-parameter density of the rest, plus Gumbel noise. The
   joint density keeps what the best configurations have in common together, so the search
   jumps to a distant region that shares it, where one-step moves would cross many worse ones.

A tpe_share of the suggestions of steps 2-4 take a proposal of Optuna's multivariate TPE instead,
if one of tpe_tries is unseen and valid. Leave-one-space-out chose the default: TPE's turn on
(50), wide_share 0.1, doubling, tpe_share, gp_share, stalled_after and turn_gp_share off
(docs/search.md).

Seen means evaluated, running in another worker, or queued, so after a TPE turn nothing is
suggested twice. A failed or infeasible configuration counts as the worst value. A complete trial
that the search does not count (`counts`: a measurement it doubts) is neither seen nor evaluated, so
its value steers none of the local search's own moves, and its configuration may be suggested, and
measured, again; Optuna's TPE, in its turn and its proposals, still reads every complete trial.
Evidence for the design, and how its options were chosen across recorded spaces, is in docs/search.md.
"""
import warnings
from dataclasses import dataclass

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from .gaussian_process import expected_improvement
from .grid import Grid
from .preference import joint_preference, local_preference
from .trials import is_measured


@dataclass(frozen=True)
class Options:
    """The `local` sampler's settings; the defaults are those leave-one-space-out chose
    (docs/search.md), and the moves switched off there stay here for the replays that compare them."""

    # How many valid configurations the random start draws (TPE's own start too).
    startup: int = 10
    # How many measured configurations Optuna's multivariate TPE chooses before the local search takes over.
    tpe_first: int = 50
    # In TPE's turn, a random start drawn from the whole product (as Optuna's own), and TPE's model of
    # it, may be invalid for hundreds of suggestions in a row where few combinations are valid: after
    # `stall` unmeasured trials in a row, the next suggestion is a valid configuration drawn at random.
    stall: int = 20
    # TPE's turn also ends, early, once its invalid suggestions outnumber the valid configurations
    # evaluated (startup at least) `turn_waste` times, at some point of the study's trials in order:
    # where TPE's model cannot learn which combinations are valid (a sparse recording of a space),
    # nearly every proposal is invalid, and each costs a fit over the growing study. Trials count in
    # the order they were asked, so with several workers one that completes late may undo the end.
    turn_waste: float = 15.0
    # The share of suggestions in TPE's turn, once `startup` configurations are evaluated, that are
    # Gaussian-process moves (step 2) instead of TPE's proposals.
    turn_gp_share: float = 0.0
    # The share of suggestions after the start that are global moves.
    global_share: float = 0.25
    # The share of suggestions after the start whose local move is wide: to any other value of one
    # parameter, not one step along its domain (drawn apart from the global share while they sum to 1 or less).
    wide_share: float = 0.1
    # How many of the best evaluated configurations (with unseen neighbours) offer their neighbours.
    expanded: int = 2
    # Whether a local move may also double or halve a numeric parameter (when its domain has that
    # value), so that a domain of multiples of 16 is crossed along its powers of two.
    doubling: bool = False
    # The weight of the Gumbel noise that breaks ties between the preferred moves.
    noise: float = 0.3
    # The share of suggestions after the start that take a proposal of Optuna's multivariate TPE, the
    # first of `tpe_tries` that is an unseen valid configuration (a local or global move if none is).
    tpe_share: float = 0.0
    tpe_tries: int = 5
    # The most unseen configurations of the pool that a global move scores: a uniform sample.
    global_candidates: int = 1000
    # The share of suggestions after the start that a Gaussian process makes (where at least three
    # configurations succeeded): the candidate of greatest expected improvement.
    gp_share: float = 0.0
    # After how many measured configurations in a row without a better one (0: never) the share of
    # Gaussian-process moves is `stalled_gp_share` instead of `gp_share`, until one is better.
    stalled_after: int = 0
    stalled_gp_share: float = 0.5
    # The Gaussian process's Matern-3/2 length scale, each parameter's domain positions scaled to [0, 1].
    gp_length: float = 0.5
    # The most unseen configurations of the pool that a Gaussian-process move scores: a uniform sample.
    gp_candidates: int = 2000
    # The most evaluated configurations (the best) that the Gaussian process is fitted to, so that a
    # suggestion costs milliseconds however long the search (the fit grows as the cube of their number).
    gp_points: int = 500


_SEEN = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)


class LocalSearchSampler(optuna.samplers.BaseSampler):
    """TPE's turn, then a best-first local search with global moves, over the configurations that
    `valid` accepts (tuples of values in `domains` order), learning from the complete trials that
    `counts`; see the module docstring."""

    def __init__(self, domains: dict[str, tuple], valid, seed: int | None = None, options: Options = Options(),
                 *, counts=lambda trial: True):
        self.grid = Grid(domains, valid)
        self.options = options
        self.counts = counts
        self.finished = {}  # trial number -> (point, score) of the complete trials
        self.rng = np.random.default_rng(seed)
        self.fallback = optuna.samplers.RandomSampler(seed)
        self.tpe = None  # made on its first use
        self.seed = seed

    def reseed_rng(self) -> None:
        self.rng = np.random.default_rng()
        self.fallback.reseed_rng()
        self.tpe = None
        self.seed = None

    def infer_relative_search_space(self, study, trial) -> dict:
        return {name: CategoricalDistribution(list(domain)) for name, domain in self.grid.domains.items()}

    def sample_relative(self, study, trial, search_space) -> dict:
        if not search_space:
            return {}
        options = self.options
        seen, scores, measured, unfinished, invalid, unmeasured_in_a_row = set(), {}, 0, set(), 0, 0
        wasted = False  # whether TPE's turn has ended early, its proposals mostly invalid
        best, since_best = -np.inf, 0  # the best measured score, and how many measured since it
        for other in study.get_trials(deepcopy=False, states=_SEEN):
            if other.state == TrialState.COMPLETE and not self.counts(other):
                continue
            point, score = self.finished.get(other.number) or self._outcome(study, other)
            if point is not None:
                seen.add(point)
                if score is None:
                    unfinished.add(point)
                elif score > -np.inf or self.grid.valid(point):  # an invalid suggestion (TPE's) tells nothing here
                    scores[point] = max(score, scores.get(point, -np.inf))
            if other.state == TrialState.COMPLETE:
                was_measured = is_measured(other)
                measured += was_measured
                unmeasured_in_a_row = 0 if was_measured else unmeasured_in_a_row + 1
                if was_measured:
                    best, since_best = (score, 0) if score > best else (best, since_best + 1)
                invalid += point is None or not self.grid.valid(point)
                wasted = wasted or invalid > options.turn_waste * max(len(scores), options.startup)
        turn = measured < options.tpe_first and not wasted
        if turn and unmeasured_in_a_row < options.stall:
            gaussian = (options.turn_gp_share and len(scores) >= options.startup
                        and self.rng.random() < options.turn_gp_share
                        and self._gaussian_process(*_ranked(scores), seen))
            if gaussian:
                return self.grid.params(gaussian[0])
            proposal = self._tpe_sampler().sample_relative(study, trial, search_space)
            if not proposal:
                return {}  # TPE's random start: a draw from the whole product (sample_independent)
            if self.grid.point(proposal) not in unfinished:  # one running would wait for its measurement
                return proposal
        if len(scores) < options.startup or turn:  # the random start, TPE's too
            candidates = self.grid.anywhere(seen, 1, self.rng)
        elif (options.tpe_share and self.rng.random() < options.tpe_share
              and (proposal := self._tpe(study, trial, search_space, seen))):
            candidates = [proposal]
        else:
            ranked, values = _ranked(scores)
            stalled = options.stalled_after and since_best >= options.stalled_after
            share = options.stalled_gp_share if stalled else options.gp_share
            candidates = (share and self.rng.random() < share and self._gaussian_process(ranked, values, seen)
                          or self._move(ranked, seen))
        return self.grid.params(candidates[0]) if candidates else {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.fallback.sample_independent(study, trial, param_name, param_distribution)

    def _move(self, ranked: np.ndarray, seen: set) -> list[tuple]:
        """A local move (a wide one with the options' wide_share), or a global one with their
        global_share or where no evaluated configuration has unseen neighbours."""
        draw = self.rng.random()
        near = (draw >= self.options.global_share
                and self._neighbourhood(ranked, seen, wide=draw >= 1 - self.options.wide_share))
        if near:
            preference = local_preference(ranked, np.array(near), self.grid.sizes)
            return [near[int(np.argmax(preference + self.options.noise * self.rng.gumbel(size=len(near))))]]
        return self._global(ranked, seen)

    def _neighbourhood(self, ranked: np.ndarray, seen: set, wide: bool) -> list[tuple]:
        """The unseen neighbours (wide ones if `wide`) of the best evaluated configurations that have
        any (the options' `expanded` of them)."""
        return self.grid.neighbourhood(ranked, seen, wide, self.options.expanded, self.options.doubling)

    def _global(self, ranked: np.ndarray, seen: set) -> list[tuple]:
        """The unseen point of the pool (of the options' global_candidates at most) that the joint
        model prefers; when the pool has none left, an unseen valid point drawn anywhere."""
        candidates = self.grid.unseen_pool(seen, self.options.global_candidates, self.rng)
        if not len(candidates):
            return self.grid.anywhere(seen, 1, self.rng)
        preference = joint_preference(ranked, candidates, self.grid.sizes)
        preference += self.options.noise * self.rng.gumbel(size=len(candidates))
        return [tuple(int(index) for index in candidates[int(np.argmax(preference))])]

    def _gaussian_process(self, ranked: np.ndarray, values: np.ndarray, seen: set) -> list[tuple]:
        """The candidate of greatest expected improvement under a Gaussian process fitted to the
        best evaluated configurations that did not fail (the options' gp_points at most); the
        candidates are unseen configurations of the pool (gp_candidates at most) and the unseen
        neighbours, one step away or wide, of the best. Nothing if fewer than three configurations
        were evaluated without failing."""
        fitted = np.flatnonzero(np.isfinite(values))[:self.options.gp_points]
        if len(fitted) < 3:
            return []
        candidates = self.grid.unseen_pool(seen, self.options.gp_candidates, self.rng)
        near = self._neighbourhood(ranked, seen, wide=False) + self._neighbourhood(ranked, seen, wide=True)
        if near:
            candidates = np.unique(np.concatenate((candidates, np.array(near))), axis=0)
        if not len(candidates):
            return []
        scale = 1.0 / np.maximum(self.grid.sizes - 1, 1)
        improvement = expected_improvement(ranked[fitted] * scale, values[fitted], candidates * scale,
                                           self.options.gp_length)
        return [tuple(int(index) for index in candidates[int(np.argmax(improvement))])]

    def _tpe_sampler(self) -> optuna.samplers.TPESampler:
        """Optuna's multivariate TPE, seeded as this sampler, with the options' `startup` random
        trials; made on its first use."""
        if self.tpe is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self.tpe = optuna.samplers.TPESampler(seed=self.seed, multivariate=True,
                                                      n_startup_trials=self.options.startup)
        return self.tpe

    def _tpe(self, study, trial, search_space: dict, seen: set) -> tuple | None:
        """The first of the options' tpe_tries proposals of Optuna's multivariate TPE that is unseen and valid."""
        for _ in range(self.options.tpe_tries):
            point = self.grid.point(self._tpe_sampler().sample_relative(study, trial, search_space))
            if point is not None and point not in seen and self.grid.valid(point):
                return point
        return None

    def _outcome(self, study, trial) -> tuple[tuple | None, float | None]:
        """The trial's configuration (a queued one's too) as a point, None if outside the space;
        and once it is complete, its score: the value, higher better, or -inf if it failed.
        A complete trial's outcome is kept, since it cannot change."""
        point, score = self.grid.point(trial.params or trial.system_attrs.get("fixed_params", {})), None
        if trial.state == TrialState.COMPLETE:
            feasible = all(value <= 0 for value in trial.constraints.values()) and trial.value is not None
            sign = 1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
            score = sign * trial.value if feasible else -np.inf
            self.finished[trial.number] = (point, score)
        return point, score


def _ranked(scores: dict) -> tuple[np.ndarray, np.ndarray]:
    """The evaluated points, best first, and their scores."""
    order = np.argsort(-np.array(list(scores.values())), kind="stable")
    return np.array(list(scores))[order], np.array(list(scores.values()))[order]


def make_sampler(name: str, seed: int, domains: dict[str, tuple], valid, options: Options = Options(),
                 *, counts=lambda trial: True) -> optuna.samplers.BaseSampler:
    """The sampler called `name`, seeded. `valid(values)` says whether a configuration (a tuple
    of values in `domains` order) is valid, and `counts(trial)` whether a complete trial counts;
    only `local` asks, and only it takes `options`."""
    if name == "local":
        return LocalSearchSampler(domains, valid, seed, options, counts=counts)
    if options != Options():
        raise ValueError(f"the {name} sampler takes no options; only local does")
    return OPTUNA_SAMPLERS[name](seed)


OPTUNA_SAMPLERS = {
    "tpe": lambda seed: optuna.samplers.TPESampler(seed=seed, multivariate=True),
    "random": lambda seed: optuna.samplers.RandomSampler(seed=seed),
    "nsga2": lambda seed: optuna.samplers.NSGAIISampler(seed=seed),
}
SAMPLERS = ("local", *OPTUNA_SAMPLERS)
