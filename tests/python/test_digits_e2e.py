"""examples/digits: the scikit-learn digits trainable, alone and on a real cluster.

DigitsTrainableTest drives examples/digits/train_digits.py through
fake_worker.FakeWorker (no ztune processes): a checkpoint restored in a new
process continues with exactly the numbers of an uninterrupted run, a reset
starts the new trial exactly as a fresh process would, exports, config errors.

DigitsClusterTest runs a short version of examples/digits/spec.json (3 trials
x 3 epochs) on a real ztune-head and two ztune-workers started with the
committed examples/digits/trainables.json, and reads everything back with
ztune.client.

Both need numpy and scikit-learn (Debian: python3-numpy python3-sklearn,
installed by scripts/install-deps.sh); without them the tests are skipped.
"""

import copy
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import client_cluster
from client_cluster import LocalCluster, wait_for
from fake_worker import REPO_DIR, FakeWorker

EXAMPLE_DIR = os.path.join(REPO_DIR, "examples", "digits")
SCRIPT = os.path.join(EXAMPLE_DIR, "train_digits.py")
TRAINABLES = os.path.join(EXAMPLE_DIR, "trainables.json")
SPEC = os.path.join(EXAMPLE_DIR, "spec.json")
SPEC_PBT = os.path.join(EXAMPLE_DIR, "spec-pbt.json")

MISSING_ML = [m for m in ("numpy", "sklearn") if importlib.util.find_spec(m) is None]
SKIP_ML = ("needs %s (Debian: python3-numpy python3-sklearn; scripts/install-deps.sh)"
           % " and ".join(MISSING_ML))
MISSING_BIN = client_cluster.missing_binaries()
HAVE_ZMQ = importlib.util.find_spec("zmq") is not None  # ztune.client needs pyzmq

# After 3 epochs the short spec's trials reach 0.88-0.97 validation accuracy,
# any hidden/alpha/batch_size of the search space with lr >= 0.02 about 0.8
# (10 classes: chance is 0.1); the floor leaves a wide margin.
ACCURACY_FLOOR_3_EPOCHS = 0.6
CLIENT_TIMEOUT_S = 10.0
# Each trial process imports scikit-learn (seconds on a loaded machine).
EXPERIMENT_DEADLINE_S = 120.0


def steps(worker, first, last):
    """Results of iterations first..last (inclusive); asserts each step succeeded."""
    out = []
    for i in range(first, last + 1):
        reply = worker.step(i, timeout=60)
        assert reply.get("ok") is True, reply
        out.append(reply["result"])
    return out


