"""A stand-in for ztune-worker's side of the process-trainable protocol.

Tests of the Python SDK start a trainable script the way the worker does
(docs/process-protocol.md): the command pipe's read end on fd 3 and the
reply pipe's write end on fd 4, ZTUNE_* variables in the environment,
stdin /dev/null, stdout and stderr into files in the trial directory, its
own process group. Then they send commands and read replies, every read
with a timeout so that a broken SDK fails a test instead of hanging it.

No threads: replies are read with select(), so preexec_fn (used to put the
pipes at fds 3 and 4 in the child) is safe.
"""

import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import unittest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(os.path.dirname(TESTS_DIR))
SDK_DIR = os.path.join(REPO_DIR, "python")
TRAINABLES_DIR = os.path.join(TESTS_DIR, "trainables")

DEFAULT_TIMEOUT_S = 10.0


class ProtocolTimeout(AssertionError):
    """The trainable did not answer (or exit) in time."""


def sdk_env(extra=None):
    """The environment for a child that imports ztune from the source tree."""
    env = dict(os.environ)
    # The SDK must flush by itself; an inherited PYTHONUNBUFFERED would hide
    # a missing flush.
    env.pop("PYTHONUNBUFFERED", None)
    for key in [k for k in env if k.startswith("ZTUNE_")]:
        del env[key]
    env["PYTHONPATH"] = SDK_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if extra:
        env.update(extra)
    return env


def trainable_path(name):
    """The path of a script in tests/python/trainables/."""
    return os.path.join(TRAINABLES_DIR, name)


