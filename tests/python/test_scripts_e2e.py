"""The operator scripts as the README uses them: scripts/local-cluster.sh
with its port and directory variables, and scripts/start-head.sh with the
flag its comment suggests. Real binaries on loopback, free ports, a
temporary run directory."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import unittest

import client_cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MISSING = client_cluster.missing_binaries()


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipIf(MISSING, f"ztune binaries not built: {MISSING}")
class ScriptsTest(unittest.TestCase):
    def setUp(self):
        self.run_dir = tempfile.mkdtemp(prefix="ztune-scripts-")
        self.addCleanup(shutil.rmtree, self.run_dir, True)
        self.client_port, self.worker_port = free_tcp_port(), free_tcp_port()
        self.env = dict(os.environ, ZTUNE_RUN_DIR=self.run_dir,
                        ZTUNE_BUILD_DIR=client_cluster.BUILD_DIR,
                        ZTUNE_CLIENT_PORT=str(self.client_port),
                        ZTUNE_WORKER_PORT=str(self.worker_port), ZTUNE_WORKER_CPUS="3")
        for var in ("ZTUNE_HEAD", "ZTUNE_KEY", "ZTUNE_HEAD_KEY", "ZTUNE_WORKER_KEY",
                    "ZTUNE_KEYS_DIR", "ZTUNE_BIN_DIR"):
            self.env.pop(var, None)

    def script(self, *args):
        return subprocess.run([os.path.join(REPO, "scripts", args[0]), *args[1:]], env=self.env,
                              capture_output=True, text=True, timeout=120)

    def down(self):
        self.script("local-cluster.sh", "down")

    def test_local_cluster_uses_its_variables(self):
        self.addCleanup(self.down)
        up = self.script("local-cluster.sh", "up", "1")
        self.assertEqual(up.returncode, 0, up.stdout + up.stderr)
        self.assertIn("cluster up: 1/1 workers registered", up.stdout)
        with open(os.path.join(self.run_dir, "endpoints.json")) as f:
            endpoints = json.load(f)
        self.assertEqual(endpoints["client_endpoint"], f"tcp://127.0.0.1:{self.client_port}")
        self.assertEqual(endpoints["worker_endpoint"], f"tcp://127.0.0.1:{self.worker_port}")
        for path in ("head.pid", "worker-w1.pid", "logs/head.log", "data", "keys/client.key"):
            self.assertTrue(os.path.exists(os.path.join(self.run_dir, path)), path)
        # The CLI with the keys the scripts made, as `up` tells the user.
        cli = subprocess.run(
            [client_cluster.CLI_BIN, "--head", f"tcp://127.0.0.1:{self.client_port}",
             "--key", os.path.join(self.run_dir, "keys", "client.key"),
             "--head-key", os.path.join(self.run_dir, "data", "head.pub"), "workers", "--json"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(cli.returncode, 0, cli.stderr)
        workers = json.loads(cli.stdout)["workers"]
        self.assertEqual([(w["name"], w["resources_total"]["CPU"]) for w in workers], [("w1", 3)])
        status = self.script("local-cluster.sh", "status")
        self.assertIn("head: running", status.stdout)
        self.assertIn("worker-w1: running", status.stdout)
        down = self.script("local-cluster.sh", "down")
        self.assertEqual(down.returncode, 0, down.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.run_dir, "head.pid")))

    def test_start_head_takes_the_endpoint_flag_it_suggests(self):
        self.addCleanup(self.down)
        start = self.script("start-head.sh", "--worker-endpoint",
                            f"tcp://0.0.0.0:{self.worker_port}")
        self.assertEqual(start.returncode, 0, start.stdout + start.stderr)
        with open(os.path.join(self.run_dir, "endpoints.json")) as f:
            endpoints = json.load(f)
        self.assertEqual(endpoints["worker_endpoint"], f"tcp://0.0.0.0:{self.worker_port}")
        self.assertEqual(endpoints["client_endpoint"], f"tcp://127.0.0.1:{self.client_port}")

    def test_keys_starting_with_a_dash_are_listed_once(self):
        # A Z85 key may begin with '-': `grep -qF KEY` took it for an option,
        # never found it, and listed it again at every start; the head then
        # refused to start ("key ... is listed twice"), about one start in 40.
        keys = os.path.join(self.run_dir, "keys")
        os.makedirs(keys, mode=0o700)
        for name in ("worker", "client"):
            with open(os.path.join(keys, name + ".key"), "w") as f:
                f.write("# test\npublic-key = -j{0}\nsecret-key = unused\n".format("A" * 38))
            with open(os.path.join(keys, name + ".pub"), "w") as f:
                f.write("public-key = -j{0}\n".format("A" * 38) if name == "worker" else
                        "public-key = -k{0}\n".format("B" * 38))
        for _ in range(2):
            out = subprocess.run(
                ["bash", "-c", f"source {REPO}/scripts/common.sh && ensure_local_keys"],
                env=self.env, capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertNotIn("invalid option", out.stderr)
        with open(os.path.join(self.run_dir, "data", "workers.allow")) as f:
            self.assertEqual(f.read().count("-j" + "A" * 38), 1)
        with open(os.path.join(self.run_dir, "data", "clients.allow")) as f:
            self.assertEqual(f.read().count("-k" + "B" * 38), 1)

    def test_start_head_refuses_a_data_dir_it_would_not_key(self):
        start = self.script("start-head.sh", f"--data-dir={self.run_dir}/elsewhere")
        self.assertEqual(start.returncode, 2, start.stdout + start.stderr)
        self.assertIn("set ZTUNE_RUN_DIR", start.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.run_dir, "head.pid")))


if __name__ == "__main__":
    unittest.main()
