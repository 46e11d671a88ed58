"""Proxy, as tree_surrogate_proxy.py: from N random recorded configurations, can a pairwise linear
model of log time (BOCS-style, Baptista & Poloczek 2018), fitted globally or only near the best seen,
point at a near-optimal one? For each space and seed: the same N random configurations as
tree_surrogate_proxy.py (rng = default_rng(seed)), log time with failures at the worst seen; K more
unseen recorded configurations picked by each rule; the best fraction of the optimum among the seen
and the K picked. Columns (mean over seeds):

  seen    the N alone
  rand    K random unseen configurations (the reference for any lift)
  et      tree_surrogate_proxy.py's ExtraTrees (200 trees, on parameter value positions, same seeds):
          the K fastest predicted; recomputed here so that the differences below are paired
  br_ts   Bayesian ridge (sklearn BayesianRidge, evidence-fitted prior and noise) on one-hot main
          effects plus one indicator per pair of values of two parameters; Thompson sampling: one
          posterior draw of the weights per pick, the unseen configuration with the fastest sampled
          prediction not yet picked
  br_mu   the same model, the K with the fastest posterior mean
  hs_ts   the same features under a horseshoe prior (Gibbs sampler, Makalic & Schmidt 2016, with the
          p > n draw of Bhattacharya et al. 2016), as BOCS: one chain draw per pick (burn-in 300,
          100 draws 10 apart)
  hs_mu   the same chain, the K fastest by the mean of its 100 draws
  g_nb2   the global br_mu model, picks restricted to unseen configurations within Hamming distance 2
          of the best seen (at most 2 parameters differ)
  l2_me   a local model: Bayesian ridge on main effects fitted only to the seen within distance 2 of
          the best seen, the K fastest predicted among unseen within distance 2
  l3_me   the same within distance 3
  l3_pw   the same within distance 3, with the pairwise features
  r_nb2   K random unseen within distance 2 of the best seen (the reference for the local rules)
  o_nb2   oracle: the best unseen configuration within distance 2 (an upper bound on any one-step
  o_nb3   local rule), and within distance 3

Ties in a prediction are broken at random (candidates are shuffled before a stable sort), except in
et, which follows tree_surrogate_proxy.py exactly. Under each space's means: the standard error over
seeds of each column, and of each column's per-seed difference from et (paired).

    python bench/results/search_efficiency/prototypes/pairwise_surrogate_proxy.py 90 10 20 [DATA_DIR]
"""
import glob
import itertools
import sys
from pathlib import Path

import numpy as np
from sklearn.ensemble import ExtraTreesRegressor
from sklearn.linear_model import BayesianRidge

from tuner.recorded import load

N, K, SEEDS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
DATA = Path(sys.argv[4]) if len(sys.argv) > 4 else Path(__file__).resolve().parents[5] / "shared" / "data"
COLUMNS = ("seen", "rand", "et", "br_ts", "br_mu", "hs_ts", "hs_mu", "g_nb2", "l2_me", "l3_me", "l3_pw",
           "r_nb2", "o_nb2", "o_nb3")


def features(codes: np.ndarray, sizes: list[int], pairwise: bool) -> np.ndarray:
    """One 0/1 column per parameter value that occurs (and, if `pairwise`, per pair of values of two
    parameters that occurs), over all recorded configurations."""
    varying = [j for j, size in enumerate(sizes) if size > 1]
    columns = [codes[:, j] == v for j in varying for v in np.unique(codes[:, j])]
    if pairwise:
        for j, k in itertools.combinations(varying, 2):
            pairs = codes[:, j] * sizes[k] + codes[:, k]
            columns += [pairs == value for value in np.unique(pairs)]
    return np.array(columns, dtype=float).T


def fastest(scores: np.ndarray, candidates: np.ndarray, k: int, rng) -> np.ndarray:
    order = rng.permutation(len(candidates))
    return candidates[order[np.argsort(scores[order], kind="stable")[:k]]]


def ridge(X: np.ndarray, y: np.ndarray) -> BayesianRidge:
    return BayesianRidge(max_iter=500).fit(X, y)


def thompson(draws: np.ndarray, intercept: float, X: np.ndarray, candidates: np.ndarray) -> list:
    """One pick per weight draw: the fastest sampled prediction among candidates not yet picked."""
    picked = []
    for beta in draws:
        scores = X[candidates] @ beta + intercept
        for i in np.argsort(scores):
            if candidates[i] not in picked:
                picked.append(candidates[i])
                break
    return picked


