"""The Python SDK's framing and command loop (docs/process-protocol.md).

Most tests run real trainable scripts under fake_worker.FakeWorker (fds 3
and 4, env, process group, as the worker starts them); the framing helpers
are also tested in-process where a child would be slow or wasteful (a 64 MiB
reply).
"""

import json
import os
import subprocess
import sys
import textwrap
import unittest
from unittest import mock

from fake_worker import SDK_DIR, FakeWorkerTestCase, sdk_env

if SDK_DIR not in sys.path:  # CTest sets PYTHONPATH; this is for a bare run
    sys.path.insert(0, SDK_DIR)
from ztune import protocol  # noqa: E402
from ztune.errors import CommandError  # noqa: E402

try:
    import numpy
except ImportError:  # the SDK does not need numpy; only this test uses it
    numpy = None


SCRIPT = textwrap.dedent('''
    import json, math, os, sys
    import ztune

    class Probe(ztune.Trainable):
        def setup(self, config):
            self.mode = config.get("mode", "")

        def step(self):
            mode = self.mode
            if mode == "print":
                # Things that look like protocol lines go to the log only.
                print('{"ok": true, "result": {"fake": 1}}')
                os.write(1, b'{"ok": false, "error": "not me"}\\n')
                print("to stderr", file=sys.stderr)
                return {"printed": True}
            if mode == "nonfinite":
                return {"nan": float("nan"), "inf": math.inf, "ninf": -math.inf,
                        "nested": {"list": [1.5, float("nan")], "tuple": (math.inf,)},
                        "finite": 0.25}
            if mode == "numpy":
                import numpy as np
                return {"f64": np.float64(0.5), "f32": np.float32(0.25),
                        "i64": np.int64(7), "b": np.bool_(True),
                        "nan32": np.float32("nan"), "arr": np.arange(3),
                        "arr2": np.array([[1.0, np.inf]])}
            if mode == "list":
                return [1, 2]
            if mode == "none":
                return None
            if mode == "int_key":
                return {"per_class": {0: 0.5}}
            if mode == "object":
                return {"obj": object()}
            if mode == "cycle":
                d = {}
                d["self"] = d
                return d
            if mode == "big":
                return {"pad": "x" * (3 << 20)}
            if mode == "unicode":
                return {"text": "caf\\u00e9 \\u2603 \\U0001F600 line\\nbreak"}
            if mode == "surrogate":
                return {"text": "bad \\udcff"}
            if mode == "fds":
                return {"command_inheritable": os.get_inheritable(3),
                        "reply_inheritable": os.get_inheritable(4)}
            if mode == "exit":
                sys.exit(5)
            if mode == "keyboard":
                raise KeyboardInterrupt
            return {"iteration_seen": self.iteration}

        def cleanup(self):
            print("cleanup called")

    if __name__ == "__main__":
        ztune.run(Probe)
''')


class ScriptTest(FakeWorkerTestCase):
    scripts = {"probe": SCRIPT}


class HelloAndLifecycleTest(ScriptTest):
    def test_hello_is_the_first_line(self):
        w = self.worker()
        hello = w.hello()
        self.assertEqual(set(hello), {"protocol", "sdk"})
        self.assertEqual(hello["protocol"], 1)
        self.assertRegex(hello["sdk"], r"^ztune-python \d+\.\d+\.\d+ \(Python 3\.")

    def test_stop_replies_then_exits_0(self):
        w = self.worker()
        w.start()
        self.assertEqual(w.stop(), {"ok": True})
        self.assertEqual(w.wait(), 0)
        self.assertIsNone(w.read_line(), "nothing after the stop reply")
        self.assertIn("cleanup called", w.stdout())

    def test_eof_on_the_command_pipe_cleans_up_and_exits_0(self):
        w = self.worker()
        w.start()
        w.close_commands()
        self.assertEqual(w.wait(), 0)
        self.assertIsNone(w.read_line())
        self.assertIn("cleanup called", w.stdout())
        self.assertEqual(w.stderr(), "")

    def test_eof_before_setup_exits_0(self):
        w = self.worker()
        w.hello()
        w.close_commands()
        self.assertEqual(w.wait(), 0)
        self.assertNotIn("cleanup called", w.stdout())

    def test_stop_before_setup(self):
        w = self.worker()
        w.hello()
        self.assertEqual(w.stop(), {"ok": True})
        self.assertEqual(w.wait(), 0)
        self.assertNotIn("cleanup called", w.stdout())

    def test_protocol_fds_are_not_inherited_by_programs_the_trainable_starts(self):
        w = self.worker()
        w.start({"mode": "fds"})
        self.assertEqual(w.step(1)["result"],
                         {"command_inheritable": False, "reply_inheritable": False})

    def test_sys_exit_in_user_code_exits_with_its_status(self):
        # Documented: SystemExit is not turned into an error reply.
        w = self.worker()
        w.start({"mode": "exit"})
        w.send({"cmd": "step", "iteration": 1})
        self.assertEqual(w.wait(), 5)
        self.assertIsNone(w.read_line())


