#!/usr/bin/python3
"""ASHA against FIFO on the digits example (examples/digits): the same seeded
search (N configs of lr, hidden, alpha, batch size; max_t epochs each) run
once without a scheduler and once under ASHA (grace 1, reduction factor 3,
max_t), one after the other on a local cluster of 2 workers x 1 CPU. Prints
one JSON object: per scheduler the best final validation accuracy, the
trial holding it, the training iterations spent in all, and the wall time;
then ASHA's iterations as a fraction of FIFO's and the accuracy gap in
points.

    /usr/bin/python3 bench/digits_schedulers.py [--samples 32] [--max-t 27] [--seeds 7]

Needs the release build (scripts/build.sh) and the digits example's Python
packages (scripts/install-deps.sh). Starts its own cluster under a temporary
directory on ports it picks; stops it at the end.
"""
import argparse
import json

from digits_cluster import DigitsCluster, base_spec


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--max-t", type=int, default=27)
    p.add_argument("--seeds", type=int, nargs="+", default=[7])
    a = p.parse_args()
    base = base_spec(a.samples, a.max_t)
    with DigitsCluster() as cluster:
        out = {"workload": {"example": "examples/digits", "samples": a.samples, "max_t": a.max_t,
                            "workers": "2 x 1 CPU", "asha": {"grace_period": 1,
                                                             "reduction_factor": 3}},
               "runs": []}
        for seed in a.seeds:
            fifo = dict(base, seed=seed, name=f"digits-fifo-{seed}")
            asha = dict(base, seed=seed, name=f"digits-asha-{seed}",
                        scheduler={"type": "asha", "max_t": a.max_t, "grace_period": 1,
                                   "reduction_factor": 3})
            r_fifo = cluster.run_to_end(fifo)
            r_asha = cluster.run_to_end(asha)
            out["runs"].append({
                "seed": seed, "fifo": r_fifo, "asha": r_asha,
                "asha_iterations_fraction": round(r_asha["iterations"] / r_fifo["iterations"], 3),
                "accuracy_gap_points": round(100 * (r_fifo["best_accuracy"] - r_asha["best_accuracy"]), 2),
            })
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