class FakeWorker:
    """One trainable process, driven like the worker drives it.

    Use as a context manager: on exit the process group is killed (so a
    hung or misbehaving script never outlives its test) and the pipes are
    closed.
    """

    def __init__(self, script, trial_id="trial_0001", trial_dir=None, env=None,
                 argv=None, cwd=None):
        self._tmp = None
        if trial_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ztune-sdk-test-")
            trial_dir = os.path.join(self._tmp.name, trial_id)
            os.makedirs(trial_dir)
        self.trial_id = trial_id
        self.trial_dir = trial_dir
        self.stdout_path = os.path.join(trial_dir, "stdout")
        self.stderr_path = os.path.join(trial_dir, "stderr")
        self._buffer = b""
        self._eof = False

        command_r, command_w = os.pipe()
        reply_r, reply_w = os.pipe()
        # Move the child's ends above the numbers they must take (3 and 4),
        # so that dup2 in the child cannot overwrite one with the other.
        child_command = fcntl.fcntl(command_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_reply = fcntl.fcntl(reply_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(command_r)
        os.close(reply_w)

        def in_child():
            os.setpgid(0, 0)
            os.dup2(child_command, 3)   # dup2 makes 3 and 4 inheritable
            os.dup2(child_reply, 4)

        child_env = sdk_env({
            "ZTUNE_PROTOCOL": "1",
            "ZTUNE_COMMAND_FD": "3",
            "ZTUNE_REPLY_FD": "4",
            "ZTUNE_TRIAL_ID": trial_id,
            "ZTUNE_TRIAL_DIR": trial_dir,
            "ZTUNE_WORKER_ID": "fake-worker",
            "CUDA_VISIBLE_DEVICES": "",
        })
        if env:
            child_env.update(env)
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            try:
                # close_fds=False: every fd of this process except 3 and 4
                # (made in in_child) is close-on-exec already, as Python
                # opens them; close_fds=True would close 3 and 4 too.
                self.process = subprocess.Popen(
                    argv or [sys.executable, script],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                    cwd=cwd or trial_dir, env=child_env,
                    close_fds=False, preexec_fn=in_child)
            finally:
                os.close(child_command)
                os.close(child_reply)
        self.command_fd = command_w
        self.reply_fd = reply_r

    # -- lifecycle ----------------------------------------------------------

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
        else:
            self.kill_group()
        for fd in (self.command_fd, self.reply_fd):
            if fd is not None:
                os.close(fd)
        self.command_fd = self.reply_fd = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def kill_group(self):
        """SIGKILL whatever is left in the child's process group (as the worker does)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def group_alive(self):
        """Whether any process is left in the child's process group."""
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def wait(self, timeout=DEFAULT_TIMEOUT_S):
        """The exit status (negative: killed by that signal), or ProtocolTimeout."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise ProtocolTimeout("the trainable did not exit within %g s" % timeout) from None

    def close_commands(self):
        """Close the command pipe: the child sees EOF, as if the worker died."""
        os.close(self.command_fd)
        self.command_fd = None

    # -- protocol -------------------------------------------------------------

    def send_raw(self, data):
        view = memoryview(data)
        while view:
            view = view[os.write(self.command_fd, view):]

    def send(self, command):
        self.send_raw(json.dumps(command).encode("utf-8") + b"\n")

    def read_line(self, timeout=DEFAULT_TIMEOUT_S):
        """The next reply line (bytes, without newline); None at EOF."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if self._eof:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProtocolTimeout("no reply line within %g s (process %s)"
                                      % (timeout, self._status()))
            ready, _, _ = select.select([self.reply_fd], [], [], remaining)
            if ready:
                chunk = os.read(self.reply_fd, 65536)
                if not chunk:
                    self._eof = True
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def read_message(self, timeout=DEFAULT_TIMEOUT_S):
        line = self.read_line(timeout)
        if line is None:
            raise AssertionError("the reply pipe reached EOF (process %s); stderr:\n%s"
                                 % (self._status(), self.stderr()))
        # The exact decoder the worker would need: strict UTF-8, strict JSON.
        message = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
        if not isinstance(message, dict):
            raise AssertionError("reply is not a JSON object: %r" % line)
        return message

    def hello(self, timeout=DEFAULT_TIMEOUT_S):
        return self.read_message(timeout)

    def request(self, command, timeout=DEFAULT_TIMEOUT_S):
        self.send(command)
        return self.read_message(timeout)

    # Commands with the worker's fields ------------------------------------

    def setup(self, config=None, attempt=0, timeout=DEFAULT_TIMEOUT_S):
        return self.request({"cmd": "setup", "config": config if config is not None else {},
                             "trial_id": self.trial_id, "attempt": attempt,
                             "trial_dir": self.trial_dir}, timeout)

    def start(self, config=None):
        """Read the hello line and set up; asserts both went well."""
        hello = self.hello()
        assert hello.get("protocol") == 1, hello
        reply = self.setup(config)
        assert reply == {"ok": True}, reply
        return hello

    def step(self, iteration, timeout=DEFAULT_TIMEOUT_S):
        return self.request({"cmd": "step", "iteration": iteration}, timeout)

    def save(self, directory, timeout=DEFAULT_TIMEOUT_S):
        return self.request({"cmd": "save", "dir": directory}, timeout)

    def restore(self, directory, iteration, timeout=DEFAULT_TIMEOUT_S):
        return self.request({"cmd": "restore", "dir": directory, "iteration": iteration},
                            timeout)

    def reset(self, config, trial_id, trial_dir, attempt=0, timeout=DEFAULT_TIMEOUT_S):
        return self.request({"cmd": "reset", "config": config, "trial_id": trial_id,
                             "attempt": attempt, "trial_dir": trial_dir}, timeout)

    def export(self, formats, timeout=DEFAULT_TIMEOUT_S):
        return self.request({"cmd": "export", "formats": formats}, timeout)

    def stop(self, timeout=DEFAULT_TIMEOUT_S):
        return self.request({"cmd": "stop"}, timeout)

    # -- logs -----------------------------------------------------------------

    def stdout(self):
        with open(self.stdout_path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()

    def stderr(self):
        with open(self.stderr_path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()

    def _status(self):
        code = self.process.poll()
        return "running" if code is None else "exited with %d" % code


def _reject_constant(name):
    raise AssertionError("reply contains %s, which is not JSON" % name)


def write_script(directory, name, text):
    """Write a trainable script for one test; returns its path."""
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


class FakeWorkerTestCase(unittest.TestCase):
    """A test case that runs trainable scripts under a FakeWorker.

    `scripts` (name -> script text) are written once per class into a
    temporary directory as NAME.py, and each path is set as the class
    attribute NAME. `worker()` starts `script` (default: the first of
    `scripts`) and closes it at the end of the test.
    """

    scripts = {}
    script = None

    @classmethod
    def setUpClass(cls):
        cls._dir = tempfile.TemporaryDirectory(prefix="ztune-sdk-%s-" % cls.__name__)
        for name, text in cls.scripts.items():
            setattr(cls, name, write_script(cls._dir.name, name + ".py", text))
        if cls.script is None and cls.scripts:
            cls.script = getattr(cls, next(iter(cls.scripts)))

    @classmethod
    def tearDownClass(cls):
        cls._dir.cleanup()

    def worker(self, script=None, **kwargs):
        w = FakeWorker(script or self.script, **kwargs)
        self.addCleanup(w.close)
        return w

    def tempdir(self):
        d = tempfile.TemporaryDirectory(prefix="ztune-sdk-ckpt-")
        self.addCleanup(d.cleanup)
        return d.name
