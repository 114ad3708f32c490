"""The class API (ztune.Trainable) under the command loop, and the trainable
scripts in tests/python/trainables/ that the C++ end-to-end tests run."""

import os
import sys
import textwrap
import unittest

from fake_worker import FakeWorkerTestCase, trainable_path

PROBE = textwrap.dedent('''
    import json, os
    import ztune

    class Probe(ztune.Trainable):
        """Reports what the SDK lets user code see."""

        def setup(self, config):
            if config.get("fail_setup"):
                raise RuntimeError("setup refused: %s" % config["fail_setup"])
            self.events = ["setup"]

        def step(self):
            return {
                "config": self.config, "trial_id": self.trial_id,
                "trial_dir": self.trial_dir, "attempt": self.attempt,
                "iteration": self.iteration,
                "env_trial_id": os.environ.get("ZTUNE_TRIAL_ID"),
                "env_trial_dir": os.environ.get("ZTUNE_TRIAL_DIR"),
                "get_trial_id": ztune.get_trial_id(),
                "get_trial_dir": ztune.get_trial_dir(),
            }

        def save_checkpoint(self, checkpoint_dir):
            with open(os.path.join(checkpoint_dir, "iteration"), "w") as f:
                f.write(str(self.iteration))
            if self.config.get("save_returns") == "dict":
                return {"state": 1}
            if self.config.get("save_returns") == "path":
                return os.path.join(checkpoint_dir, "iteration")
            return None

        def load_checkpoint(self, checkpoint_dir):
            if self.config.get("fail_restore"):
                raise IOError("cannot read %s" % checkpoint_dir)

        def reset_config(self, new_config):
            # The new identity is visible, the old config still in place.
            print("reset_config to %s in %s; old config %s" % (
                self.trial_id, self.trial_dir, json.dumps(self.config)))
            if new_config.get("reset") == "raise":
                raise ValueError("cannot reset to %s" % new_config)
            return bool(new_config.get("reset", True))

        def cleanup(self):
            print("cleanup in trial", self.trial_id)

    class Bare(ztune.Trainable):
        """Overrides nothing."""

    if __name__ == "__main__":
        import sys
        ztune.run(Bare if sys.argv[1:] == ["bare"] else Probe)
''')


class ScriptsTest(FakeWorkerTestCase):
    scripts = {"probe": PROBE}


