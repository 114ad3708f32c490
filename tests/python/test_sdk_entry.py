"""ztune.entry: serving FILE:NAME from an uploaded project directory.

Each test starts ``python3 -m ztune.entry FILE:NAME`` the way the worker
will: ZTUNE_CODE_DIR names the project, the working directory is the trial's
own directory (elsewhere). Failures before ztune.run must come back as the
error of the first setup, starting with "ztune.entry: ".
"""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

from fake_worker import FakeWorker, sdk_env

# The uploaded project: relative path -> content.
PROJECT = {
    "helpers.py": '''
        def scale(x):
            return 2 * x
    ''',
    # Function API; imports a module of the project (from the code dir).
    "train.py": '''
        import os, sys
        import helpers
        import ztune

        def train(config):
            for i in range(1, 4):
                ztune.report({
                    "i": i, "y": helpers.scale(i * config["k"]),
                    "helpers_file": helpers.__file__, "module": __name__,
                    "cwd": os.getcwd(), "code_dir": os.environ.get("ZTUNE_CODE_DIR"),
                    "sys_path_0": sys.path[0], "argv": sys.argv})

        def _private():
            pass

        CONSTANT = 3

        if __name__ == "__main__":
            open("main_block_ran", "w").close()
            print("main block ran")
            ztune.run(train)
    ''',
    # Class API.
    "model.py": '''
        import os, pickle, sys
        import ztune

        class Model(ztune.Trainable):
            def setup(self, config):
                self.x = config["x0"]

            def step(self):
                self.x += 1
                return {"x": self.x, "module": type(self).__module__,
                        "cwd": os.getcwd(),
                        # Importable by name: pickling by reference works.
                        "pickles": pickle.loads(pickle.dumps(Model)) is Model,
                        "trial_dir_on_path": os.getcwd() in sys.path}

            class Inner(ztune.Trainable):
                def step(self):
                    return {"inner": True}

        class Plain:
            pass

        CONFIG = {"lr": 0.1}
        instance = Model()

        if __name__ == "__main__":
            open("main_block_ran", "w").close()
            ztune.run(Model)
    ''',
    # A regular package: imported as pkg.nested, relative imports work.
    "pkg/__init__.py": "",
    "pkg/util.py": '''
        VALUE = 42
    ''',
    "pkg/nested.py": '''
        import ztune
        from . import util

        def train(config):
            ztune.report({"value": util.VALUE, "module": __name__})
    ''',
    # Not a package (no __init__.py, and a name that is no identifier): loaded
    # from its path; its sibling module imports.
    "my-scripts/run.py": '''
        import ztune
        import sibling

        def train(config):
            ztune.report({"sibling": sibling.NAME, "module": __name__})
    ''',
    "my-scripts/sibling.py": '''
        NAME = "sibling"
    ''',
    # A project file whose name is taken by the standard library.
    "json.py": '''
        import ztune

        def train(config):
            ztune.report({"module": __name__})
    ''',
    "broken.py": '''
        import helpers

        def load_weights():
            raise RuntimeError("weights file is corrupt")

        load_weights()
    ''',
    "missing_import.py": '''
        import no_such_module_anywhere
    ''',
    "syntax.py": '''
        def f(:
            pass
    ''',
    "exits.py": '''
        import sys
        sys.exit(3)
    ''',
    "unguarded.py": '''
        import ztune

        def train(config):
            ztune.report({"x": 1})

        ztune.run(train)
    ''',
}


def write_tree(root, files):
    for relative, text in files.items():
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text))


def entry_argv(*args):
    return [sys.executable, "-m", "ztune.entry"] + list(args)


class EntryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="ztune-sdk-entry-")
        cls.code_dir = os.path.join(cls._tmp.name, "code")
        write_tree(cls.code_dir, PROJECT)
        # Outside the project: reachable only through symbolic links.
        cls.outside = os.path.join(cls._tmp.name, "outside")
        write_tree(cls.outside, {"evil.py": "def f(config):\n    pass\n"})
        os.symlink(os.path.join(cls.outside, "evil.py"), os.path.join(cls.code_dir, "link.py"))
        os.symlink(cls.outside, os.path.join(cls.code_dir, "linkdir"))
        # A link that stays inside is fine.
        os.symlink("train.py", os.path.join(cls.code_dir, "alias.py"))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    @classmethod
    def start_entry(cls, args, code_dir=None, env=None):
        """A FakeWorker running `python3 -m ztune.entry ARGS...` in its own trial dir."""
        child_env = {"ZTUNE_CODE_DIR": code_dir or cls.code_dir}
        child_env.update(env or {})
        return FakeWorker(None, env=child_env, argv=entry_argv(*args))

    def entry(self, spec, **kwargs):
        w = self.start_entry([spec], **kwargs)
        self.addCleanup(w.close)
        return w


