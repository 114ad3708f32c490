"""A real ztune-head and ztune-workers on loopback for the client's e2e tests.

The Python counterpart of tests/e2e/cluster.h: kernel-picked ports (the head
writes the endpoints it bound to --endpoints-file), a temp directory for data,
logs and keys, short heartbeats, and keys made the way an operator makes them
(`ztune keygen`, `ztune-head --print-public-key`, allow-list lines). Every
process it starts is killed by the cleanup it registers, also when a test
fails; the directory is removed unless ZTUNE_KEEP_TEST_DIRS is set.

Binaries come from $ZTUNE_BUILD_DIR (CTest sets it; default build/release
of this source tree).
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.environ.get("ZTUNE_BUILD_DIR") or os.path.join(_REPO, "build", "release")
HEAD_BIN = os.path.join(BUILD_DIR, "head", "ztune-head")
WORKER_BIN = os.path.join(BUILD_DIR, "worker", "ztune-worker")
CLI_BIN = os.path.join(BUILD_DIR, "client", "ztune")

# Liveness as in the C++ e2e tests, a little looser: the test machine is busy.
HEARTBEAT_MS = 100
LIVENESS = 10
# How long the head may take to bind, and a worker to register.
START_DEADLINE_S = 20.0


def missing_binaries():
    return [b for b in (HEAD_BIN, WORKER_BIN, CLI_BIN) if not os.access(b, os.X_OK)]


def wait_for(predicate, deadline_s, interval_s=0.05):
    """Polls `predicate` until it is true or `deadline_s` passed; its last value."""
    end = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value or time.monotonic() >= end:
            return value
        time.sleep(interval_s)


class LocalCluster:
    """One head (CURVE on unless insecure) and any number of workers.

    `add_cleanup` is a TestCase's addCleanup or addClassCleanup: the cluster
    registers the removal of its processes and directory there as soon as it
    creates them.
    """

    def __init__(self, add_cleanup, tag, insecure=False):
        self.insecure = insecure
        self.dir = tempfile.mkdtemp(prefix=f"ztune-pyclient-{tag}-")
        if not os.environ.get("ZTUNE_KEEP_TEST_DIRS"):
            add_cleanup(shutil.rmtree, self.dir, True)
        self._add_cleanup = add_cleanup
        self.keys_dir = os.path.join(self.dir, "keys")
        self.logs_dir = os.path.join(self.dir, "logs")
        self.data_dir = os.path.join(self.dir, "data")
        for d in (self.keys_dir, self.logs_dir):
            os.makedirs(d, mode=0o700)
        self.workers_allow = os.path.join(self.keys_dir, "workers.allow")
        self.clients_allow = os.path.join(self.keys_dir, "clients.allow")
        for path in (self.workers_allow, self.clients_allow):
            with open(path, "w") as f:
                f.write("# python client e2e test\n")
        self.head_public = None  # Z85, set by start_head
        self.head_pub_file = None
        self.client_endpoint = None
        self.worker_endpoint = None
        self.worker_key = None
        self._procs = []

    # ---- keys ----

    def keygen(self, name):
        """`ztune keygen --out KEYS/name`: returns (secret file, public Z85)."""
        base = os.path.join(self.keys_dir, name)
        out = subprocess.run([CLI_BIN, "keygen", "--out", base], capture_output=True, text=True,
                             timeout=30)
        if out.returncode != 0:
            raise RuntimeError(f"ztune keygen failed: {out.stdout}{out.stderr}")
        with open(base + ".pub") as f:
            public = next(line.split("=", 1)[1].strip() for line in f
                          if line.startswith("public-key"))
        return base + ".key", public

    def add_client(self, name, role):
        """A client key listed in clients.allow with `role`; its .key path."""
        key, public = self.keygen(name)
        with open(self.clients_allow, "a") as f:
            f.write(f"{public} {role} {name}\n")
        return key

    def add_worker_key(self, name):
        key, public = self.keygen(name)
        with open(self.workers_allow, "a") as f:
            f.write(f"{public} {name}\n")
        return key

    # ---- processes ----

    def _spawn(self, args, log_name, env=None):
        log = open(os.path.join(self.logs_dir, log_name), "ab")
        try:
            # Its own session, so the cleanup can end it and anything it
            # spawned by its process group id.
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        finally:
            log.close()
        self._procs.append(proc)
        self._add_cleanup(self._kill, proc)
        return proc

    @staticmethod
    def _kill(proc):
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)

    def start_head(self, *extra, same_ports=False):
        """Starts the head on kernel-picked loopback ports (with same_ports, on
        the ports of the previous start: a restart that workers reconnect to);
        waits until it serves."""
        args = [HEAD_BIN, "--data-dir", self.data_dir]
        if self.insecure:
            args.append("--insecure")
        else:
            # The operator's way: the head makes its pair, prints the public key.
            out = subprocess.run([HEAD_BIN, "--data-dir", self.data_dir, "--print-public-key"],
                                 capture_output=True, text=True, timeout=30)
            if out.returncode != 0:
                raise RuntimeError(f"--print-public-key failed: {out.stdout}{out.stderr}")
            self.head_public = out.stdout.strip().splitlines()[-1].strip()
            self.head_pub_file = os.path.join(self.data_dir, "head.pub")
            if self.worker_key is None:  # a restart keeps the workers' key
                self.worker_key = self.add_worker_key("worker")
            args += ["--workers-allow", self.workers_allow, "--clients-allow", self.clients_allow]
        endpoints = os.path.join(self.dir, "endpoints.json")
        worker_endpoint, client_endpoint = "tcp://127.0.0.1:*", "tcp://127.0.0.1:*"
        if same_ports and self.worker_endpoint:
            worker_endpoint, client_endpoint = self.worker_endpoint, self.client_endpoint
            os.remove(endpoints)
        args += ["--worker-endpoint", worker_endpoint, "--client-endpoint",
                 client_endpoint, "--endpoints-file", endpoints,
                 "--heartbeat-ms", str(HEARTBEAT_MS), "--liveness", str(LIVENESS),
                 "--log-level", "debug", "--strict-invariants", *extra]
        proc = self._spawn(args, "head.log")

        def ready():
            if proc.poll() is not None:
                raise RuntimeError(f"ztune-head exited with {proc.returncode}:\n{self.logs()}")
            try:
                with open(endpoints) as f:
                    return json.load(f)
            except (OSError, ValueError):
                return None

        bound = wait_for(ready, START_DEADLINE_S)
        if not bound:
            raise RuntimeError(f"ztune-head did not bind within {START_DEADLINE_S} s:\n{self.logs()}")
        self.client_endpoint = bound["client_endpoint"]
        self.worker_endpoint = bound["worker_endpoint"]
        return proc

    def start_worker(self, name, cpus, *extra):
        """Starts a worker with `cpus` CPUs; `extra` flags go last (e.g.
        --allow-submitted-code and its --python, --python-path)."""
        args = [WORKER_BIN, "--head", self.worker_endpoint, "--cpus", str(cpus), "--name", name,
                "--work-dir", os.path.join(self.dir, "work-" + name),
                "--heartbeat-ms", str(HEARTBEAT_MS), "--liveness", str(LIVENESS),
                "--max-backoff-ms", "500", "--log-level", "debug"]
        if self.insecure:
            args.append("--insecure")
        else:
            args += ["--key", self.worker_key, "--head-key", self.head_pub_file]
        args += extra
        # The machine's own CUDA_VISIBLE_DEVICES would change which GPUs the
        # workers advertise (docs/deploy.md).
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        return self._spawn(args, f"worker-{name}.log", env)

    def logs(self, tail=6000):
        """Every log's tail, for failure messages."""
        text = []
        for name in sorted(os.listdir(self.logs_dir)):
            with open(os.path.join(self.logs_dir, name), errors="replace") as f:
                body = f.read()
            if len(body) > tail:
                body = "...\n" + body[-tail:]
            text.append(f"==== {name}\n{body}")
        return "\n".join(text)
