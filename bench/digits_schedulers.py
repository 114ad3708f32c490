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
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "build/release/client/ztune")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(env, *args):
    out = subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"ztune {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def run(env, spec, workdir, name):
    path = os.path.join(workdir, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    start = time.monotonic()
    exp = cli(env, "submit", path).strip()
    cli(env, "wait", exp, "--timeout", "900")
    wall = time.monotonic() - start
    trials = json.loads(cli(env, "trials", exp, "--json"))["trials"]
    best = max(trials, key=lambda t: (t.get("last_result") or {}).get("accuracy", -1))
    return {
        "best_accuracy": best["last_result"]["accuracy"],
        "best_trial": best["trial_id"],
        "best_iterations": best["iteration"],
        "iterations": sum(t["iteration"] for t in trials),
        "trials": len(trials),
        "stopped_early": sum(1 for t in trials if t["iteration"] < spec["stop"]["training_iteration"]),
        "wall_s": round(wall, 2),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--max-t", type=int, default=27)
    p.add_argument("--seeds", type=int, nargs="+", default=[7])
    a = p.parse_args()
    with open(os.path.join(ROOT, "examples/digits/spec.json")) as f:
        base = json.load(f)
    base.update({"num_samples": a.samples, "stop": {"training_iteration": a.max_t},
                 "checkpoint": {"frequency": 0, "at_end": False}, "export_formats": []})
    run_dir = tempfile.mkdtemp(prefix="ztune-digits-bench-")
    env = dict(os.environ)
    env.update({"ZTUNE_RUN_DIR": run_dir, "ZTUNE_WORKER_CPUS": "1",
                "ZTUNE_CLIENT_PORT": str(free_port()), "ZTUNE_WORKER_PORT": str(free_port()),
                "ZTUNE_TRAINABLES": os.path.join(ROOT, "examples/digits/trainables.json")})
    up = subprocess.run([os.path.join(ROOT, "scripts/local-cluster.sh"), "up", "2"], env=env,
                        capture_output=True, text=True)
    if up.returncode != 0:
        sys.exit("cluster did not start: " + up.stdout + up.stderr)
    env["ZTUNE_HEAD"] = "tcp://127.0.0.1:" + env["ZTUNE_CLIENT_PORT"]
    env["ZTUNE_KEY"] = os.path.join(run_dir, "keys/client.key")
    env["ZTUNE_HEAD_KEY"] = os.path.join(run_dir, "data/head.pub")
    try:
        out = {"workload": {"example": "examples/digits", "samples": a.samples, "max_t": a.max_t,
                            "workers": "2 x 1 CPU", "asha": {"grace_period": 1,
                                                             "reduction_factor": 3}},
               "runs": []}
        for seed in a.seeds:
            fifo = dict(base, seed=seed, name=f"digits-fifo-{seed}")
            asha = dict(base, seed=seed, name=f"digits-asha-{seed}",
                        scheduler={"type": "asha", "max_t": a.max_t, "grace_period": 1,
                                   "reduction_factor": 3})
            r_fifo = run(env, fifo, run_dir, fifo["name"])
            r_asha = run(env, asha, run_dir, asha["name"])
            out["runs"].append({
                "seed": seed, "fifo": r_fifo, "asha": r_asha,
                "asha_iterations_fraction": round(r_asha["iterations"] / r_fifo["iterations"], 3),
                "accuracy_gap_points": round(100 * (r_fifo["best_accuracy"] - r_asha["best_accuracy"]), 2),
            })
        print(json.dumps(out, indent=1))
    finally:
        subprocess.run([os.path.join(ROOT, "scripts/local-cluster.sh"), "down"], env=env,
                       capture_output=True)
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