class ClassApiTest(ScriptsTest):
    def test_attributes_and_environment(self):
        w = self.worker(self.probe, trial_id="t_attr")
        w.hello()
        self.assertEqual(w.setup({"a": 1}, attempt=2), {"ok": True})
        result = w.step(1)["result"]
        self.assertEqual(result, {
            "config": {"a": 1}, "trial_id": "t_attr", "trial_dir": w.trial_dir,
            "attempt": 2, "iteration": 0, "env_trial_id": "t_attr",
            "env_trial_dir": w.trial_dir, "get_trial_id": "t_attr",
            "get_trial_dir": w.trial_dir})
        self.assertEqual(w.step(2)["result"]["iteration"], 1)

    def test_a_null_config_is_an_empty_dict(self):
        w = self.worker(self.probe)
        w.hello()
        reply = w.request({"cmd": "setup", "config": None, "trial_id": w.trial_id,
                           "attempt": 0, "trial_dir": w.trial_dir})
        self.assertEqual(reply, {"ok": True})
        self.assertEqual(w.step(1)["result"]["config"], {})

    def test_reset_true_moves_to_the_new_trial(self):
        w = self.worker(self.probe, trial_id="t_old")
        w.start({"old": True})
        w.step(1)
        new_dir = self.tempdir()
        self.assertEqual(w.reset({"new": True}, "t_new", new_dir, attempt=1),
                         {"ok": True, "reset": True})
        self.assertIn('reset_config to t_new in %s; old config {"old": true}' % new_dir,
                      w.stdout())
        self.assertEqual(w.step(1)["result"], {
            "config": {"new": True}, "trial_id": "t_new", "trial_dir": new_dir,
            "attempt": 1, "iteration": 0, "env_trial_id": "t_new",
            "env_trial_dir": new_dir, "get_trial_id": "t_new", "get_trial_dir": new_dir})
        w.stop()
        self.assertIn("cleanup in trial t_new", w.stdout())

    def test_reset_false_or_failing_leaves_the_actor_unchanged(self):
        w = self.worker(self.probe, trial_id="t_keep")
        w.start({"keep": 1})
        before = w.step(1)["result"]
        self.assertEqual(w.reset({"reset": False}, "t_other", self.tempdir()),
                         {"ok": True, "reset": False})
        after = w.step(2)["result"]
        self.assertEqual(after, dict(before, iteration=1))
        reply = w.reset({"reset": "raise"}, "t_other", self.tempdir())
        self.assertFalse(reply["ok"])
        self.assertTrue(reply["error"].startswith("ValueError: cannot reset to"), reply)
        self.assertEqual(w.step(3)["result"], dict(before, iteration=2))

    def test_a_trainable_that_overrides_nothing(self):
        # reset is refused; step, save and export are errors that name the
        # method, without a traceback of SDK frames.
        bare = self.worker(self.probe, argv=[sys.executable, self.probe, "bare"])
        bare.start()
        self.assertEqual(bare.reset({}, "t2", self.tempdir()), {"ok": True, "reset": False})
        self.assertEqual(bare.step(1), {
            "ok": False, "error": "NotImplementedError: Bare must implement step(self) -> dict"})
        self.assertEqual(bare.export(["onnx"]), {
            "ok": False, "error": "NotImplementedError: Bare does not implement "
            "export_model(self, formats); cannot export 'onnx'"})
        self.assertIn("does not implement save_checkpoint", bare.save(self.tempdir())["error"])
        self.assertEqual(bare.stop(), {"ok": True})
        self.assertEqual(bare.wait(), 0)

    def test_a_failed_setup_ends_the_actor_without_cleanup(self):
        w = self.worker(self.probe)
        w.hello()
        reply = w.setup({"fail_setup": "lr"})
        self.assertFalse(reply["ok"])
        first_line, _, traceback = reply["error"].partition("\n")
        self.assertEqual(first_line, "RuntimeError: setup refused: lr")
        self.assertIn("Traceback (most recent call last):", traceback)
        self.assertIn("probe.py", traceback)
        self.assertNotIn("runner.py", traceback, "SDK frames are left out")
        self.assertEqual(w.stop(), {"ok": True})
        self.assertEqual(w.wait(), 0)
        self.assertNotIn("cleanup", w.stdout())
        self.assertIn("setup failed: RuntimeError: setup refused: lr", w.stderr())

    def test_save_return_values(self):
        for returns, ok in (("none", True), ("path", True), ("dict", False)):
            with self.subTest(returns=returns):
                w = self.worker(self.probe)
                w.start({"save_returns": returns})
                reply = w.save(self.tempdir())
                self.assertEqual(reply["ok"], ok, reply)
                if not ok:
                    self.assertEqual(reply["error"], "save_checkpoint() returned a dict; "
                                     "write the state as files into checkpoint_dir and "
                                     "return None")

    def test_save_sees_the_completed_iterations_and_restore_sets_them(self):
        w = self.worker(self.probe)
        w.start()
        w.step(1)
        w.step(2)
        d = self.tempdir()
        self.assertEqual(w.save(d), {"ok": True})
        with open(os.path.join(d, "iteration")) as f:
            self.assertEqual(f.read(), "2")
        self.assertEqual(w.restore(d, 7), {"ok": True})
        self.assertEqual(w.step(8)["result"]["iteration"], 7)

    def test_a_failed_restore_is_an_error_reply(self):
        w = self.worker(self.probe)
        w.start({"fail_restore": True})
        d = self.tempdir()
        reply = w.restore(d, 3)
        self.assertTrue(reply["error"].startswith("OSError: cannot read %s" % d), reply)
        self.assertEqual(w.step(1)["result"]["iteration"], 0)


