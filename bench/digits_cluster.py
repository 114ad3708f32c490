"""A local ztune cluster for the digits benchmarks (bench/digits_*.py): 2
workers x 1 CPU hosting examples/digits, started with scripts/local-cluster.sh
under a temporary directory on ports it picks, and the `ztune` CLI against it.
"""
import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "build/release/client/ztune")
CLUSTER = os.path.join(ROOT, "scripts/local-cluster.sh")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_spec(samples, max_t):
    """examples/digits/spec.json with `samples` configs of `max_t` epochs,
    checkpoints and exports off (the runs only train)."""
    with open(os.path.join(ROOT, "examples/digits/spec.json")) as f:
        spec = json.load(f)
    spec.update({"num_samples": samples, "stop": {"training_iteration": max_t},
                 "checkpoint": {"frequency": 0, "at_end": False}, "export_formats": []})
    return spec


class DigitsCluster:
    """`with DigitsCluster() as c:` starts it; `c.env` holds ZTUNE_HEAD,
    ZTUNE_KEY and ZTUNE_HEAD_KEY for clients."""

    def __enter__(self):
        self.run_dir = tempfile.mkdtemp(prefix="ztune-digits-bench-")
        env = dict(os.environ)
        env.update({"ZTUNE_RUN_DIR": self.run_dir, "ZTUNE_WORKER_CPUS": "1",
                    "ZTUNE_CLIENT_PORT": str(free_port()), "ZTUNE_WORKER_PORT": str(free_port()),
                    "ZTUNE_TRAINABLES": os.path.join(ROOT, "examples/digits/trainables.json")})
        up = subprocess.run([CLUSTER, "up", "2"], env=env, capture_output=True, text=True)
        if up.returncode != 0:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            raise RuntimeError("cluster did not start: " + up.stdout + up.stderr)
        env["ZTUNE_HEAD"] = "tcp://127.0.0.1:" + env["ZTUNE_CLIENT_PORT"]
        env["ZTUNE_KEY"] = os.path.join(self.run_dir, "keys/client.key")
        env["ZTUNE_HEAD_KEY"] = os.path.join(self.run_dir, "data/head.pub")
        self.env = env
        return self

    def __exit__(self, *exc):
        subprocess.run([CLUSTER, "down"], env=self.env, capture_output=True)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def cli(self, *args):
        out = subprocess.run([CLI, *args], env=self.env, capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise RuntimeError(f"ztune {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def submit(self, spec):
        path = os.path.join(self.run_dir, spec["name"] + ".json")
        with open(path, "w") as f:
            json.dump(spec, f)
        return self.cli("submit", path).strip()

    def summary(self, exp, max_t, wall_s):
        """The best final validation accuracy of `exp`, iterations spent, trials."""
        trials = json.loads(self.cli("trials", exp, "--json"))["trials"]
        best = max(trials, key=lambda t: (t.get("last_result") or {}).get("accuracy", -1))
        return {
            "best_accuracy": best["last_result"]["accuracy"],
            "best_trial": best["trial_id"],
            "best_config": {k: best["config"][k] for k in ("lr", "hidden", "alpha", "batch_size")},
            "iterations": sum(t["iteration"] for t in trials),
            "trials": len(trials),
            "stopped_early": sum(1 for t in trials if t["iteration"] < max_t),
            "wall_s": round(wall_s, 2),
        }

    def run_to_end(self, spec):
        start = time.monotonic()
        exp = self.submit(spec)
        self.cli("wait", exp, "--timeout", "900")
        return self.summary(exp, spec["stop"]["training_iteration"], time.monotonic() - start)