@unittest.skipIf(MISSING_ML, SKIP_ML)
class DigitsTrainableTest(unittest.TestCase):
    CONFIG = {"lr": 0.05, "hidden": 24, "alpha": 1e-4, "batch_size": 32, "seed": 3}

    def worker(self):
        w = FakeWorker(SCRIPT, env={"PYTHONDONTWRITEBYTECODE": "1"})
        self.addCleanup(w.close)
        return w

    def test_restore_in_a_new_process_continues_exactly_and_reset_starts_afresh(self):
        # The processes start at once, so that their imports (seconds of
        # scikit-learn each) overlap. c has a smaller network.
        a, b, c = self.worker(), self.worker(), self.worker()
        for w in (a, b, c):
            self.assertEqual(w.hello(timeout=60).get("protocol"), 1)
        for w, config in ((a, self.CONFIG), (b, self.CONFIG), (c, dict(self.CONFIG, hidden=8))):
            w.send({"cmd": "setup", "config": config, "trial_id": w.trial_id, "attempt": 0,
                    "trial_dir": w.trial_dir})
        for w in (a, b, c):
            self.assertEqual(w.read_message(timeout=60), {"ok": True})

        first = steps(a, 1, 3)
        ckpt = tempfile.mkdtemp(prefix="ztune-digits-ckpt-")
        self.addCleanup(shutil.rmtree, ckpt, True)
        self.assertEqual(a.save(ckpt, timeout=60), {"ok": True})
        self.assertEqual(sorted(os.listdir(ckpt)), ["model.npz", "state.json"])
        rest = steps(a, 4, 6)   # the uninterrupted run (saving does not disturb it)

        # b first wanders off (one step of its own), then restores: every bit
        # of state must come from the checkpoint.
        steps(b, 1, 1)
        self.assertEqual(b.restore(ckpt, 3, timeout=60), {"ok": True})
        restored = steps(b, 4, 6)
        self.assertEqual(restored, rest)  # exact floats, not approximately

        for i, r in enumerate(first + rest, start=1):
            self.assertEqual(set(r), {"accuracy", "loss", "train_loss", "epoch"})
            self.assertEqual(r["epoch"], i)
            self.assertGreater(r["accuracy"], 0.1)
            self.assertGreater(r["loss"], 0.0)
        self.assertGreater(rest[-1]["accuracy"], ACCURACY_FLOOR_3_EPOCHS)
        self.assertLess(rest[-1]["loss"], first[0]["loss"])

        # Exports describe the current model.
        reply = a.export(["summary", "weights"], timeout=60)
        self.assertTrue(reply.get("ok"), reply)
        summary = reply["exports"]["summary"]
        self.assertEqual(summary["epoch"], 6)
        self.assertEqual(summary["accuracy"], rest[-1]["accuracy"])
        self.assertEqual(summary["parameters"], 64 * 24 + 24 + 24 * 10 + 10)
        weights = reply["exports"]["weights"]
        self.assertEqual((len(weights["W1"]), len(weights["W1"][0])), (64, 24))
        bad = a.export(["onnx"], timeout=60)
        self.assertIs(bad.get("ok"), False)
        self.assertIn("unsupported export format 'onnx'", bad["error"])

        # Actor reuse: after a reset to the same config, the new trial repeats
        # the first trial's numbers from epoch 1.
        trial_dir = os.path.join(os.path.dirname(a.trial_dir), "trial_0002")
        os.makedirs(trial_dir)
        self.assertEqual(a.reset(self.CONFIG, "trial_0002", trial_dir, timeout=60),
                         {"ok": True, "reset": True})
        self.assertEqual(steps(a, 1, 3), first)

        # A checkpoint of another network size is refused, naming both.
        reply = c.restore(ckpt, 3, timeout=60)
        self.assertIs(reply.get("ok"), False)
        self.assertIn("hidden=24, the config says hidden=8", reply["error"])

        for w in (a, b, c):
            self.assertEqual(w.stop(timeout=30), {"ok": True})
            self.assertEqual(w.wait(30), 0)
        self.assertIn("epoch 6: val accuracy", a.stdout())
        self.assertIn("restored epoch 3", b.stdout())

    def test_a_bad_config_fails_setup_naming_the_key(self):
        # (setup comes once per process, so one process per bad config)
        cases = [({"lr": -1}, "config key 'lr' must be in (0, inf), got -1"),
                 ({"hidden": 2.5}, "config key 'hidden' must be an integer, got 2.5")]
        workers = [self.worker() for _ in cases]
        for w, (config, message) in zip(workers, cases):
            w.hello(timeout=60)
            reply = w.setup(config, timeout=60)
            self.assertIs(reply.get("ok"), False)
            self.assertIn(message, reply["error"])


class _DigitsCluster(LocalCluster):
    """client_cluster.LocalCluster whose workers also get --trainables FILE."""

    def start_worker_with_trainables(self, name, cpus, trainables):
        args = [client_cluster.WORKER_BIN, "--head", self.worker_endpoint, "--cpus", str(cpus),
                "--name", name, "--work-dir", self.work_dir(name),
                "--heartbeat-ms", str(client_cluster.HEARTBEAT_MS),
                "--liveness", str(client_cluster.LIVENESS), "--max-backoff-ms", "500",
                "--log-level", "debug", "--trainables", trainables,
                "--key", self.worker_key, "--head-key", self.head_pub_file]
        return self._spawn(args, f"worker-{name}.log")

    def work_dir(self, name):
        return os.path.join(self.dir, "work-" + name)


