"""Session 16's prototype: TPE's turn with each parameter's order.

The default's TPE (tuner/sampler.py, `_tpe_sampler`) sees every parameter as a categorical one,
as the search suggests it, so its Parzen estimators share nothing between 64 and 128: what it
learns of one value says nothing of the next. Here TPE is asked on a shadow of the study in which
each parameter is its position in its ordered domain (an IntDistribution), so its kernels spread
along the order as the local search's density models do; its proposal is mapped back to the
parameters' values. Installed over `LocalSearchSampler._tpe_sampler` by run.py (a variant with
"install": "ordinal_tpe")."""
import warnings

import optuna
from optuna.distributions import IntDistribution
from optuna.trial import TrialState, create_trial

from tuner import sampler


class OrdinalTPE:
    """Optuna's multivariate TPE over domain positions, for a LocalSearchSampler's grid."""

    def __init__(self, local: sampler.LocalSearchSampler):
        self.grid = local.grid
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.tpe = optuna.samplers.TPESampler(seed=local.seed, multivariate=True,
                                                  n_startup_trials=local.options.startup)
        self.space = {name: IntDistribution(0, len(domain) - 1) for name, domain in self.grid.domains.items()}

    def sample_relative(self, study, trial, search_space) -> dict:
        """TPE's proposal made on the shadow of `study`, as the parameters' values; {} in its
        random start, as Optuna's own."""
        shadow = optuna.create_study(direction=study.direction)
        for other in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            point = self.grid.point(other.params)
            if point is not None and other.value is not None:
                shadow.add_trial(create_trial(params=dict(zip(self.space, point)), distributions=self.space,
                                              value=other.value))
        asked = shadow.ask()  # the shadow's own trial for this suggestion
        positions = self.tpe.sample_relative(shadow, shadow._storage.get_trial(asked._trial_id), self.space)
        if not positions:
            return {}
        return self.grid.params(tuple(int(positions[name]) for name in self.space))


def install() -> None:
    """Put the ordinal TPE in place of the default's categorical one."""
    def tpe_sampler(self):
        if self.tpe is None:
            self.tpe = OrdinalTPE(self)
        return self.tpe

    sampler.LocalSearchSampler._tpe_sampler = tpe_sampler
