"""Ask/tell against a real ztune-head and ztune-worker on loopback: an
experiment with search_alg external, add_trial that waits on the head for a
trial slot, wait_trials, and ztune.optuna_search driving Optuna's TPE (seeded
runs suggest the same configs; trials the experiment's scheduler stopped are
told as PRUNED; Optuna's own pruner stops trials on the head; a restarted
searcher adopts the trials already there).
"""

import time
import unittest

import client_cluster
from client_cluster import LocalCluster, wait_for

from ztune.client import Client, ZtuneError

try:
    import optuna
    from ztune.optuna_search import OptunaSearch, config_of, distributions_of
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    OPTUNA = None
except ImportError as e:  # python3-optuna is in scripts/install-deps.sh
    OPTUNA = str(e)

MISSING = client_cluster.missing_binaries()
TIMEOUT_S = 10.0


def external_spec(num_samples, max_concurrent, iterations, seed=7, **extra):
    spec = {"name": "py-ask-tell", "trainable": "quadratic",
            "param_space": {"lr": {"loguniform": [0.001, 0.9]}, "x0": 10},
            "num_samples": num_samples, "metric": "loss", "mode": "min",
            "stop": {"training_iteration": iterations}, "seed": seed,
            "search_alg": {"type": "external", "max_concurrent": max_concurrent}}
    spec.update(extra)
    return spec


def closed_form_loss(lr, i, x0=10.0):
    return (x0 * (1 - 2 * lr) ** i) ** 2