class CounterClassTest(ScriptsTest):
    script = trainable_path("counter_class.py")

    def test_steps_print_and_export(self):
        w = self.worker(self.script, trial_id="t_counter")
        w.start({"start": 10, "increment": 5})
        self.assertEqual(w.step(1), {"ok": True, "result": {"value": 15, "score": 15}})
        self.assertEqual(w.step(2), {"ok": True, "result": {"value": 20, "score": 20}})
        self.assertEqual(w.stdout(), "step 1 of trial t_counter\nstep 2 of trial t_counter\n")
        self.assertEqual(w.stderr(), "stderr line 1\nstderr line 2\n")
        self.assertEqual(w.export(["json"]), {"ok": True, "exports": {"json": {"value": 20}}})
        reply = w.export(["json", "onnx"])
        self.assertTrue(reply["error"].startswith(
            "ValueError: unsupported export format 'onnx'"), reply)
        self.assertEqual(w.stop(), {"ok": True})
        self.assertEqual(w.wait(), 0)

    def test_a_bad_config_fails_setup_naming_the_key(self):
        w = self.worker(self.script)
        w.hello()
        reply = w.setup({"increment": "x"})
        self.assertTrue(reply["error"].startswith(
            "ValueError: config key 'increment' must be a number, got str"), reply)

    def test_save_then_restore_in_a_new_process_continues_exactly(self):
        config = {"start": 0.1, "increment": 0.1}   # floats: checks exactness
        uninterrupted = self.worker(self.script)
        uninterrupted.start(config)
        expected = [uninterrupted.step(i)["result"]["value"] for i in range(1, 7)]

        first = self.worker(self.script)
        first.start(config)
        for i in range(1, 4):
            self.assertEqual(first.step(i)["result"]["value"], expected[i - 1])
        checkpoint = self.tempdir()
        self.assertEqual(first.save(checkpoint), {"ok": True})
        self.assertEqual(os.listdir(checkpoint), ["state.json"])
        first.stop()
        self.assertEqual(first.wait(), 0)

        second = self.worker(self.script, trial_id="trial_0001")
        second.start(config)
        self.assertEqual(second.restore(checkpoint, 3), {"ok": True})
        resumed = [second.step(i)["result"]["value"] for i in range(4, 7)]
        self.assertEqual(resumed, expected[3:])
        self.assertEqual(second.stdout(), "".join(
            "step %d of trial trial_0001\n" % i for i in range(4, 7)))

    def test_reset_adopts_the_new_config(self):
        w = self.worker(self.script, trial_id="t_a")
        w.start({"start": 100})
        w.step(1)
        w.step(2)
        new_dir = self.tempdir()
        self.assertEqual(w.reset({"start": 7, "increment": 2}, "t_b", new_dir),
                         {"ok": True, "reset": True})
        self.assertEqual(w.step(1)["result"], {"value": 9, "score": 9})
        self.assertTrue(w.stdout().endswith("step 1 of trial t_b\n"), w.stdout())


class MisbehaveTest(ScriptsTest):
    script = trainable_path("misbehave.py")

    def test_raise_is_an_error_reply_and_the_process_lives_on(self):
        w = self.worker(self.script)
        w.start({"mode": "raise", "at_step": 2})
        self.assertEqual(w.step(1), {"ok": True, "result": {"x": 1}})
        reply = w.step(2)
        self.assertFalse(reply["ok"])
        first_line, _, traceback = reply["error"].partition("\n")
        self.assertEqual(first_line, "ValueError: bad step")
        self.assertIn("misbehave.py", traceback)
        self.assertIn("in step", traceback)
        self.assertIn('raise ValueError("bad step")', traceback)
        self.assertEqual(w.step(3), {"ok": True, "result": {"x": 3}})
        self.assertIn("ValueError: bad step", w.stderr())

    def test_exit3(self):
        w = self.worker(self.script)
        w.start({"mode": "exit3"})
        w.send({"cmd": "step", "iteration": 1})
        self.assertEqual(w.wait(), 3)
        self.assertIsNone(w.read_line())
        self.assertIn("about to exit 3", w.stderr())

    def test_segfault(self):
        w = self.worker(self.script)
        w.start({"mode": "segfault"})
        w.send({"cmd": "step", "iteration": 1})
        self.assertEqual(w.wait(), -11)

    def test_spawn_child_leaves_a_process_in_the_group(self):
        w = self.worker(self.script)
        w.start({"mode": "spawn_child"})
        self.assertEqual(w.step(1), {"ok": True, "result": {"x": 1}})
        self.assertEqual(w.stop(), {"ok": True})
        self.assertEqual(w.wait(), 0)
        self.assertTrue(w.group_alive(), "the sleep child should still be in the group")
        w.kill_group()

    def test_hang_answers_nothing(self):
        w = self.worker(self.script)
        w.start({"mode": "hang"})
        w.send({"cmd": "step", "iteration": 1})
        with self.assertRaises(AssertionError):
            w.read_line(timeout=0.3)


class GpuReportTest(ScriptsTest):
    def test_reports_cuda_visible_devices_and_done(self):
        for devices in ("", "0,1"):
            with self.subTest(devices=devices):
                w = self.worker(trainable_path("gpu_report.py"),
                                env={"CUDA_VISIBLE_DEVICES": devices})
                w.start({"steps": 2})
                self.assertEqual(w.step(1)["result"], {"cuda_visible_devices": devices})
                self.assertEqual(w.step(2)["result"],
                                 {"cuda_visible_devices": devices, "done": True})


if __name__ == "__main__":
    unittest.main()
