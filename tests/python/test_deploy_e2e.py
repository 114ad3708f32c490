"""The deployment files of deploy/ run as written: the systemd units pass
`systemd-analyze verify`, and their ExecStart lines, and the containers of
the Kubernetes example, start a head and a worker that register with keys
made the way the files' comments say. Paths are moved into a temporary
directory; nothing else is changed. Real binaries on loopback."""

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import yaml

import client_cluster
from client_cluster import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(REPO, "deploy")
MISSING = client_cluster.missing_binaries()
BINARIES = {"ztune-head": client_cluster.HEAD_BIN, "ztune-worker": client_cluster.WORKER_BIN,
            "ztune": client_cluster.CLI_BIN}


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_unit(path):
    """{section: [(key, value)]} with continuation lines joined."""
    sections, current, pending = {}, None, ""
    with open(path) as f:
        for raw in f:
            line = pending + raw.rstrip("\n")
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                current = sections.setdefault(line.strip("[]"), [])
            else:
                key, _, value = line.partition("=")
                current.append((key.strip(), value.strip()))
    return sections


def expand_exec(command, env):
    """systemd's expansion: ${VAR} is one word, $VAR splits on white space."""
    words = []
    for word in shlex.split(command):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            words += env.get(m.group(1), "").split()
        else:
            words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                                lambda v: env.get(v.group(1), ""), word))
    return words