@unittest.skipIf(MISSING_ML, SKIP_ML)
@unittest.skipIf(MISSING_BIN, f"ztune binaries not built: {MISSING_BIN}")
@unittest.skipUnless(HAVE_ZMQ, "ztune.client needs pyzmq (Debian: python3-zmq)")
class DigitsClusterTest(unittest.TestCase):
    WORKERS = ("w1", "w2")

    @classmethod
    def setUpClass(cls):
        from ztune.client import Client  # needs pyzmq; imported only when the test runs
        cls.cluster = c = _DigitsCluster(cls.addClassCleanup, "digits")
        admin_key = c.add_client("admin", "admin")
        c.start_head()
        for name in cls.WORKERS:
            # The committed file as is: its relative cwd and PYTHONPATH are
            # resolved against examples/digits/.
            c.start_worker_with_trainables(name, 1, TRAINABLES)
        cls.admin_key = admin_key
        cls.client = Client(c.client_endpoint, client_key=admin_key, head_key=c.head_pub_file,
                            timeout_s=CLIENT_TIMEOUT_S)
        cls.addClassCleanup(cls.client.close)

        def registered():
            return sum(w["alive"] for w in cls.client.workers()) == len(cls.WORKERS)
        if not wait_for(registered, client_cluster.START_DEADLINE_S):
            raise RuntimeError("the workers did not register:\n" + c.logs())

    def short_spec(self):
        """examples/digits/spec.json, cut down: 3 trials x 3 epochs with sane learning rates."""
        with open(SPEC) as f:
            spec = json.load(f)
        self.assertEqual(spec["trainable"], "digits")
        self.assertEqual((spec["metric"], spec["mode"]), ("accuracy", "max"))
        short = copy.deepcopy(spec)
        short["param_space"]["lr"] = {"grid_search": [0.02, 0.05, 0.1]}
        short.update(num_samples=1, stop={"training_iteration": 3})
        short["checkpoint"]["frequency"] = 2
        return short

    def test_a_short_experiment_runs_on_the_workers(self):
        spec = self.short_spec()
        exp = self.client.submit(spec, name="digits-e2e")
        final = self.client.wait(exp, poll_s=0.1, timeout_s=EXPERIMENT_DEADLINE_S)
        logs = self.cluster.logs
        self.assertEqual(final["status"], "TERMINATED", logs())
        self.assertEqual(final["trial_counts"]["TERMINATED"], 3, logs())
        self.assertEqual(final["trial_counts"]["ERROR"], 0, logs())

        trials = self.client.trials(exp)
        self.assertEqual(sorted(t["config"]["lr"] for t in trials), [0.02, 0.05, 0.1])
        for t in trials:
            tid = t["trial_id"]
            self.assertEqual((t["status"], t["iteration"], t["error"]), ("TERMINATED", 3, None),
                             logs())
            results = self.client.results(tid)
            self.assertEqual([r["training_iteration"] for r in results], [1, 2, 3])
            self.assertEqual([r["epoch"] for r in results], [1, 2, 3])
            last = results[-1]
            self.assertGreater(last["accuracy"], ACCURACY_FLOOR_3_EPOCHS, (tid, t["config"]))
            self.assertEqual(t["last_result"]["accuracy"], last["accuracy"])
            # checkpoint.frequency 2 and at_end: iterations 2 and 3, both kept.
            self.assertEqual(sorted(ck["iteration"] for ck in t["checkpoints"]), [2, 3],
                             t["checkpoints"])
            self.assertEqual(t["exports"]["summary"]["epoch"], 3)
            self.assertEqual(t["exports"]["summary"]["accuracy"], last["accuracy"])

            # The trial's output is in <work-dir>/<trial_id>/stdout on the
            # worker that ran it (and only there).
            found = [os.path.join(self.cluster.work_dir(w), tid, "stdout") for w in self.WORKERS
                     if os.path.exists(os.path.join(self.cluster.work_dir(w), tid, "stdout"))]
            self.assertEqual(len(found), 1, (tid, found))
            self.assertTrue(os.path.exists(os.path.join(os.path.dirname(found[0]), "stderr")))
            last_line = "epoch 3: val accuracy %.4f" % last["accuracy"]

            def output():
                with open(found[0]) as f:
                    return f.read()
            # A worker thread copies the child's stdout pipe into the file,
            # independently of the replies: wait for the last line rather
            # than read once.
            self.assertTrue(wait_for(lambda: last_line in output(), 10), output())
            out = output()
            self.assertIn("==== ztune: trial %s attempt 1 on worker" % tid, out)
            self.assertIn("trial %s: %d hidden units" % (tid, t["config"]["hidden"]), out)
            # The same bytes through the head (ztune logs), read from that worker.
            self.assertEqual(self.client.logs(tid).decode(), out)
            self.assertIn("==== ztune: trial %s attempt 1" % tid,
                          self.client.logs(tid, stream="stderr", attempt=1).decode())

        best = self.client.best_trial(exp)
        accuracies = {t["trial_id"]: t["last_result"]["accuracy"] for t in trials}
        self.assertEqual(best["metric"], "accuracy")
        self.assertEqual(best["value"], max(accuracies.values()))
        self.assertEqual(accuracies[best["trial_id"]], best["value"])
        self.assertEqual(best["iteration"], 3)

    def cli(self, *args):
        """Runs the ztune CLI as the admin client; (exit code, stdout + stderr)."""
        c = self.cluster
        out = subprocess.run([client_cluster.CLI_BIN, "--head", c.client_endpoint,
                              "--key", self.admin_key, "--head-key", c.head_pub_file, *args],
                             capture_output=True, text=True, timeout=60)
        return out.returncode, out.stdout + out.stderr

    def run_to_end(self, spec, name):
        exp = self.client.submit(spec, name=name)
        final = self.client.wait(exp, poll_s=0.1, timeout_s=EXPERIMENT_DEADLINE_S)
        self.assertEqual(final["status"], "TERMINATED", self.cluster.logs())
        self.assertEqual(final["trial_counts"]["ERROR"], 0, self.cluster.logs())
        return exp

    def test_ztune_checkpoint_writes_the_directory_the_trainable_saved(self):
        spec = self.short_spec()
        spec["param_space"]["lr"] = 0.05
        exp = self.run_to_end(spec, "digits-checkpoint")
        (trial,) = self.client.trials(exp)
        tid = trial["trial_id"]
        out_dir = tempfile.mkdtemp(prefix="ztune-digits-ckpt-")
        self.addCleanup(shutil.rmtree, out_dir, True)

        # The newest kept checkpoint (iteration 3), as the trainable saved it:
        # state.json and model.npz, which the trainable loads outside ztune.
        newest = os.path.join(out_dir, "newest")
        code, out = self.cli("checkpoint", tid, "-o", newest)
        self.assertEqual(code, 0, out)
        self.assertIn("at iteration 3", out)
        self.assertEqual(sorted(os.listdir(newest)), ["model.npz", "state.json"])
        with open(os.path.join(newest, "state.json")) as f:
            state = json.load(f)
        self.assertEqual(state["epoch"], 3)
        self.assertEqual(state["last"]["accuracy"], trial["last_result"]["accuracy"])
        import numpy as np
        with np.load(os.path.join(newest, "model.npz"), allow_pickle=False) as z:
            self.assertEqual(z["W1"].shape, (64, trial["config"]["hidden"]))
            self.assertEqual(z["W2"].shape, (trial["config"]["hidden"], 10))

        # --iteration picks an older kept one.
        older = os.path.join(out_dir, "older")
        code, out = self.cli("checkpoint", tid, "--iteration", "2", "-o", older, "--json")
        self.assertEqual(code, 0, out)
        doc = json.loads(out)
        self.assertEqual((doc["iteration"], doc["kind"], doc["trainable"]),
                         (2, "directory", "digits"))
        with open(os.path.join(older, "state.json")) as f:
            self.assertEqual(json.load(f)["epoch"], 2)

        # Refusals: an iteration not kept (exit 1, listing what is), and a
        # directory that is not empty (exit 2): nothing is overwritten.
        code, out = self.cli("checkpoint", tid, "--iteration", "1", "-o",
                             os.path.join(out_dir, "none"))
        self.assertEqual(code, 1, out)
        self.assertIn("2, 3", out)
        self.assertFalse(os.path.exists(os.path.join(out_dir, "none")))
        def state_text():
            with open(os.path.join(newest, "state.json")) as f:
                return f.read()
        before = state_text()
        code, out = self.cli("checkpoint", tid, "-o", newest)
        self.assertEqual(code, 2, out)
        self.assertEqual(state_text(), before)

    def test_pbt_clones_a_donors_weights_and_epoch(self):
        """examples/digits/spec-pbt.json, cut down: 4 trials x 6 epochs, PBT every 2."""
        with open(SPEC_PBT) as f:
            spec = json.load(f)
        self.assertEqual(spec["scheduler"]["type"], "pbt")
        # Synchronous: every trial stops at each perturbation point (2 and 4)
        # with a stored checkpoint until all four are there, so that the
        # bottom quarter (the slowest learner) clones the top one every time.
        # (Asynchronous PBT clones only when a donor reached the point before
        # the bottom trial did: on two slots, a matter of timing.)
        spec["param_space"]["lr"] = {"grid_search": [0.1, 0.0005, 0.05, 0.002]}
        spec["param_space"]["hidden"] = 16
        spec.update(num_samples=1, stop={"training_iteration": 6})
        spec["scheduler"].update(perturbation_interval=2, synch=True)
        exp = self.run_to_end(spec, "digits-pbt")
        trials = self.client.trials(exp)
        self.assertEqual(len(trials), 4)
        clones = [t for t in trials if t.get("exploits")]
        self.assertTrue(clones, [(t["config"]["lr"], t["last_result"]) for t in trials])
        slowest = min(trials, key=lambda t: t["exploits"][0]["old_config"]["lr"]
                      if t.get("exploits") else t["config"]["lr"])
        # One clone per sync point (the bottom quarter of four is one trial),
        # the first by the slowest learner.
        self.assertEqual(slowest["exploits"][0]["donor_iteration"], 2, slowest)
        self.assertEqual(sorted(x["donor_iteration"] for t in trials for x in t.get("exploits", [])),
                         [2, 4], clones)
        for t in trials:
            tid = t["trial_id"]
            results = self.client.results(tid)
            # Every iteration once, also across a clone (the donor's history up
            # to the clone point, then the trial's own).
            self.assertEqual([r["training_iteration"] for r in results], list(range(1, 7)), tid)
            self.assertEqual(t["status"], "TERMINATED")
            if t.get("exploits"):
                # The donor's checkpoint was restored: its epoch counter (the
                # trainable's own state) goes on from the donor's iteration.
                # (A later clone rewrites what an earlier one left: the last.)
                x = t["exploits"][-1]
                after = results[x["donor_iteration"]]
                self.assertEqual(after["training_iteration"], x["donor_iteration"] + 1)
                self.assertEqual(after["epoch"], x["donor_iteration"] + 1, (tid, x))
                self.assertEqual(x["new_config"]["hidden"], 16)
                self.assertNotEqual(x["donor"], tid)


if __name__ == "__main__":
    unittest.main()
