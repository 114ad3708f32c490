"""The function API (ztune.report / ztune.get_checkpoint) under the command
loop, and tests/python/trainables/counter_function.py."""

import os
import textwrap
import unittest

from fake_worker import FakeWorkerTestCase, trainable_path

# One script, many behaviours chosen by config["mode"]. Markers written into
# the trial directory show when the function started and ended.
PROBE = textwrap.dedent('''
    import os, sys
    import ztune

    def mark(name):
        with open(os.path.join(ztune.get_trial_dir(), name), "a") as f:
            f.write("%s\\n" % ztune.get_trial_id())

    def train(config):
        mode = config.get("mode", "")
        mark("started")
        try:
            if mode == "return_none":
                return None
            if mode == "return_dict":
                ztune.report({"loss": 2.0})
                return {"loss": 1.0, "final": True}
            if mode == "return_list":
                return [1]
            if mode == "raise":
                ztune.report({"i": 1})
                raise ValueError("function broke")
            if mode == "bad_report":
                ztune.report([1, 2])
            if mode == "bad_checkpoint":
                ztune.report({"i": 1}, checkpoint_dir="/nonexistent/ckpt")
            if mode == "swallow":
                # except Exception must not keep the function alive.
                for i in range(1, 1000):
                    try:
                        ztune.report({"i": i})
                    except Exception:
                        print("swallowed")
            if mode == "checkpoint":
                d = os.path.join(ztune.get_trial_dir(), "ck")
                os.makedirs(os.path.join(d, "sub"), exist_ok=True)
                with open(os.path.join(d, "sub", "data"), "w") as f:
                    f.write("payload")
                ztune.report({"i": 1}, checkpoint_dir=d)
                ztune.report({"i": 2})
                ztune.report({"i": 3})
            for i in range(1, config.get("reports", 2) + 1):
                print("report", i, "of", ztune.get_trial_id())
                ztune.report({"i": i, "trial": ztune.get_trial_id(),
                              "config": config, "resume": ztune.get_checkpoint(),
                              "timesteps_this_iter": 10})
        finally:
            mark("ended")

    if __name__ == "__main__":
        ztune.run(train)
''')

CLASS_CALLING_REPORT = textwrap.dedent('''
    import ztune

    class Wrong(ztune.Trainable):
        def step(self):
            ztune.report({"x": 1})
            return {}

    if __name__ == "__main__":
        ztune.run(Wrong)
''')


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


