"""Session 16's prototype: the Gaussian-process moves with their kernel fitted to the space.

The default's Gaussian process (tuner/gaussian_process.py) has one fixed length scale for every
parameter, GP_LENGTH. Here each parameter has its own (automatic relevance determination), and a
noise variance is added; both are fitted by maximising the log marginal likelihood (gradient
ascent in log space), warm-started from the previous fit and fitted again each time the evaluated
points have grown by REFIT since. A parameter that does not matter gets a long length, so the
model stops spreading its uncertainty along it. Installed over `tuner.sampler.expected_improvement`
by run.py (a variant with "install": "fitted_gp")."""
import numpy as np

from tuner import gaussian_process, sampler

REFIT = 10
STEPS, WARM_STEPS, RATE = 60, 20, 0.1
BOUNDS = (np.log(0.05), np.log(20.0))
NOISE_BOUNDS = (np.log(1e-6), np.log(0.5))
STATE = {"size": None, "log_lengths": None, "log_noise": np.log(1e-3)}
ROOT3 = np.sqrt(3.0)


def _kernel(a: np.ndarray, b: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ARD Matern-3/2 covariance between the rows of `a` and `b`, and exp(-sqrt(3) r)."""
    a, b = a / lengths, b / lengths
    squared = (a * a).sum(axis=1)[:, None] + (b * b).sum(axis=1)[None, :] - 2 * a @ b.T
    scaled = ROOT3 * np.sqrt(np.maximum(squared, 0))
    decay = np.exp(-scaled)
    return (1 + scaled) * decay, decay


def _fit(points: np.ndarray, scores: np.ndarray, steps: int) -> None:
    """Adam on the log marginal likelihood over the log lengths and the log noise, from STATE."""
    dims = points.shape[1]
    theta = np.append(STATE["log_lengths"], STATE["log_noise"])
    moment, second = np.zeros(dims + 1), np.zeros(dims + 1)
    differences = (points[:, None, :] - points[None, :, :]) ** 2
    for step in range(1, steps + 1):
        lengths, noise = np.exp(theta[:dims]), np.exp(theta[dims])
        covariance, decay = _kernel(points, points, lengths)
        factor = np.linalg.cholesky(covariance + (noise + gaussian_process.JITTER) * np.eye(len(points)))
        inverse = np.linalg.solve(factor.T, np.linalg.solve(factor, np.eye(len(points))))
        alpha = inverse @ scores
        weight = np.outer(alpha, alpha) - inverse
        gradient = np.empty(dims + 1)
        gradient[:dims] = 0.5 * np.einsum("ij,ijd->d", weight * 3 * decay, differences) / lengths ** 2
        gradient[dims] = 0.5 * np.trace(weight) * noise
        moment = 0.9 * moment + 0.1 * gradient
        second = 0.999 * second + 0.001 * gradient ** 2
        theta += RATE * (moment / (1 - 0.9 ** step)) / (np.sqrt(second / (1 - 0.999 ** step)) + 1e-8)
        theta[:dims] = np.clip(theta[:dims], *BOUNDS)
        theta[dims] = np.clip(theta[dims], *NOISE_BOUNDS)
    STATE["log_lengths"], STATE["log_noise"] = theta[:dims], theta[dims]


def expected_improvement(points, values, candidates, length):
    """As tuner.gaussian_process.expected_improvement, with the fitted lengths and noise."""
    ranks = np.argsort(np.argsort(values, kind="stable"), kind="stable")
    scores = np.array([gaussian_process._NORMAL.inv_cdf((rank + 0.5) / len(values)) for rank in ranks])
    if STATE["log_lengths"] is None:
        STATE["log_lengths"] = np.full(points.shape[1], np.log(length))
        _fit(points, scores, STEPS)
        STATE["size"] = len(points)
    elif len(points) >= STATE["size"] + REFIT:
        _fit(points, scores, WARM_STEPS)
        STATE["size"] = len(points)
    lengths, noise = np.exp(STATE["log_lengths"]), np.exp(STATE["log_noise"])
    covariance, _ = _kernel(points, points, lengths)
    factor = np.linalg.cholesky(covariance + (noise + gaussian_process.JITTER) * np.eye(len(points)))
    weights = np.linalg.solve(factor.T, np.linalg.solve(factor, scores))
    cross, _ = _kernel(candidates, points, lengths)
    mean = cross @ weights
    spread = np.sqrt(np.maximum(1 - (np.linalg.solve(factor, cross.T) ** 2).sum(axis=0), 1e-12))
    z = (mean - scores.max()) / spread
    return spread * (z * 0.5 * (1 + gaussian_process._erf(z / np.sqrt(2)))
                     + np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi))


def install() -> None:
    """Put the fitted model in place of the default's fixed one."""
    sampler.expected_improvement = expected_improvement