@unittest.skipIf(MISSING, f"ztune binaries not built: {MISSING}")
class AskTellTest(unittest.TestCase):
    """One head (--insecure) with one 2-CPU worker, shared by the tests."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = c = LocalCluster(cls.addClassCleanup, "asktell", insecure=True)
        c.start_head()
        c.start_worker("w0", 2)
        cls.client = Client(c.client_endpoint, insecure=True, timeout_s=TIMEOUT_S)
        cls.addClassCleanup(cls.client.close)
        if not wait_for(lambda: any(w["alive"] for w in cls.client.workers()),
                        client_cluster.START_DEADLINE_S):
            raise RuntimeError("the worker did not register:\n" + c.logs())

    def test_add_trial_waits_for_a_slot_and_wait_trials_for_a_finished_trial(self):
        c = self.client
        exp = c.submit(external_spec(3, 1, 5, param_space={"lr": 0.1, "x0": 10, "step_sleep_s": 0.1}))
        self.assertEqual(c.trials(exp), [])  # the head suggests nothing itself
        config = {"lr": 0.1, "x0": 10, "step_sleep_s": 0.1}
        first = c.add_trial(exp, config)
        # One live of max_concurrent 1: no slot within 0.2 s, nothing added.
        with self.assertRaises(ZtuneError) as refused:
            c.add_trial(exp, config, wait_s=0.2)
        self.assertEqual(refused.exception.code, "Unavailable")
        self.assertEqual(len(c.trials(exp)), 1)
        # Answered only once the first trial has finished and freed its slot.
        second = c.add_trial(exp, config, wait_s=30)
        self.assertEqual(c.trial(first)["status"], "TERMINATED")
        # wait_trials answers when one of them has finished, with its final result.
        start = time.monotonic()
        reply = c.wait_trials([second], wait_s=0.05)
        self.assertEqual(reply["unfinished"], [second])
        # The head times waits on a millisecond clock: a wait that starts just
        # before a tick ends up to 1 ms short of wait_s (measured: 49.97 ms).
        self.assertGreaterEqual(time.monotonic() - start, 0.05 - 0.001)
        reply = c.wait_trials([first, second], wait_s=30)
        self.assertEqual(reply["finished"][0]["trial_id"], first)
        self.assertEqual(reply["finished"][0]["last_result"]["training_iteration"], 5)
        reply = c.wait_trials([second], wait_s=30)
        self.assertEqual([t["trial_id"] for t in reply["finished"]], [second])
        third = c.add_trial(exp, config, wait_s=30)
        with self.assertRaises(ZtuneError) as over:
            c.add_trial(exp, config)
        self.assertEqual(over.exception.code, "FailedPrecondition")
        self.assertIn("num_samples", over.exception.message)
        final = c.wait(exp, poll_s=0.1, timeout_s=60)
        self.assertEqual(final["trial_counts"]["TERMINATED"], 3)
        self.assertEqual([t["trial_id"] for t in c.trials(exp)], [first, second, third])

    @unittest.skipIf(OPTUNA, f"optuna: {OPTUNA}")
    def test_seeded_tpe_runs_suggest_the_same_configs_and_tell_what_ran(self):
        c = self.client
        runs = []
        for _ in range(2):
            exp = c.submit(external_spec(12, 1, 3))
            told = []
            study = OptunaSearch(c, exp, on_tell=lambda tid, ft: told.append((tid, ft))).run()
            trials = c.trials(exp)
            self.assertEqual(len(trials), 12)
            self.assertEqual(len(told), 12)
            for (tid, frozen), doc in zip(told, trials):
                self.assertEqual(tid, doc["trial_id"])
                self.assertEqual(frozen.state, optuna.trial.TrialState.COMPLETE)
                self.assertEqual(doc["config"], {"lr": frozen.params["lr"], "x0": 10})
                self.assertAlmostEqual(frozen.value, closed_form_loss(frozen.params["lr"], 3),
                                       delta=1e-9 * max(1.0, frozen.value))
                self.assertEqual(frozen.user_attrs["ztune_trial_id"], tid)
            self.assertTrue(c.experiment(exp)["finished"])
            runs.append([t["config"] for t in trials])
            best = study.best_trial
            self.assertEqual(best.value, min(ft.value for _, ft in told))
        self.assertEqual(runs[0], runs[1])

    @unittest.skipIf(OPTUNA, f"optuna: {OPTUNA}")
    def test_trials_the_scheduler_stopped_are_told_as_pruned(self):
        c = self.client
        exp = c.submit(external_spec(
            8, 1, 8, seed=3,
            scheduler={"type": "asha", "max_t": 8, "grace_period": 1, "reduction_factor": 2}))
        study = OptunaSearch(c, exp).run()
        by_id = {t.user_attrs["ztune_trial_id"]: t for t in study.trials}
        pruned = 0
        for doc in c.trials(exp):
            frozen = by_id[doc["trial_id"]]
            if doc["iteration"] < 8:
                pruned += 1
                self.assertEqual(frozen.state, optuna.trial.TrialState.PRUNED, doc["trial_id"])
                # Its last metric, at its last iteration: what TPE learns from.
                self.assertEqual(frozen.intermediate_values[doc["iteration"]],
                                 doc["last_result"]["loss"])
            else:
                self.assertEqual(frozen.state, optuna.trial.TrialState.COMPLETE, doc["trial_id"])
        self.assertGreaterEqual(pruned, 1)  # the seed's lrs: ASHA stops some

    @unittest.skipIf(OPTUNA, f"optuna: {OPTUNA}")
    def test_optunas_pruner_stops_trials_on_the_head(self):
        c = self.client
        exp = c.submit(external_spec(
            5, 1, 30, seed=5,
            param_space={"lr": {"loguniform": [0.001, 0.9]}, "x0": 10, "step_sleep_s": 0.1}))
        pruner = optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
        study = OptunaSearch(c, exp, pruner=pruner, poll_s=0.1).run()
        by_id = {t.user_attrs["ztune_trial_id"]: t for t in study.trials}
        pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
        self.assertGreaterEqual(len(pruned), 1)
        for doc in c.trials(exp):
            frozen = by_id[doc["trial_id"]]
            self.assertEqual(doc["status"], "TERMINATED")
            if frozen.state == optuna.trial.TrialState.PRUNED:
                self.assertLess(doc["iteration"], 30, doc["trial_id"])  # stopped on the head
            else:
                self.assertEqual(doc["iteration"], 30, doc["trial_id"])

    @unittest.skipIf(OPTUNA, f"optuna: {OPTUNA}")
    def test_a_restarted_searcher_adopts_the_trials_already_added(self):
        c = self.client
        exp = c.submit(external_spec(4, 2, 2))
        done = c.add_trial(exp, {"lr": 0.3, "x0": 10})
        c.wait_trials([done], wait_s=30)
        running = c.add_trial(exp, {"lr": 0.2, "x0": 10})
        study = OptunaSearch(c, exp).run()
        self.assertEqual(len(c.trials(exp)), 4)  # two more, not four
        ids = [t.user_attrs["ztune_trial_id"] for t in study.trials]
        self.assertEqual(sorted(ids), sorted(t["trial_id"] for t in c.trials(exp)))
        adopted = {t.user_attrs["ztune_trial_id"]: t for t in study.trials}
        self.assertEqual(adopted[done].params, {"lr": 0.3})
        self.assertAlmostEqual(adopted[running].value, closed_form_loss(0.2, 2), places=9)

    def test_a_basic_variant_experiment_is_refused_by_the_searcher(self):
        if OPTUNA:
            self.skipTest(f"optuna: {OPTUNA}")
        spec = external_spec(1, 1, 1)
        del spec["search_alg"]
        exp = self.client.submit(spec)
        with self.assertRaisesRegex(ValueError, "search_alg"):
            OptunaSearch(self.client, exp)


@unittest.skipIf(OPTUNA, f"optuna: {OPTUNA}")
class SpaceConversionTest(unittest.TestCase):
    def test_samplers_become_distributions_and_params_become_configs(self):
        space = {"lr": {"loguniform": [1e-4, 1e-1]}, "m": {"uniform": [0, 1]},
                 "q": {"quniform": [0, 10, 2.5]}, "n": {"randint": [2, 5]},
                 "act": {"choice": ["relu", "tanh"]}, "arch": {"grid_search": [[1, 2], [3]]},
                 "opt": {"beta": {"uniform": [0.5, 0.9]}, "name": "adam"}, "seed": 3}
        d = distributions_of(space)
        self.assertEqual(sorted(d), ["act", "arch", "lr", "m", "n", "opt/beta", "q"])
        self.assertTrue(d["lr"].log)
        self.assertEqual((d["n"].low, d["n"].high), (2, 4))  # randint is [low, high)
        self.assertEqual(d["arch"].choices, (0, 1))  # lists: by index
        config = config_of(space, {"lr": 0.01, "m": 0.5, "q": 3.9, "n": 4, "act": "tanh",
                                   "arch": 1, "opt/beta": 0.7})
        self.assertEqual(config, {"lr": 0.01, "m": 0.5, "q": 5.0, "n": 4, "act": "tanh",
                                  "arch": [3], "opt": {"beta": 0.7, "name": "adam"}, "seed": 3})

    def test_normal_has_no_optuna_distribution(self):
        with self.assertRaisesRegex(ValueError, "param_space.w: normal"):
            distributions_of({"w": {"normal": [0, 1]}})


if __name__ == "__main__":
    unittest.main()
