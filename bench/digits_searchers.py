#!/usr/bin/python3
"""Optuna TPE against random search on the digits example (examples/digits)
at equal budget: per seed, N configs of lr, hidden, alpha and batch size, each
trained max_t epochs, once by the head's random search (search_alg
basic_variant, the spec's seed) and once suggested by Optuna's TPE sampler
(search_alg external, driven by ztune.optuna_search with
TPESampler(seed), max_concurrent 2), one after the other on a local cluster
of 2 workers x 1 CPU. Prints one JSON object: per seed and searcher the best
final validation accuracy, its config, and the wall time; then the median
over the seeds of each searcher's best accuracy and of the per-seed
difference TPE - random, in points.

    /usr/bin/python3 bench/digits_searchers.py [--samples 30] [--max-t 3] [--seeds 1 2 3 4 5]

Needs the release build (scripts/build.sh) and the digits example's and
Optuna's Python packages (scripts/install-deps.sh). Starts its own cluster
under a temporary directory on ports it picks; stops it at the end.
"""
import argparse
import json
import os
import statistics
import sys
import time

from digits_cluster import ROOT, DigitsCluster, base_spec

sys.path.insert(0, os.path.join(ROOT, "python"))
import optuna  # noqa: E402
from ztune.client import Client  # noqa: E402
from ztune.optuna_search import OptunaSearch  # noqa: E402


def run_tpe(cluster, spec, seed, startup):
    start = time.monotonic()
    exp = cluster.submit(spec)
    env = cluster.env
    with Client(env["ZTUNE_HEAD"], client_key=env["ZTUNE_KEY"], head_key=env["ZTUNE_HEAD_KEY"],
                timeout_s=10.0, retries=3) as client:
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)
        OptunaSearch(client, exp, sampler=sampler).run()
    return cluster.summary(exp, spec["stop"]["training_iteration"], time.monotonic() - start)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=30)
    p.add_argument("--max-t", type=int, default=3)
    p.add_argument("--startup", type=int, default=10, help="TPE's random startup trials")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    a = p.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    base = base_spec(a.samples, a.max_t)
    out = {"workload": {"example": "examples/digits", "samples": a.samples, "max_t": a.max_t,
                        "workers": "2 x 1 CPU", "tpe": {"n_startup_trials": a.startup,
                                                        "max_concurrent": 2}},
           "runs": []}
    with DigitsCluster() as cluster:
        for seed in a.seeds:
            random_spec = dict(base, seed=seed, name=f"digits-random-{seed}")
            tpe_spec = dict(base, seed=seed, name=f"digits-tpe-{seed}",
                            search_alg={"type": "external", "max_concurrent": 2})
            r_random = cluster.run_to_end(random_spec)
            r_tpe = run_tpe(cluster, tpe_spec, seed, a.startup)
            out["runs"].append({
                "seed": seed, "random": r_random, "tpe": r_tpe,
                "tpe_minus_random_points": round(100 * (r_tpe["best_accuracy"] - r_random["best_accuracy"]), 2),
            })
            print(json.dumps(out["runs"][-1]), file=sys.stderr, flush=True)
    runs = out["runs"]
    out["median"] = {
        "random_best_accuracy": statistics.median(r["random"]["best_accuracy"] for r in runs),
        "tpe_best_accuracy": statistics.median(r["tpe"]["best_accuracy"] for r in runs),
        "tpe_minus_random_points": statistics.median(r["tpe_minus_random_points"] for r in runs),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