class FunctionApiTest(FakeWorkerTestCase):
    scripts = {"probe": PROBE, "wrong": CLASS_CALLING_REPORT}

    def marks(self, w, name):
        return read_lines(os.path.join(w.trial_dir, name))

    def test_the_function_starts_at_the_first_step_and_reports_each_step(self):
        w = self.worker(trial_id="t_f")
        w.start({"reports": 3})
        self.assertEqual(self.marks(w, "started"), [], "not started at setup")
        self.assertEqual(w.step(1)["result"], {
            "i": 1, "trial": "t_f", "config": {"reports": 3}, "resume": None,
            "timesteps_this_iter": 10})
        self.assertEqual(self.marks(w, "started"), ["t_f"])
        self.assertEqual(w.step(2)["result"]["i"], 2)
        # Blocked in report between steps: no output of the next iteration yet.
        self.assertEqual(w.stdout(), "report 1 of t_f\nreport 2 of t_f\n")

    def test_returning_repeats_the_last_metrics_with_done(self):
        w = self.worker()
        w.start({"reports": 2})
        w.step(1)
        last = w.step(2)["result"]
        final = w.step(3)["result"]
        expected = dict(last, done=True)
        del expected["timesteps_this_iter"]   # not counted twice
        self.assertEqual(final, expected)
        self.assertEqual(self.marks(w, "ended"), ["trial_0001"])
        reply = w.step(4)
        self.assertEqual(reply["error"], "the function has already returned, which "
                         "finished the trial; there is no next iteration")

    def test_returning_without_a_report(self):
        w = self.worker()
        w.start({"mode": "return_none"})
        self.assertEqual(w.step(1), {"ok": True, "result": {"done": True}})

    def test_a_returned_dict_is_the_final_result(self):
        w = self.worker()
        w.start({"mode": "return_dict"})
        self.assertEqual(w.step(1)["result"], {"loss": 2.0})
        self.assertEqual(w.step(2)["result"], {"loss": 1.0, "final": True, "done": True})

    def test_returning_something_else_is_an_error(self):
        w = self.worker()
        w.start({"mode": "return_list"})
        self.assertEqual(w.step(1)["error"], "the function returned a list; a function "
                         "trainable returns None or a dict of final metrics")

    def test_an_exception_fails_the_step_with_the_traceback(self):
        w = self.worker()
        w.start({"mode": "raise"})
        self.assertEqual(w.step(1)["result"], {"i": 1})
        reply = w.step(2)
        self.assertFalse(reply["ok"])
        first_line, _, traceback = reply["error"].partition("\n")
        self.assertEqual(first_line, "ValueError: function broke")
        self.assertIn("in train", traceback)
        self.assertIn('raise ValueError("function broke")', traceback)
        self.assertNotIn("function_trainable.py", traceback)
        self.assertIn("ValueError: function broke", w.stderr())
        reply = w.step(3)
        self.assertTrue(reply["error"].startswith("the function failed in an earlier step"))
        self.assertIn("ValueError: function broke", reply["error"])
        # The process is still in business.
        self.assertEqual(w.stop(), {"ok": True})
        self.assertEqual(w.wait(), 0)

    def test_report_checks_its_arguments_in_the_function(self):
        w = self.worker()
        w.start({"mode": "bad_report"})
        reply = w.step(1)
        self.assertTrue(reply["error"].startswith(
            "TypeError: ztune.report(metrics): metrics must be a dict, got list"), reply)
        self.assertIn("in train", reply["error"])
        w2 = self.worker()
        w2.start({"mode": "bad_checkpoint"})
        self.assertTrue(w2.step(1)["error"].startswith(
            "ValueError: ztune.report(checkpoint_dir='/nonexistent/ckpt'): not a directory"))

    def test_report_outside_a_function_is_a_clear_error(self):
        w = self.worker(self.wrong)
        w.start()
        self.assertTrue(w.step(1)["error"].startswith(
            "RuntimeError: ztune.report() must be called from the function that "
            "ztune.run() runs"))

    def test_save_copies_the_reported_checkpoint(self):
        w = self.worker()
        w.start({"mode": "checkpoint"})
        d = self.tempdir()
        self.assertEqual(w.save(d), {"ok": False, "error":
                         "the function has not reported a checkpoint yet: call "
                         "ztune.report(metrics, checkpoint_dir=...) with a directory first"})
        self.assertEqual(w.step(1)["result"], {"i": 1, "should_checkpoint": True})
        self.assertEqual(w.save(d), {"ok": True})
        with open(os.path.join(d, "sub", "data")) as f:
            self.assertEqual(f.read(), "payload")
        # Later results without a checkpoint do not ask for one; a save still
        # gives the latest reported checkpoint.
        self.assertEqual(w.step(2)["result"], {"i": 2})
        d2 = self.tempdir()
        self.assertEqual(w.save(d2), {"ok": True})
        self.assertEqual(os.listdir(d2), ["sub"])

    def test_reset_ends_the_function_and_restarts_it_with_the_new_config(self):
        w = self.worker(trial_id="t_one")
        w.start({"reports": 5})
        w.step(1)
        w.step(2)
        new_dir = self.tempdir()
        self.assertEqual(w.reset({"reports": 5, "second": True}, "t_two", new_dir),
                         {"ok": True, "reset": True})
        # The old function unwound (its finally ran) before the reply, and
        # the new one has not started yet.
        self.assertEqual(self.marks(w, "ended"), ["t_one"])
        self.assertEqual(read_lines(os.path.join(new_dir, "started")), [])
        result = w.step(1)["result"]
        self.assertEqual((result["i"], result["trial"], result["config"]),
                         (1, "t_two", {"reports": 5, "second": True}))
        self.assertEqual(read_lines(os.path.join(new_dir, "started")), ["t_two"])
        w.stop()
        self.assertEqual(w.wait(), 0)
        self.assertEqual(read_lines(os.path.join(new_dir, "ended")), ["t_two"])

    def test_except_exception_does_not_keep_the_function_alive(self):
        w = self.worker()
        w.start({"mode": "swallow"})
        w.step(1)
        self.assertEqual(w.reset({}, "t_next", self.tempdir()), {"ok": True, "reset": True})
        self.assertEqual(self.marks(w, "ended"), ["trial_0001"])
        self.assertNotIn("swallowed", w.stdout())

    def test_stop_and_eof_end_the_function(self):
        w = self.worker()
        w.start({"reports": 5})
        w.step(1)
        self.assertEqual(w.stop(), {"ok": True})
        self.assertEqual(w.wait(), 0)
        self.assertEqual(self.marks(w, "ended"), ["trial_0001"])

        w2 = self.worker()
        w2.start({"reports": 5})
        w2.step(1)
        w2.close_commands()
        self.assertEqual(w2.wait(), 0)
        self.assertEqual(self.marks(w2, "ended"), ["trial_0001"])

    def test_export_is_not_supported(self):
        w = self.worker()
        w.start()
        self.assertEqual(w.export(["json"])["error"],
                         "a function trainable cannot export a model (export_model is "
                         "part of the class API: subclass ztune.Trainable)")