def collect_setup_error(w):
    """The error text of the setup of an entry that must fail; checks the rest."""
    hello = w.hello()
    if hello.get("protocol") != 1:
        raise AssertionError("bad hello %r" % hello)
    reply = w.setup({})
    if reply.get("ok") is not False or not isinstance(reply.get("error"), str):
        raise AssertionError("setup did not fail: %r" % reply)
    error = reply["error"]
    # The step after a failed setup is refused; stop ends the process.
    step = w.step(1)
    if step != {"ok": False, "error": "step after a failed setup"}:
        raise AssertionError("step after the failed setup: %r" % step)
    stop = w.stop()
    if stop != {"ok": True}:
        raise AssertionError("stop: %r" % stop)
    status = w.wait()
    if status != 0:
        raise AssertionError("exit status %d" % status)
    # The whole message is in the trial's stderr too.
    if error not in w.stderr():
        raise AssertionError("the error is not in stderr:\n%s" % w.stderr())
    return error


class RoundTripTest(EntryTest):
    def test_function_entry(self):
        w = self.entry("train.py:train")
        w.start({"k": 5})
        results = [w.step(i)["result"] for i in (1, 2, 3)]
        self.assertEqual([(r["i"], r["y"]) for r in results], [(1, 10), (2, 20), (3, 30)])
        first = results[0]
        # The project's own module imports from the code dir.
        self.assertEqual(os.path.realpath(first["helpers_file"]),
                         os.path.realpath(os.path.join(self.code_dir, "helpers.py")))
        # Imported by its name, not as __main__.
        self.assertEqual(first["module"], "train")
        # cwd is the trial dir; the code dir is elsewhere and first on sys.path.
        self.assertEqual(os.path.realpath(first["cwd"]), os.path.realpath(w.trial_dir))
        self.assertEqual(first["code_dir"], self.code_dir)
        self.assertNotEqual(os.path.realpath(first["cwd"]), os.path.realpath(self.code_dir))
        self.assertEqual(first["sys_path_0"], os.path.realpath(self.code_dir))
        self.assertEqual(first["argv"], [os.path.join(os.path.realpath(self.code_dir),
                                                      "train.py")])
        self.assertEqual(w.step(4)["result"].get("done"), True)
        self.assertEqual(w.stop(), {"ok": True})
        self.assertEqual(w.wait(), 0)
        # The `if __name__ == "__main__"` block did not run.
        self.assertFalse(os.path.exists(os.path.join(w.trial_dir, "main_block_ran")))
        self.assertNotIn("main block ran", w.stdout())
        self.assertFalse(os.path.exists(os.path.join(self.code_dir, "main_block_ran")))

    def test_class_entry(self):
        w = self.entry("model.py:Model")
        w.start({"x0": 10})
        for i in (1, 2, 3):
            result = w.step(i)["result"]
            self.assertEqual(result["x"], 10 + i)
        self.assertEqual(result["module"], "model")
        self.assertTrue(result["pickles"])
        self.assertEqual(os.path.realpath(result["cwd"]), os.path.realpath(w.trial_dir))
        # The trial dir (what `python3 -m` would put on sys.path) is not there.
        self.assertFalse(result["trial_dir_on_path"])
        self.assertEqual(w.stop(), {"ok": True})
        self.assertEqual(w.wait(), 0)
        self.assertFalse(os.path.exists(os.path.join(w.trial_dir, "main_block_ran")))
        self.assertEqual(w.stderr(), "")

    def test_dotted_name(self):
        w = self.entry("model.py:Model.Inner")
        w.start()
        self.assertEqual(w.step(1)["result"], {"inner": True})

    def test_module_in_a_package_uses_relative_imports(self):
        w = self.entry("pkg/nested.py:train")
        w.start()
        self.assertEqual(w.step(1)["result"], {"value": 42, "module": "pkg.nested"})

    def test_file_outside_any_package_is_loaded_from_its_path(self):
        w = self.entry("./my-scripts/run.py:train")
        w.start()
        self.assertEqual(w.step(1)["result"], {"sibling": "sibling",
                                               "module": "_ztune_code_my_scripts_run"})

    def test_file_named_like_a_loaded_module(self):
        # json is imported already (by the SDK): the project's json.py is
        # loaded from its path, not mistaken for the standard library's.
        w = self.entry("json.py:train")
        w.start()
        self.assertEqual(w.step(1)["result"], {"module": "_ztune_code_json"})

    def test_symbolic_link_inside_the_project(self):
        w = self.entry("alias.py:train")
        w.start({"k": 1})
        self.assertEqual(w.step(1)["result"]["y"], 2)


