"""ztune-head --results-dir: Ray Tune's layout written beside the store by a
real head, read back as Ray's tools read it (pandas on progress.csv, JSON
lines, params.json), and after a kill -9 and a restart on the same data: no
result twice, nothing the store does not hold."""

import glob
import json
import os
import signal
import unittest

import pandas

import client_cluster
from client_cluster import LocalCluster, wait_for

from ztune.client import Client

MISSING = client_cluster.missing_binaries()


def quadratic(lrs, iterations, step_sleep_s=0):
    return {"name": "ray layout", "trainable": "quadratic",
            "param_space": {"lr": {"grid_search": lrs}, "x0": 10, "target": 0,
                            "step_sleep_s": step_sleep_s},
            "metric": "loss", "mode": "min", "stop": {"training_iteration": iterations},
            "seed": 1}


@unittest.skipIf(MISSING, f"ztune binaries not built: {MISSING}")
class ResultsDirTest(unittest.TestCase):
    def setUp(self):
        self.c = LocalCluster(self.addCleanup, "results-dir", insecure=True)
        self.out = os.path.join(self.c.dir, "ray_results")

    def client(self):
        client = Client(self.c.client_endpoint, insecure=True, timeout_s=10)
        self.addCleanup(client.close)
        return client

    def trial_dir(self, exp, trial_id):
        return os.path.join(self.out, f"ray_layout_{exp}", f"quadratic_{trial_id}")

    def test_files_hold_every_result_as_ray_writes_them(self):
        self.c.start_head("--results-dir", self.out)
        self.c.start_worker("w0", 2)
        client = self.client()
        lrs, iterations = [0.05, 0.1, 0.3], 6
        exp = client.submit(quadratic(lrs, iterations))
        self.assertTrue(client.wait(exp, poll_s=0.05, timeout_s=60)["finished"], self.c.logs())
        for t in client.trials(exp):
            d = self.trial_dir(exp, t["trial_id"])
            with open(os.path.join(d, "params.json")) as f:
                self.assertEqual(json.load(f), t["config"])
            stored = client.results(t["trial_id"])
            with open(os.path.join(d, "result.json")) as f:
                lines = [json.loads(line) for line in f]
            self.assertEqual([{k: v for k, v in r.items() if k != "config"} for r in lines],
                             stored)
            self.assertTrue(all(r["config"] == t["config"] for r in lines))
            progress = pandas.read_csv(os.path.join(d, "progress.csv"), float_precision="round_trip")
            self.assertEqual(list(progress["training_iteration"]), list(range(1, iterations + 1)))
            self.assertEqual(list(progress["loss"]), [r["loss"] for r in stored])
            self.assertEqual(list(progress["done"]), [False] * (iterations - 1) + [True])

    def test_a_killed_head_never_writes_a_result_twice(self):
        head = self.c.start_head("--results-dir", self.out)
        self.c.start_worker("w0", 2)
        client = self.client()
        # 200 steps of 5 ms: about a second of results flowing.
        exp = client.submit(quadratic([0.01, 0.02], 200, step_sleep_s=0.005))
        # Kill -9 while results are flowing.
        self.assertTrue(wait_for(lambda: any(t["iteration"] >= 30 for t in client.trials(exp)),
                                 30, 0.01), self.c.logs())
        self.assertFalse(client.experiment(exp)["finished"])
        os.kill(head.pid, signal.SIGKILL)
        head.wait(timeout=30)
        self.c.start_head("--results-dir", self.out, same_ports=True)
        client = self.client()
        self.assertTrue(client.wait(exp, poll_s=0.1, timeout_s=120)["finished"], self.c.logs())
        for t in client.trials(exp):
            stored = {r["training_iteration"]: r for r in client.results(t["trial_id"])}
            self.assertEqual(sorted(stored), list(range(1, 201)))
            with open(os.path.join(self.trial_dir(exp, t["trial_id"]), "result.json")) as f:
                lines = [json.loads(line) for line in f]
            iterations = [r["training_iteration"] for r in lines]
            self.assertEqual(iterations, sorted(set(iterations)), "in order, none twice")
            for r in lines:
                r.pop("config")
                self.assertEqual(r, stored[r["training_iteration"]])
            # A head killed between a commit and its append may leave a gap,
            # never more than one turn's results of the trial.
            self.assertGreaterEqual(len(lines), 200 - 64, iterations)


if __name__ == "__main__":
    unittest.main()