def horseshoe(X: np.ndarray, y: np.ndarray, rng, burn: int = 300, thin: int = 10, draws: int = 100):
    """Gibbs draws of the weights of y = X b + e under a horseshoe prior (y centred and scaled by
    the caller); returns `draws` draws taken `thin` apart after `burn`."""
    n, p = X.shape
    lam2, tau2, sigma2, nu, xi = np.ones(p), 1.0, 1.0, np.ones(p), 1.0
    ig = lambda a, b: b / rng.gamma(a, 1.0, size=np.shape(b))  # noqa: E731 (inverse gamma)
    out = []
    for it in range(burn + thin * draws):
        sigma = np.sqrt(sigma2)
        Phi, alpha, D = X / sigma, y / sigma, sigma2 * tau2 * lam2
        u = rng.normal(size=p) * np.sqrt(D)
        v = Phi @ u + rng.normal(size=n)
        w = np.linalg.solve((Phi * D) @ Phi.T + np.eye(n), alpha - v)
        beta = u + D * (Phi.T @ w)
        resid = y - X @ beta
        sigma2 = float(ig((n + p) / 2, resid @ resid / 2 + np.sum(beta ** 2 / (tau2 * lam2)) / 2))
        lam2 = ig(1.0, 1 / nu + beta ** 2 / (2 * tau2 * sigma2))
        tau2 = float(ig((p + 1) / 2, 1 / xi + np.sum(beta ** 2 / lam2) / (2 * sigma2)))
        nu = ig(1.0, 1 + 1 / lam2)
        xi = float(ig(1.0, 1 + 1 / tau2))
        if it >= burn and (it - burn) % thin == 0:
            out.append(beta)
    return np.array(out)


def main() -> None:
    for path in sorted(glob.glob(str(DATA / "*.json.gz"))):
        space = load(path)
        keys = list(space.results)
        pos = [{v: i for i, v in enumerate(d)} for d in space.domains.values()]
        codes = np.array([[p[v] for p, v in zip(pos, k)] for k in keys])
        sizes = [len(d) for d in space.domains.values()]
        Xm, Xp = features(codes, sizes, False), features(codes, sizes, True)
        t = np.array([space.results[k].seconds or np.inf for k in keys])
        frac = np.where(np.isfinite(t), space.optimum / t, 0.0)
        y = np.log(np.where(np.isfinite(t), t, np.nan))
        out = {name: [] for name in COLUMNS}
        for seed in range(SEEDS):
            rng = np.random.default_rng(seed)
            seen = rng.choice(len(keys), N, replace=False)  # as tree_surrogate_proxy.py
            pick_rng = np.random.default_rng(10_000 + seed)
            ys = y[seen].copy()
            ys[np.isnan(ys)] = np.nanmax(ys)
            rest = np.setdiff1d(np.arange(len(keys)), seen)
            base = frac[seen].max()
            score = lambda picked: max(base, frac[np.asarray(picked, dtype=int)].max(initial=0.0))  # noqa: E731
            out["seen"].append(base)
            out["rand"].append(score(pick_rng.choice(rest, K, replace=False)))
            trees = ExtraTreesRegressor(200, min_samples_leaf=1, random_state=seed).fit(codes[seen], ys)
            out["et"].append(score(rest[np.argsort(trees.predict(codes[rest].astype(float)))[:K]]))

            model = ridge(Xp[seen], ys)
            out["br_mu"].append(score(fastest(model.predict(Xp[rest]), rest, K, pick_rng)))
            draws = pick_rng.multivariate_normal(model.coef_, model.sigma_, size=K, method="cholesky")
            out["br_ts"].append(score(thompson(draws, model.intercept_, Xp, rest)))

            mean, scale = ys.mean(), ys.std()
            chain = horseshoe(Xp[seen], (ys - mean) / scale, pick_rng)
            out["hs_ts"].append(score(thompson(chain[::len(chain) // K][:K], 0.0, Xp, rest)))
            out["hs_mu"].append(score(fastest(Xp[rest] @ chain.mean(0), rest, K, pick_rng)))

            best = seen[np.argmin(ys)]
            distance = (codes != codes[best]).sum(1)
            near = {d: rest[distance[rest] <= d] for d in (2, 3)}
            out["g_nb2"].append(score(fastest(model.predict(Xp[near[2]]), near[2], K, pick_rng)))
            for name, d, X in (("l2_me", 2, Xm), ("l3_me", 3, Xm), ("l3_pw", 3, Xp)):
                local = seen[distance[seen] <= d]
                ylocal = ys[distance[seen] <= d]
                if len(local) >= 3:
                    scores = ridge(X[local], ylocal).predict(X[near[d]])
                else:  # too few to fit: random within the neighbourhood
                    scores = np.zeros(len(near[d]))
                out[name].append(score(fastest(scores, near[d], K, pick_rng)))
            out["r_nb2"].append(score(pick_rng.choice(near[2], min(K, len(near[2])), replace=False)))
            out["o_nb2"].append(score(near[2][np.argmax(frac[near[2]])]))
            out["o_nb3"].append(score(near[3][np.argmax(frac[near[3]])]))
        name = path.split("benchmark_hub_")[1][:-8]
        print(f"{name:26s} " + " ".join(f"{np.mean(out[c]):.3f}" for c in COLUMNS), flush=True)
        print(f"{'  (standard error)':26s} " + " ".join(f"{np.std(out[c], ddof=1) / np.sqrt(SEEDS):.3f}"
                                                       for c in COLUMNS), flush=True)
        et = np.array(out["et"])
        print(f"{'  (paired, minus et)':26s} " + " ".join(
            f"{np.std(np.array(out[c]) - et, ddof=1) / np.sqrt(SEEDS):.3f}" for c in COLUMNS), flush=True)


if __name__ == "__main__":
    print(f"{'space':26s} " + " ".join(f"{c:>5s}" for c in COLUMNS))
    main()