class CounterFunctionTest(FakeWorkerTestCase):
    script = trainable_path("counter_function.py")

    def test_reports_with_a_checkpoint_every_step(self):
        w = self.worker()
        w.start({"start": 10, "increment": 3})
        self.assertEqual(w.step(1)["result"], {"value": 13, "score": 13, "step": 1,
                                               "should_checkpoint": True})
        self.assertEqual(w.step(2)["result"], {"value": 16, "score": 16, "step": 2,
                                               "should_checkpoint": True})
        # Only the newest checkpoint directory is kept in the trial directory.
        self.assertEqual(sorted(n for n in os.listdir(w.trial_dir) if n.startswith("ckpt_")),
                         ["ckpt_2"])

    def test_restore_in_a_new_process_resumes_after_the_checkpoint(self):
        config = {"start": 0.5, "increment": 0.1}
        first = self.worker()
        first.start(config)
        results = [first.step(i)["result"] for i in range(1, 4)]
        checkpoint = self.tempdir()
        self.assertEqual(first.save(checkpoint), {"ok": True})
        expected_next = [first.step(i)["result"] for i in range(4, 7)]
        first.stop()
        self.assertEqual(first.wait(), 0)
        self.assertEqual([r["step"] for r in results], [1, 2, 3])

        # setup, restore, then the first step: the function starts from the
        # checkpoint, with no gap and no repeat.
        second = self.worker()
        second.start(config)
        self.assertEqual(second.restore(checkpoint, 3), {"ok": True})
        resumed = [second.step(i)["result"] for i in range(4, 7)]
        self.assertEqual(resumed, expected_next)
        self.assertEqual([r["step"] for r in resumed], [4, 5, 6])

    def test_restore_into_a_running_function_restarts_it(self):
        w = self.worker()
        w.start({})
        w.step(1)
        w.step(2)
        checkpoint = self.tempdir()
        w.save(checkpoint)
        for i in range(3, 6):
            w.step(i)
        self.assertEqual(w.restore(checkpoint, 2), {"ok": True})
        self.assertEqual(w.step(3)["result"]["step"], 3)
        # A save right after a restore saves the restored state.
        again = self.tempdir()
        w2 = self.worker()
        w2.start({})
        w2.restore(checkpoint, 2)
        self.assertEqual(w2.save(again), {"ok": True})
        with open(os.path.join(again, "state.json")) as f, \
                open(os.path.join(checkpoint, "state.json")) as g:
            self.assertEqual(f.read(), g.read())

    def test_reset_starts_from_scratch_in_the_new_trial_directory(self):
        w = self.worker(trial_id="t_1")
        w.start({"start": 100})
        w.step(1)
        new_dir = self.tempdir()
        self.assertEqual(w.reset({"start": 0}, "t_2", new_dir), {"ok": True, "reset": True})
        self.assertEqual(w.step(1)["result"]["value"], 1)
        self.assertEqual(os.listdir(new_dir), ["ckpt_1"])


if __name__ == "__main__":
    unittest.main()
