"""`pip install ./python` works offline, as python/README.md says.

Installs a copy of the SDK (so that the build leaves nothing in the source
tree) with pip's --no-index into a fresh virtual environment that sees the
system's setuptools, then imports it there from outside the source tree.
Skipped where the venv module is missing.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from fake_worker import SDK_DIR

HAVE_VENV = subprocess.run([sys.executable, "-m", "venv", "--help"],
                           capture_output=True).returncode == 0


@unittest.skipUnless(HAVE_VENV, "needs the venv module (Debian: python3-venv)")
class OfflineInstallTest(unittest.TestCase):
    def test_pip_installs_the_sdk_without_the_network(self):
        tmp = tempfile.mkdtemp(prefix="ztune-sdk-install-")
        self.addCleanup(shutil.rmtree, tmp, True)
        src = os.path.join(tmp, "src")
        shutil.copytree(SDK_DIR, src, ignore=shutil.ignore_patterns(
            "build", "*.egg-info", "__pycache__"))
        venv = os.path.join(tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True,
                       capture_output=True, timeout=120)
        python = os.path.join(venv, "bin", "python")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        install = subprocess.run(
            [python, "-m", "pip", "install", "--no-index", src],
            capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(install.returncode, 0, install.stdout + install.stderr)

        # Imported from the environment, not from the source tree or the copy.
        probe = subprocess.run(
            [python, "-c", "import ztune, ztune.trainable, ztune.function_trainable; "
                           "print(ztune.__version__); print(ztune.__file__)"],
            capture_output=True, text=True, timeout=60, cwd=tmp, env=env)
        self.assertEqual(probe.returncode, 0, probe.stderr)
        version, path = probe.stdout.split()
        self.assertTrue(path.startswith(os.path.join(venv, "lib")), path)
        self.assertRegex(version, r"^\d+\.\d+\.\d+")


if __name__ == "__main__":
    unittest.main()
