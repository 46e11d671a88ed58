"""A Gaussian process's expected improvement, the model behind the local sampler's
Gaussian-process moves (tuner/sampler.py, Options.gp_share; off in the default): numpy only, for a few
hundred evaluated points."""
import math
import statistics

import numpy as np

# The diagonal added to the covariance of the evaluated points, for a stable factorization.
JITTER = 1e-6
_NORMAL = statistics.NormalDist()
_erf = np.vectorize(math.erf, otypes=[float])


def expected_improvement(points: np.ndarray, values: np.ndarray, candidates: np.ndarray,
                         length: float) -> np.ndarray:
    """Each candidate's expected improvement over the best of `values` (higher better) under a
    Gaussian process with a Matern-3/2 kernel of `length`, fitted at `points` to the values'
    normal scores (their ranks mapped to standard normal quantiles), so that the few
    configurations that run many times slower do not flatten the rest."""
    ranks = np.argsort(np.argsort(values, kind="stable"), kind="stable")
    scores = np.array([_NORMAL.inv_cdf((rank + 0.5) / len(values)) for rank in ranks])
    factor = np.linalg.cholesky(matern(points, points, length) + JITTER * np.eye(len(points)))
    weights = np.linalg.solve(factor.T, np.linalg.solve(factor, scores))
    cross = matern(candidates, points, length)
    mean = cross @ weights
    spread = np.sqrt(np.maximum(1 - (np.linalg.solve(factor, cross.T) ** 2).sum(axis=0), 1e-12))
    z = (mean - scores.max()) / spread
    return spread * (z * 0.5 * (1 + _erf(z / np.sqrt(2))) + np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi))


def matern(a: np.ndarray, b: np.ndarray, length: float) -> np.ndarray:
    """The Matern-3/2 covariance of `length` between the rows of `a` and those of `b`."""
    squared = (a * a).sum(axis=1)[:, None] + (b * b).sum(axis=1)[None, :] - 2 * a @ b.T
    distance = np.sqrt(np.maximum(squared, 0)) * np.sqrt(3) / length
    return (1 + distance) * np.exp(-distance)