class NotUnderAWorkerTest(ScriptTest):
    def run_script(self, env):
        return subprocess.run([sys.executable, self.script], env=sdk_env(env),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=30, text=True)

    def test_without_the_environment_exits_2_with_a_message(self):
        done = self.run_script({})
        self.assertEqual(done.returncode, 2)
        self.assertIn("must be started by a ztune worker", done.stderr)
        self.assertIn("ZTUNE_COMMAND_FD is not set", done.stderr)
        self.assertEqual(done.stdout, "")

    def test_a_closed_fd_exits_2(self):
        done = self.run_script({"ZTUNE_COMMAND_FD": "97", "ZTUNE_REPLY_FD": "98"})
        self.assertEqual(done.returncode, 2)
        self.assertIn("ZTUNE_COMMAND_FD=97 is not an open file descriptor", done.stderr)

    def test_a_bad_fd_number_exits_2(self):
        done = self.run_script({"ZTUNE_COMMAND_FD": "three", "ZTUNE_REPLY_FD": "4"})
        self.assertEqual(done.returncode, 2)
        self.assertIn("ZTUNE_COMMAND_FD='three' is not a file descriptor number",
                      done.stderr)

    def test_another_protocol_version_exits_2(self):
        w = self.worker(env={"ZTUNE_PROTOCOL": "2"})
        self.assertEqual(w.wait(), 2)
        self.assertIn("speaks protocol 2", w.stderr())
        self.assertIsNone(w.read_line())


class CommandHandlingTest(ScriptTest):
    def test_unknown_and_malformed_commands_get_an_error_reply_each(self):
        w = self.worker()
        w.start()
        reply = w.request({"cmd": "fly"})
        self.assertFalse(reply["ok"])
        self.assertIn("unknown command 'fly'", reply["error"])
        self.assertIn("unknown command None", w.request({"iteration": 1})["error"])
        w.send_raw(b"{not json\n")
        self.assertIn("not JSON", w.read_message()["error"])
        w.send_raw(b"[1, 2]\n")
        self.assertIn("not a JSON object but a list", w.read_message()["error"])
        w.send_raw(b"\xff\xfe\n")
        self.assertFalse(w.read_message()["ok"])
        # Unknown keys are ignored, and the loop is still in step.
        reply = w.request({"cmd": "step", "iteration": 1, "future_key": [1]})
        self.assertEqual(reply, {"ok": True, "result": {"iteration_seen": 0}})

    def test_commands_before_setup_and_a_second_setup_are_refused(self):
        w = self.worker()
        w.hello()
        self.assertEqual(w.step(1), {"ok": False, "error": "step before setup"})
        self.assertEqual(w.save(w.trial_dir), {"ok": False, "error": "save before setup"})
        self.assertEqual(w.setup(), {"ok": True})
        reply = w.setup()
        self.assertFalse(reply["ok"])
        self.assertIn("setup came twice", reply["error"])

    def test_bad_fields_are_named(self):
        w = self.worker()
        w.hello()
        reply = w.request({"cmd": "setup", "config": [1], "trial_id": "t",
                           "attempt": 0, "trial_dir": w.trial_dir})
        self.assertEqual(reply["error"], "setup: 'config' must be an object, got a list")
        # The failed setup counted: the actor is gone.
        self.assertEqual(w.step(1)["error"], "step after a failed setup")

    def test_step_iteration_must_be_positive(self):
        w = self.worker()
        w.start()
        self.assertIn("'iteration' must be an integer >= 1, got 0", w.step(0)["error"])
        self.assertIn("'iteration' must be an integer >= 1, got True",
                      w.request({"cmd": "step", "iteration": True})["error"])
        self.assertEqual(w.step(4)["result"], {"iteration_seen": 3})

    def test_save_and_restore_need_an_existing_directory(self):
        w = self.worker()
        w.start()
        missing = os.path.join(w.trial_dir, "missing")
        self.assertEqual(w.save(missing)["error"],
                         "save: the directory %s does not exist" % missing)
        self.assertEqual(w.restore(missing, 1)["error"],
                         "restore: the directory %s does not exist" % missing)

    def test_a_command_split_across_writes(self):
        w = self.worker()
        w.start()
        data = json.dumps({"cmd": "step", "iteration": 2}).encode() + b"\n"
        w.send_raw(data[:5])
        w.send_raw(data[5:])
        self.assertEqual(w.read_message(), {"ok": True, "result": {"iteration_seen": 1}})

    def test_keyboard_interrupt_is_not_turned_into_an_error_reply(self):
        w = self.worker()
        w.start({"mode": "keyboard"})
        w.send({"cmd": "step", "iteration": 1})
        self.assertNotEqual(w.wait(), 0)
        self.assertIsNone(w.read_line())
        self.assertIn("KeyboardInterrupt", w.stderr())


