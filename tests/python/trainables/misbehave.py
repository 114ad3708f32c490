"""A trainable that misbehaves on purpose, for the worker's failure handling.

config: ``mode`` (what to do), ``at_step`` (the iteration at which to do it,
default 1). Other steps report ``{"x": iteration}``. Modes:

- ``segfault``: kill itself with SIGSEGV
- ``exit3``: write "about to exit 3" to stderr, then ``os._exit(3)``
- ``hang``: sleep forever
- ``ignore_sigterm``: ignore SIGTERM, then sleep forever (needs SIGKILL)
- ``raise``: raise ValueError("bad step") (an error reply; the process lives)
- ``spawn_child``: start ``sleep 1000`` in the same process group and report
  normally, leaving the child behind for the worker to clean up
- anything else: behave normally
"""

import os
import signal
import subprocess
import sys
import time

import ztune


class Misbehave(ztune.Trainable):
    def setup(self, config):
        self.mode = config.get("mode", "")
        self.at_step = config.get("at_step", 1)
        self.children = []

    def step(self):
        step = self.iteration + 1
        if step == self.at_step:
            self._misbehave()
        return {"x": step}

    def _misbehave(self):
        if self.mode == "segfault":
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGSEGV)
            time.sleep(60)  # the signal is delivered before this returns
        elif self.mode == "exit3":
            sys.stderr.write("about to exit 3\n")
            sys.stderr.flush()
            os._exit(3)
        elif self.mode == "hang":
            _sleep_forever()
        elif self.mode == "ignore_sigterm":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            _sleep_forever()
        elif self.mode == "raise":
            raise ValueError("bad step")
        elif self.mode == "spawn_child":
            # Same process group (no start_new_session): the worker must find
            # and end it. The Popen object is kept because dropping a running
            # one makes Python warn ("subprocess ... is still running").
            self.children.append(subprocess.Popen(
                ["sleep", "1000"], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "mode"), "w") as f:
            f.write(self.mode)

    def load_checkpoint(self, checkpoint_dir):
        pass

    def reset_config(self, new_config):
        self.setup(new_config)
        return True


def _sleep_forever():
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    ztune.run(Misbehave)
