"""How much the default sampler's density models prefer candidate points (tuner/grid.py) given the
evaluated ones, best first: log l(x) - log g(x), as Optuna's TPE, with l the density of the best
evaluated points and g that of the rest. The local moves use per-parameter densities; the global
moves a joint density around the best, which keeps what they have in common together."""
import numpy as np

# The share of the evaluated points, the best, that the density l is of.
GOOD_FRACTION = 0.25
# The most evaluated points the joint density is centred on.
GOOD_CAP = 25
# The joint density's kernel: the weight kept on a best point's own value of a parameter; the
# rest goes half to the values one step away, half spread over all.
KERNEL_KEEP = 0.5


def local_preference(ranked: np.ndarray, candidates: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """log l(x) - log g(x): per-parameter value densities of the best GOOD_FRACTION of the
    evaluated points (l) and of the rest (g), each value's count shared half with its ordered
    neighbours, multiplied over parameters."""
    good_count = max(1, int(np.ceil(GOOD_FRACTION * len(ranked))))
    good, rest = ranked[:good_count], ranked[good_count:]
    preference = np.zeros(len(candidates))
    for dimension, size in enumerate(sizes):
        values = candidates[:, dimension]
        preference += np.log(_density(good[:, dimension], size)[values])
        preference -= np.log(_density(rest[:, dimension], size)[values])
    return preference


def joint_preference(ranked: np.ndarray, candidates: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """log l(x) - log g(x): l a mixture of product kernels centred on the best evaluated points
    (GOOD_FRACTION of them, at most GOOD_CAP), g the per-parameter density of the rest, as in
    local_preference."""
    good_count = min(GOOD_CAP, max(1, int(np.ceil(GOOD_FRACTION * len(ranked)))))
    good, rest = ranked[:good_count], ranked[good_count:]
    log_kernel = np.zeros((len(candidates), good_count))
    preference = np.zeros(len(candidates))
    for dimension, size in enumerate(sizes):
        if size == 1:
            continue
        steps = np.abs(candidates[:, dimension, None] - good[None, :, dimension])
        spread = (1 - KERNEL_KEEP) / 2
        log_kernel += np.log(np.select([steps == 0, steps == 1], [KERNEL_KEEP, spread / min(2, size - 1)], 0)
                             + spread / size)
        preference -= np.log(_density(rest[:, dimension], size)[candidates[:, dimension]])
    peak = log_kernel.max(axis=1)
    return preference + peak + np.log(np.exp(log_kernel - peak[:, None]).sum(axis=1))


def _density(values: np.ndarray, size: int) -> np.ndarray:
    counts = np.bincount(values, minlength=size).astype(float) + 1.0
    smoothed = counts.copy()
    smoothed[1:] += 0.5 * counts[:-1]
    smoothed[:-1] += 0.5 * counts[1:]
    return smoothed / smoothed.sum()