@unittest.skipIf(MISSING, f"ztune binaries not built: {MISSING}")
class DeployTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ztune-deploy-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
            p.log.close()

    def move_paths(self, words):
        """Binaries to the build's, /var/lib and /etc under the test's dir."""
        out = []
        for w in words:
            for name, path in BINARIES.items():
                w = w.replace("/usr/local/bin/" + name, path)
            w = w.replace("/var/lib/", self.dir + "/var/lib/").replace("/etc/ztune",
                                                                      self.dir + "/etc/ztune")
            out.append(w)
        return out

    def spawn(self, argv, name, env=None):
        log = open(os.path.join(self.dir, name + ".log"), "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        p.log = log
        self.procs.append(p)
        return p

    def keygen(self, base):
        out = subprocess.run([client_cluster.CLI_BIN, "keygen", "--out", base],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        with open(base + ".pub") as f:
            return next(l.split("=", 1)[1].strip() for l in f if l.startswith("public-key"))

    def logs(self):
        text = ""
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    text += f"==== {name}\n{f.read()[-3000:]}\n"
        return text

    def workers(self, client_endpoint, key, head_pub):
        out = subprocess.run([client_cluster.CLI_BIN, "--head", client_endpoint, "--key", key,
                              "--head-key", head_pub, "--timeout-ms", "2000", "workers",
                              "--json"], capture_output=True, text=True, timeout=30)
        return json.loads(out.stdout)["workers"] if out.returncode == 0 else []

    def stop_and_expect_clean_exit(self, proc, timeout_s):
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=timeout_s), 0, self.logs())

    @unittest.skipIf(shutil.which("systemd-analyze") is None, "systemd-analyze is not installed")
    def test_systemd_units_verify(self):
        units = os.path.join(self.dir, "units")
        os.makedirs(units)
        for name in ("ztune-head.service", "ztune-worker.service"):
            with open(os.path.join(DEPLOY, "systemd", name)) as f:
                text = f.read()
            for binary, path in BINARIES.items():
                text = text.replace("/usr/local/bin/" + binary, path)
            with open(os.path.join(units, name), "w") as f:
                f.write(text)
        out = subprocess.run(["systemd-analyze", "verify", *sorted(os.listdir(units))],
                             cwd=units, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        # Unknown or misspelt keys are only warnings: none may be printed.
        self.assertEqual(out.stdout + out.stderr, "")

    def test_systemd_exec_lines_start_a_working_pair(self):
        head_unit = parse_unit(os.path.join(DEPLOY, "systemd", "ztune-head.service"))
        worker_unit = parse_unit(os.path.join(DEPLOY, "systemd", "ztune-worker.service"))
        client_port, worker_port = free_tcp_port(), free_tcp_port()
        etc = os.path.join(self.dir, "etc", "ztune")
        os.makedirs(etc)
        os.makedirs(os.path.join(self.dir, "var", "lib", "ztune"), mode=0o700)
        os.makedirs(os.path.join(self.dir, "var", "lib", "ztune-worker"), mode=0o700)
        # The operator's steps of docs/deploy.md: the head's key pair, the
        # worker's key in workers.allow and at /etc/ztune, an admin client.
        data = os.path.join(self.dir, "var", "lib", "ztune")
        out = subprocess.run([client_cluster.HEAD_BIN, "--data-dir", data, "--print-public-key"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        shutil.copy(os.path.join(data, "head.pub"), os.path.join(etc, "head.pub"))
        worker_public = self.keygen(os.path.join(etc, "worker"))
        admin_public = self.keygen(os.path.join(self.dir, "admin"))
        with open(os.path.join(data, "workers.allow"), "a") as f:
            f.write(f"{worker_public} worker\n")
        with open(os.path.join(data, "clients.allow"), "a") as f:
            f.write(f"{admin_public} admin me\n")

        def service_env(unit, env_file_values):
            env = {}
            for key, value in unit["Service"]:
                if key == "Environment":
                    name, _, v = value.partition("=")
                    env[name] = v
            env.update(env_file_values)  # EnvironmentFile= wins over Environment=
            return env

        head_env = service_env(head_unit, {
            "ZTUNE_CLIENT_ENDPOINT": f"tcp://127.0.0.1:{client_port}",
            "ZTUNE_WORKER_ENDPOINT": f"tcp://127.0.0.1:{worker_port}",
            "ZTUNE_HEAD_ARGS": "--heartbeat-ms 100 --liveness 10"})
        exec_start = dict(head_unit["Service"])["ExecStart"]
        head = self.spawn(self.move_paths(expand_exec(exec_start, head_env)), "head")
        worker_env = service_env(worker_unit, {
            "ZTUNE_HEAD": f"tcp://127.0.0.1:{worker_port}",
            "ZTUNE_WORKER_ARGS": "--cpus 2 --heartbeat-ms 100 --liveness 10"})
        exec_start = dict(worker_unit["Service"])["ExecStart"].replace("%H", socket.gethostname())
        worker = self.spawn(self.move_paths(expand_exec(exec_start, worker_env)), "worker")

        endpoint = f"tcp://127.0.0.1:{client_port}"
        admin_key, head_pub = os.path.join(self.dir, "admin.key"), os.path.join(etc, "head.pub")
        registered = wait_for(lambda: self.workers(endpoint, admin_key, head_pub),
                              client_cluster.START_DEADLINE_S, 0.1)
        self.assertTrue(registered, self.logs())
        self.assertEqual([(w["name"], w["alive"], w["resources_total"]["CPU"])
                          for w in registered], [(socket.gethostname(), True, 2)])
        # systemctl stop: SIGTERM, and both exit cleanly within TimeoutStopSec.
        self.stop_and_expect_clean_exit(worker, int(dict(worker_unit["Service"])["TimeoutStopSec"]))
        self.stop_and_expect_clean_exit(head, int(dict(head_unit["Service"])["TimeoutStopSec"]))

    def test_kubernetes_containers_start_a_working_pair(self):
        with open(os.path.join(DEPLOY, "kubernetes", "ztune.yaml")) as f:
            docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(f)}
        self.assertEqual(set(docs), {("Service", "ztune-head"), ("StatefulSet", "ztune-head"),
                                     ("Deployment", "ztune-worker")})
        head_set = docs[("StatefulSet", "ztune-head")]
        self.assertEqual(head_set["spec"]["replicas"], 1)
        head_pod = head_set["spec"]["template"]["spec"]
        worker_pod = docs[("Deployment", "ztune-worker")]["spec"]["template"]["spec"]
        service_ports = {p["name"]: p["port"] for p in docs[("Service", "ztune-head")]["spec"]["ports"]}
        head_container, worker_container = head_pod["containers"][0], worker_pod["containers"][0]
        self.assertEqual({p["name"]: p["containerPort"] for p in head_container["ports"]},
                         service_ports)

        # The Secrets as the file's comment makes them, mounted where the pods mount them.
        keys = os.path.join(self.dir, "keys")
        os.makedirs(keys)
        self.keygen(os.path.join(keys, "head"))
        worker_public = self.keygen(os.path.join(keys, "worker"))
        me_public = self.keygen(os.path.join(keys, "me"))
        head_etc = os.path.join(self.dir, "head", "etc", "ztune")
        worker_etc = os.path.join(self.dir, "worker", "etc", "ztune")
        os.makedirs(head_etc)
        os.makedirs(worker_etc)
        shutil.copy(os.path.join(keys, "head.key"), os.path.join(head_etc, "head.key"))
        with open(os.path.join(head_etc, "workers.allow"), "w") as f:
            f.write(f"{worker_public} workers\n")
        with open(os.path.join(head_etc, "clients.allow"), "w") as f:
            f.write(f"{me_public} admin me\n")
        shutil.copy(os.path.join(keys, "worker.key"), os.path.join(worker_etc, "worker.key"))
        shutil.copy(os.path.join(keys, "head.pub"), os.path.join(worker_etc, "head.pub"))
        for d in (head_etc, worker_etc):
            for name in os.listdir(d):
                os.chmod(os.path.join(d, name), 0o400)  # the Secrets' defaultMode

        # The pod network becomes loopback on free ports.
        client_port, worker_port = free_tcp_port(), free_tcp_port()

        def localize(args, root):
            out = []
            for a in args:
                for name, path in BINARIES.items():
                    a = a.replace("/usr/local/bin/" + name, path)
                a = a.replace("/etc/ztune", os.path.join(root, "etc", "ztune"))
                a = a.replace("/var/lib/ztune", os.path.join(root, "var", "lib", "ztune"))
                a = a.replace("--work-dir=/work", "--work-dir=" + os.path.join(root, "work"))
                a = a.replace("tcp://0.0.0.0:7500", f"tcp://127.0.0.1:{client_port}")
                a = a.replace("tcp://0.0.0.0:7501", f"tcp://127.0.0.1:{worker_port}")
                a = a.replace("tcp://ztune-head:7501", f"tcp://127.0.0.1:{worker_port}")
                out.append(a)
            return out + ["--heartbeat-ms", "100", "--liveness", "10"]

        head = self.spawn(localize(head_container["command"], os.path.join(self.dir, "head")),
                          "head")
        # The worker container's command wraps its args (the pod's name as --name).
        argv = worker_container["command"] + localize(worker_container["args"],
                                                      os.path.join(self.dir, "worker"))
        env = dict(os.environ, POD_NAME="ztune-worker-5d9c7-abcde")
        worker = self.spawn(argv, "worker", env=env)

        endpoint = f"tcp://127.0.0.1:{client_port}"
        registered = wait_for(
            lambda: self.workers(endpoint, os.path.join(keys, "me.key"),
                                 os.path.join(keys, "head.pub")),
            client_cluster.START_DEADLINE_S, 0.1)
        self.assertTrue(registered, self.logs())
        cpus = next(a for a in worker_container["args"] if a.startswith("--cpus="))
        self.assertEqual([(w["name"], w["alive"], w["resources_total"]["CPU"])
                          for w in registered],
                         [("ztune-worker-5d9c7-abcde", True, float(cpus.split("=")[1]))])
        self.stop_and_expect_clean_exit(worker, worker_pod["terminationGracePeriodSeconds"])
        self.stop_and_expect_clean_exit(head, head_pod["terminationGracePeriodSeconds"])


if __name__ == "__main__":
    unittest.main()