class OutputAndResultsTest(ScriptTest):
    def test_print_goes_to_stdout_never_to_the_reply_pipe(self):
        w = self.worker()
        w.start({"mode": "print"})
        self.assertEqual(w.step(1), {"ok": True, "result": {"printed": True}})
        # Flushed before the reply: the log is complete when the reply
        # arrives (the print is buffered, so it lands after the os.write).
        self.assertEqual(sorted(w.stdout().splitlines()),
                         ['{"ok": false, "error": "not me"}',
                          '{"ok": true, "result": {"fake": 1}}'])
        self.assertEqual(w.stderr(), "to stderr\n")
        self.assertEqual(w.step(2)["result"], {"printed": True})

    def test_non_finite_floats_become_strings(self):
        w = self.worker()
        w.start({"mode": "nonfinite"})
        w.send({"cmd": "step", "iteration": 1})
        line = w.read_line()
        self.assertNotIn(b"NaN", line)
        self.assertNotIn(b"Infinity", line)
        self.assertEqual(json.loads(line)["result"], {
            "nan": "nan", "inf": "inf", "ninf": "-inf",
            "nested": {"list": [1.5, "nan"], "tuple": ["inf"]}, "finite": 0.25})

    @unittest.skipIf(numpy is None, "numpy is not installed")
    def test_numpy_values_are_converted(self):
        w = self.worker()
        w.start({"mode": "numpy"})
        self.assertEqual(w.step(1)["result"], {
            "f64": 0.5, "f32": 0.25, "i64": 7, "b": True, "nan32": "nan",
            "arr": [0, 1, 2], "arr2": [[1.0, "inf"]]})

    def test_a_result_that_is_not_a_dict_is_an_error_naming_its_type(self):
        w = self.worker()
        w.start({"mode": "list"})
        self.assertEqual(w.step(1), {"ok": False,
                                     "error": "step() must return a dict of metrics, got a list"})
        w2 = self.worker()
        w2.start({"mode": "none"})
        self.assertEqual(w2.step(1)["error"],
                         "step() must return a dict of metrics, got None")

    def test_results_that_json_cannot_carry_are_errors_naming_the_key(self):
        cases = {
            "int_key": "result['per_class'] has a key 0 of type int; keys must be strings",
            "object": "result['obj'] is of type object, which JSON cannot represent",
            "cycle": "nested deeper than 64 levels",
            "surrogate": "not valid Unicode",
        }
        for mode, message in cases.items():
            with self.subTest(mode=mode):
                w2 = self.worker()
                w2.start({"mode": mode})
                reply = w2.step(1)
                self.assertFalse(reply["ok"])
                self.assertIn(message, reply["error"])
                # The process stays usable.
                self.assertEqual(w2.stop(), {"ok": True})
                self.assertEqual(w2.wait(), 0)

    def test_unicode_and_large_results_arrive_intact(self):
        w = self.worker()
        w.start({"mode": "unicode"})
        w.send({"cmd": "step", "iteration": 1})
        line = w.read_line()
        self.assertIn("café ☃ 😀".encode("utf-8"), line, "UTF-8, not \\u escapes")
        self.assertEqual(json.loads(line)["result"]["text"], "café ☃ 😀 line\nbreak")
        w2 = self.worker()
        w2.start({"mode": "big"})
        self.assertEqual(len(w2.step(1)["result"]["pad"]), 3 << 20)


class FramingUnitTest(unittest.TestCase):
    """The framing helpers, in this process."""

    def test_write_all_retries_partial_writes(self):
        written = []

        def short_write(fd, data):
            chunk = bytes(data[:3])
            written.append(chunk)
            return len(chunk)

        with mock.patch("os.write", side_effect=short_write):
            protocol.write_all(99, b"0123456789")
        self.assertEqual(b"".join(written), b"0123456789")
        self.assertEqual(len(written), 4)

    def test_encode_message_is_one_utf8_line(self):
        data = protocol.encode_message({"ok": True, "text": "a\nb é"})
        self.assertTrue(data.endswith(b"\n"))
        self.assertEqual(data.count(b"\n"), 1)
        self.assertIn("é".encode("utf-8"), data)

    def test_a_reply_over_the_limit_is_refused(self):
        with mock.patch.object(protocol, "MAX_REPLY_BYTES", 100):
            protocol.encode_message({"pad": "x" * 50})
            with self.assertRaisesRegex(CommandError, "more than the 100 bytes"):
                protocol.encode_message({"pad": "x" * 200})

    def test_error_replies_never_fail(self):
        data = protocol.encode_error("bad \udcff text")
        self.assertEqual(json.loads(data)["error"], "bad ? text")

    def test_to_json_value(self):
        class Scalar:
            def item(self):
                return 2.5

        class BadItem:
            def item(self):
                return object()

        self.assertEqual(protocol.to_json_value(
            {"a": (1, True, None, "s"), "b": Scalar(), "c": float("-inf")}, "r"),
            {"a": [1, True, None, "s"], "b": 2.5, "c": "-inf"})
        with self.assertRaisesRegex(CommandError, r"r\['x'\] is of type object"):
            protocol.to_json_value({"x": BadItem()}, "r")
        deep = []
        for _ in range(100):
            deep = [deep]
        with self.assertRaisesRegex(CommandError, "nested deeper than 64"):
            protocol.to_json_value(deep, "r")


if __name__ == "__main__":
    unittest.main()
