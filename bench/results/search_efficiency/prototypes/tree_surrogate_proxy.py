"""Proxy: from N random recorded configurations, can a tree ensemble point at a near-optimal one?
For each space and seed: fit on N random valid configurations (log time; failures at the worst),
predict every unseen one, and report the best fraction of the optimum among the seen and the K
predicted best."""
import glob
import sys

import numpy as np
from sklearn.ensemble import ExtraTreesRegressor, RandomForestRegressor
from tuner.recorded import load

N, K, SEEDS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for path in sorted(glob.glob('../shared/data/*.json.gz')):
    space = load(path)
    keys = list(space.results)
    pos = [{v: i for i, v in enumerate(d)} for d in space.domains.values()]
    X = np.array([[p[v] for p, v in zip(pos, k)] for k in keys], dtype=float)
    t = np.array([space.results[k].seconds or np.inf for k in keys])
    frac = np.where(np.isfinite(t), space.optimum / t, 0.0)
    y = np.log(np.where(np.isfinite(t), t, np.nan))
    out = {"seen": [], "et": [], "rf": []}
    for seed in range(SEEDS):
        rng = np.random.default_rng(seed)
        seen = rng.choice(len(keys), N, replace=False)
        ys = y[seen].copy()
        ys[np.isnan(ys)] = np.nanmax(ys)
        rest = np.setdiff1d(np.arange(len(keys)), seen)
        out["seen"].append(frac[seen].max())
        models = (("et", ExtraTreesRegressor(200, min_samples_leaf=1, random_state=seed)),
                  ("rf", RandomForestRegressor(200, min_samples_leaf=1, max_features=0.5, random_state=seed)))
        for name, model in models:
            model.fit(X[seen], ys)
            top = rest[np.argsort(model.predict(X[rest]))[:K]]
            out[name].append(max(frac[seen].max(), frac[top].max()))
    means = " ".join(f"{name} {np.mean(found):.3f}" for name, found in out.items())
    print(f"{path.split('benchmark_hub_')[1][:-8]:28s} {means}", flush=True)
