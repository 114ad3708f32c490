"""The fleet simulator (bench/fleet) against a real head with CURVE on:
100 simulated workers with 10 CPUs each run 1,000 trials at once; the head is
killed with SIGKILL while they run and restarted on the same data. Every trial
ends TERMINATED with every iteration stored exactly once, and every simulated
worker came back to the new head without being declared dead. The head holds
the TRAINs of these trials for its commits and sends them inside its ACKs
(--train-with-ack-ms below their steps): TRAINs held when the head dies are
never sent, and the new head drives those actors again."""

import collections
import json
import os
import signal
import subprocess
import unittest

import client_cluster
from client_cluster import CLI_BIN, HEAD_BIN, LocalCluster, wait_for

from ztune.client import Client

FLEET_BIN = os.path.join(client_cluster.BUILD_DIR, "bench", "fleet", "fleet")
MISSING = client_cluster.missing_binaries() + [b for b in [FLEET_BIN] if not os.access(b, os.X_OK)]

WORKERS = 100
CPUS = 10
TRIALS = 1000
ITERATIONS = 10
STEP_MS = 400
# Below every step (400 ms +-10%): each TRAIN after a result goes in an ACK.
TRAIN_WITH_ACK_MS = 200


@unittest.skipIf(MISSING, f"binaries not built (the fleet is built with the benchmarks): {MISSING}")
class FleetTest(unittest.TestCase):
    def setUp(self):
        self.c = LocalCluster(self.addCleanup, "fleet")
        self.admin_key = self.c.add_client("admin", "admin")
        self.stats_file = os.path.join(self.c.dir, "fleet-stats.json")

    def client(self):
        client = Client(self.c.client_endpoint, client_key=self.admin_key,
                        head_key=self.c.head_pub_file, timeout_s=20)
        self.addCleanup(client.close)
        return client

    def start_fleet(self):
        return self.c._spawn(
            [FLEET_BIN, "--head", self.c.worker_endpoint, "--key", self.c.worker_key,
             "--head-key", self.c.head_pub_file, "--workers", str(WORKERS), "--cpus", str(CPUS),
             "--step-ms", str(STEP_MS), "--heartbeat-ms", str(client_cluster.HEARTBEAT_MS),
             "--liveness", str(client_cluster.LIVENESS), "--max-backoff-ms", "500",
             "--report-s", "1", "--stats-file", self.stats_file], "fleet.log")

    def test_a_killed_head_loses_no_iteration_of_a_thousand_trials(self):
        head = self.c.start_head("--train-with-ack-ms", str(TRAIN_WITH_ACK_MS))
        fleet = self.start_fleet()
        client = self.client()
        self.assertTrue(wait_for(lambda: sum(w["alive"] for w in client.workers()) == WORKERS,
                                 60, 0.2), self.c.logs())
        exp = client.submit({
            "name": "fleet", "trainable": "sim",
            "param_space": {"x": {"uniform": [0, 1]}, "y": {"uniform": [0, 1]}},
            "num_samples": TRIALS, "metric": "score", "mode": "max",
            "stop": {"training_iteration": ITERATIONS},
            "resources": {"bundles": [{"CPU": 1}]},
            "checkpoint": {"frequency": 4}, "seed": 3})

        # Kill -9 once every trial runs and some have results.
        def midway():
            trials = client.trials(exp)
            running = sum(t["status"] == "RUNNING" for t in trials)
            done = sum(t.get("iteration") or 0 for t in trials)
            return running == TRIALS and done >= TRIALS * 2
        self.assertTrue(wait_for(midway, 120, 0.2), self.c.logs())
        self.assertFalse(client.experiment(exp)["finished"])
        os.kill(head.pid, signal.SIGKILL)
        head.wait(timeout=30)
        head = self.c.start_head("--train-with-ack-ms", str(TRAIN_WITH_ACK_MS), same_ports=True)
        client = self.client()
        final = client.wait(exp, poll_s=0.5, timeout_s=240)
        self.assertTrue(final["finished"], self.c.logs())

        trials = client.trials(exp)
        self.assertEqual(len(trials), TRIALS)
        statuses = collections.Counter(t["status"] for t in trials)
        self.assertEqual(statuses, {"TERMINATED": TRIALS}, self.c.logs())

        # Every result of every trial, from one export: iterations 1..N, once.
        export = os.path.join(self.c.dir, "export.jsonl")
        out = subprocess.run([CLI_BIN, "--head", self.c.client_endpoint, "--key", self.admin_key,
                              "--head-key", self.c.head_pub_file, "export", exp, "--format",
                              "jsonl", "-o", export], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        iterations = collections.defaultdict(list)
        with open(export) as f:
            for line in f:
                row = json.loads(line)
                iterations[row["trial_id"]].append(row["training_iteration"])
        self.assertEqual(len(iterations), TRIALS)
        for trial_id, its in iterations.items():
            self.assertEqual(sorted(its), list(range(1, ITERATIONS + 1)), trial_id)

        # The fleet's view: every worker registered with the new head (one
        # epoch change each), none was silent-reconnected more than once (the
        # kill), and nothing it received failed to decode.
        fleet.send_signal(signal.SIGTERM)
        self.assertEqual(fleet.wait(timeout=60), 0, self.c.logs())
        with open(self.stats_file) as f:
            stats = json.load(f)
        self.assertEqual(stats["epoch_changes"], WORKERS, stats)
        self.assertEqual(stats["undecodable"], 0, stats)
        # Every simulated worker saw the kill -9 cut its connection (its
        # socket closed, not heartbeats missed).
        self.assertGreaterEqual(stats["connection_cuts"], WORKERS, stats)
        self.assertLessEqual(stats["silence_reconnects"], WORKERS, stats)
        self.assertGreaterEqual(stats["results_acked"], TRIALS * ITERATIONS // 2, stats)
        # Most TRAINs came inside ACKs (those after a checkpoint's SAVE, and
        # the first of each actor, did not).
        self.assertGreaterEqual(stats["trains_in_acks"], TRIALS * ITERATIONS // 2, stats)

        # The store is whole.
        head.send_signal(signal.SIGTERM)
        head.wait(timeout=60)
        check = subprocess.run([HEAD_BIN, "--data-dir", self.c.data_dir, "--check"],
                               capture_output=True, text=True, timeout=120)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)


if __name__ == "__main__":
    unittest.main()