class SetupErrorTest(EntryTest):
    """Every failure is the error of the first setup, starting with "ztune.entry: ".

    Each case needs a process of its own; setUpClass starts them all at
    once and collects their errors (one at a time, each read with the
    harness's timeout), which keeps the whole test fast on a busy machine.
    """

    @classmethod
    def cases(cls):
        """key -> (arguments, keyword arguments of start_entry)."""
        return {
            "no_code_dir": (["train.py:train"], {"env": {"ZTUNE_CODE_DIR": ""}}),
            "code_dir_missing": (["train.py:train"],
                                 {"code_dir": os.path.join(cls._tmp.name, "nowhere")}),
            "nocolon": (["nocolon"], {}),
            "no_name": (["train.py:"], {}),
            "no_file": ([":train"], {}),
            "bad_name": (["train.py:not-a-name"], {}),
            "empty_name_part": (["train.py:a..b"], {}),
            "extra_argument": (["train.py:train", "extra"], {}),
            "missing_file": (["tran.py:train"], {}),
            "not_python": (["helpers.txt:f"], {}),
            "parent": (["../x.py:f"], {}),
            "parent_inside": (["pkg/../../outside/evil.py:f"], {}),
            "absolute": ([os.path.join(cls.outside, "evil.py") + ":f"], {}),
            "link": (["link.py:f"], {}),
            "link_dir": (["linkdir/evil.py:f"], {}),
            "missing_function": (["train.py:trian"], {}),
            "missing_class": (["model.py:Nope"], {}),
            "missing_inner": (["model.py:Model.Innr"], {}),
            "dict": (["model.py:CONFIG"], {}),
            "plain_class": (["model.py:Plain"], {}),
            "instance": (["model.py:instance"], {}),
            "broken": (["broken.py:f"], {}),
            "missing_import": (["missing_import.py:f"], {}),
            "syntax": (["syntax.py:f"], {}),
            "exits": (["exits.py:f"], {}),
            "unguarded": (["unguarded.py:train"], {}),
        }

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.errors = {}
        workers = {}
        try:
            for key, (args, kwargs) in cls.cases().items():
                workers[key] = cls.start_entry(args, **kwargs)
            for key, w in workers.items():
                try:
                    cls.errors[key] = collect_setup_error(w)
                except Exception as e:   # reported by the test of that case
                    cls.errors[key] = e
        finally:
            for w in workers.values():
                w.close()

    def error(self, key):
        error = self.errors[key]
        if isinstance(error, Exception):
            raise AssertionError("case %s: %s" % (key, error))
        self.assertTrue(error.startswith("ztune.entry: "), error)
        return error

    def test_missing_code_dir_variable(self):
        self.assertIn("ZTUNE_CODE_DIR is not set", self.error("no_code_dir"))

    def test_code_dir_that_does_not_exist(self):
        self.assertIn("nowhere is not a directory", self.error("code_dir_missing"))

    def test_bad_syntax(self):
        self.assertEqual(self.error("nocolon"), "ztune.entry: 'nocolon' is not FILE:NAME; "
                         "usage: python3 -m ztune.entry FILE:NAME (e.g. train.py:train), "
                         "with ZTUNE_CODE_DIR naming the project directory")
        self.assertIn("'train.py:' is not FILE:NAME", self.error("no_name"))
        self.assertIn("':train' is not FILE:NAME", self.error("no_file"))
        self.assertIn("NAME 'not-a-name' is not a Python identifier", self.error("bad_name"))
        self.assertIn("NAME 'a..b' is not a Python identifier", self.error("empty_name_part"))
        self.assertIn("expected exactly one argument FILE:NAME, got 2",
                      self.error("extra_argument"))

    def test_missing_file(self):
        error = self.error("missing_file")
        self.assertIn("FILE tran.py does not exist in the project directory", error)
        self.assertIn("train.py", error)   # what exists is listed

    def test_not_a_python_file(self):
        self.assertIn("FILE helpers.txt is not a Python file; it must end in .py",
                      self.error("not_python"))

    def test_parent_component(self):
        self.assertEqual(self.error("parent"), "ztune.entry: ../x.py:f: FILE ../x.py has "
                         "a '..' component; it must name a file inside the project "
                         "directory (ZTUNE_CODE_DIR)")
        self.assertIn("has a '..' component", self.error("parent_inside"))

    def test_absolute_path(self):
        self.assertIn("FILE %s is an absolute path" % os.path.join(self.outside, "evil.py"),
                      self.error("absolute"))

    def test_symbolic_link_outside(self):
        for key, name in (("link", "link.py"), ("link_dir", "linkdir/evil.py")):
            with self.subTest(key=key):
                error = self.error(key)
                self.assertIn("FILE %s leads outside the project directory" % name, error)
                self.assertNotIn(self.outside, error)

    def test_missing_attribute_lists_what_exists(self):
        first_line = self.error("missing_function").splitlines()[0]
        self.assertEqual(first_line, "ztune.entry: train.py:trian: train.py has no "
                         "attribute 'trian'; it defines train (did you mean 'train'?)")
        self.assertIn("model.py has no attribute 'Nope'; it defines Model, Plain",
                      self.error("missing_class"))
        error = self.error("missing_inner")
        self.assertIn("model.py:Model has no attribute 'Innr'", error)
        self.assertIn("did you mean 'Inner'?", error)

    def test_unsuitable_objects(self):
        self.assertIn("model.py:CONFIG is a dict, not a ztune.Trainable subclass or a "
                      "function", self.error("dict"))
        self.assertIn("model.py:Plain is a class that does not derive from ztune.Trainable",
                      self.error("plain_class"))
        self.assertIn("model.py:instance is an instance of Model", self.error("instance"))

    def test_import_raising_shows_the_users_traceback(self):
        first_line, _, rest = self.error("broken").partition("\n")
        self.assertEqual(first_line, "ztune.entry: cannot import broken.py (module broken): "
                         "RuntimeError: weights file is corrupt")
        self.assertIn("Traceback (most recent call last):", rest)
        self.assertIn('broken.py", line 7, in <module>', rest)
        self.assertIn("in load_weights", rest)
        # Neither the SDK's nor importlib's frames.
        for noise in ("entry.py", "importlib", "runner.py"):
            self.assertNotIn(noise, rest)

    def test_import_of_a_missing_module(self):
        self.assertIn("ModuleNotFoundError: No module named 'no_such_module_anywhere'",
                      self.error("missing_import").splitlines()[0])

    def test_syntax_error(self):
        first_line = self.error("syntax").splitlines()[0]
        self.assertIn("SyntaxError", first_line)
        self.assertIn("syntax.py, line 2", first_line)

    def test_module_that_exits_on_import(self):
        self.assertIn("SystemExit: 3", self.error("exits").splitlines()[0])

    def test_module_that_calls_run_on_import(self):
        error = self.error("unguarded")
        self.assertIn("unguarded.py calls ztune.run() while it is imported", error)
        self.assertIn("unguarded.py, line 7", error)
        self.assertIn('if __name__ == "__main__":', error)


class NotUnderWorkerTest(EntryTest):
    """Without the protocol fds: exit 2 with ztune.run's message, like a script."""

    def run_by_hand(self, spec):
        with tempfile.TemporaryDirectory(prefix="ztune-sdk-entry-cwd-") as cwd:
            return subprocess.run(entry_argv(spec), cwd=cwd, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=sdk_env({"ZTUNE_CODE_DIR": self.code_dir}),
                                  timeout=10, universal_newlines=True)

    def test_a_good_entry(self):
        done = self.run_by_hand("train.py:train")
        self.assertEqual(done.returncode, 2)
        self.assertIn("train.py is a ztune process trainable: it must be started by a "
                      "ztune worker", done.stderr)
        self.assertEqual(done.stdout, "")

    def test_a_bad_entry(self):
        done = self.run_by_hand("train.py:trian")
        self.assertEqual(done.returncode, 2)
        self.assertIn("ztune.entry: train.py:trian: train.py has no attribute 'trian'",
                      done.stderr)
        self.assertIn("must be started by a ztune worker", done.stderr)


if __name__ == "__main__":
    unittest.main()
