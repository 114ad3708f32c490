"""ztune.client against a real ztune-head and ztune-worker on loopback.

CURVE as in production (keys from `ztune keygen`, the head's from
`ztune-head --print-public-key`, allow-lists with roles), plus a head started
with --insecure and a tight client rate limit, and no head at all. Waits poll
with deadlines; nothing sleeps for long.
"""

import json
import os
import socket
import subprocess
import tempfile
import time
import unittest
from unittest import mock

import pandas

import client_cluster
from client_cluster import LocalCluster, wait_for

from ztune.client import (Client, ClientError, HeadUnavailable, KeyRefused, WaitTimeout,
                          ZtuneError, load_key_pair, load_public_key)

MISSING = client_cluster.missing_binaries()
# Per-request timeout of the test clients: long enough for a busy machine,
# far below what a hang would take.
TIMEOUT_S = 10.0


def quadratic_spec(lrs, iterations, **extra):
    spec = {"name": "py-quad", "trainable": "quadratic",
            "param_space": {"lr": {"grid_search": list(lrs)}, "x0": 10, "target": 0},
            "metric": "loss", "mode": "min", "stop": {"training_iteration": iterations},
            "seed": 1}
    spec.update(extra)
    return spec


def closed_form_loss(lr, i, x0=10.0, target=0.0):
    x = target + (x0 - target) * (1 - 2 * lr) ** i
    return (x - target) ** 2


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CountingClient(Client):
    """Counts attempts (sends) and the rate-limit refusals it saw."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sends = 0
        self.refusals = []

    def _attempt(self, rid, body, extra_s=0.0):
        self.sends += 1
        reply, hint = super()._attempt(rid, body, extra_s)
        if reply is not None and reply.get("retry_after_ms"):
            self.refusals.append(reply)
        return reply, hint


@unittest.skipIf(MISSING, f"ztune binaries not built: {MISSING}")
class CurveClusterTest(unittest.TestCase):
    """One CURVE head with one 2-CPU worker, shared by the tests of this class."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = c = LocalCluster(cls.addClassCleanup, "curve")
        cls.admin_key = c.add_client("admin", "admin")
        cls.submit_key = c.add_client("alice", "submit")
        cls.read_key = c.add_client("reader", "read")
        cls.stranger_key, cls.stranger_public = c.keygen("stranger")  # in no allow-list
        c.start_head()
        c.start_worker("w0", 2)
        cls.admin = Client(c.client_endpoint, client_key=cls.admin_key, head_key=c.head_pub_file,
                           timeout_s=TIMEOUT_S)
        cls.addClassCleanup(cls.admin.close)

        def registered():
            return any(w["alive"] for w in cls.admin.workers())
        if not wait_for(registered, client_cluster.START_DEADLINE_S):
            raise RuntimeError("the worker did not register:\n" + c.logs())

    def client(self, key, **kwargs):
        kwargs.setdefault("head_key", self.cluster.head_pub_file)
        kwargs.setdefault("timeout_s", TIMEOUT_S)
        c = Client(self.cluster.client_endpoint, client_key=key, **kwargs)
        self.addCleanup(c.close)
        return c

    def test_submit_wait_and_read_everything_back(self):
        lrs = [0.05, 0.1, 0.2, 0.3, 0.4]
        iterations = 12
        exp = self.admin.submit(quadratic_spec(lrs, iterations), name="py-e2e")
        self.assertRegex(exp, r"^e\d+$")
        updates = []
        final = self.admin.wait(exp, poll_s=0.05, timeout_s=45, on_update=updates.append)
        self.assertTrue(final["finished"], self.cluster.logs())
        self.assertEqual(final["status"], "TERMINATED")
        self.assertEqual(final["name"], "py-e2e")
        self.assertEqual(final["trial_counts"]["TERMINATED"], len(lrs))
        self.assertEqual(final["trial_counts"]["ERROR"], 0)
        self.assertGreaterEqual(len(updates), 1)
        self.assertIs(updates[-1]["finished"], True)
        # wait on a finished experiment answers at once, also with timeout 0.
        self.assertTrue(self.admin.wait(exp, timeout_s=0)["finished"])

        status = self.admin.status(exp)
        self.assertEqual([e["experiment_id"] for e in status["experiments"]], [exp])
        self.assertEqual(len(status["trials"]), len(lrs))
        self.assertEqual(status["resources"]["used"]["CPU"], 0)
        self.assertEqual(status["resources"]["total"]["CPU"], 2)
        self.assertEqual(status["workers_alive"], 1)
        self.assertNotIn("next_offset", status)
        # The same trials when status is read two at a time.
        paged_status = self.admin.status(exp, page_size=2)
        self.assertEqual([t["trial_id"] for t in paged_status["trials"]],
                         [t["trial_id"] for t in status["trials"]])

        # One page really is a page...
        page = self.admin.request("trials", experiment_id=exp, limit=2)
        self.assertEqual(len(page["trials"]), 2)
        self.assertEqual((page["offset"], page["next_offset"], page["total"]), (0, 2, len(lrs)))
        # ...and trials() follows next_offset through all of them, in creation order.
        trials = self.admin.trials(exp, page_size=2)
        ids = [t["trial_id"] for t in trials]
        self.assertEqual(ids, [f"{exp}_{i:05d}" for i in range(len(lrs))])
        self.assertEqual(sorted(t["config"]["lr"] for t in trials), sorted(lrs))
        self.assertEqual(len(self.admin.trials(exp, status="TERMINATED")), len(lrs))
        self.assertEqual(self.admin.trials(exp, status=["ERROR", "PENDING"]), [])

        for t in trials:
            lr = t["config"]["lr"]
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual(t["iteration"], iterations)
            # Results three at a time: 4 pages, every iteration exactly once.
            results = self.admin.results(t["trial_id"], page_size=3)
            self.assertEqual([r["training_iteration"] for r in results],
                             list(range(1, iterations + 1)))
            for r in results:
                self.assertAlmostEqual(r["loss"], closed_form_loss(lr, r["training_iteration"]),
                                       delta=1e-9 * max(1.0, r["loss"]))
            self.assertEqual(self.admin.results(t["trial_id"]), results)
        page = self.admin.request("results", trial_id=ids[0], limit=5)
        self.assertEqual((len(page["results"]), page["next_offset"]), (5, 5))

        best = self.admin.best_trial(exp)
        losses = {t["trial_id"]: t["last_result"]["loss"] for t in trials}
        self.assertEqual(best["trial_id"], min(losses, key=losses.get))
        self.assertEqual(best["metric"], "loss")
        self.assertEqual(best["iteration"], iterations)
        self.assertAlmostEqual(best["value"], min(losses.values()))
        self.assertEqual(best["config"], self.admin.trial(best["trial_id"])["config"])

        self.assertIn(exp, [e["experiment_id"] for e in self.admin.experiments()])
        self.assertEqual(self.admin.experiment(exp)["total_trials"], len(lrs))
        workers = self.admin.workers()
        self.assertEqual([(w["name"], w["alive"]) for w in workers], [("w0", True)])
        self.assertEqual(workers[0]["resources_total"]["CPU"], 2)

    def cli(self, *args, key=None):
        """Runs the `ztune` CLI against this cluster; the CompletedProcess."""
        return subprocess.run(
            [client_cluster.CLI_BIN, "--head", self.cluster.client_endpoint,
             "--key", key or self.admin_key, "--head-key", self.cluster.head_pub_file, *args],
            capture_output=True, text=True, timeout=60)

    def test_export_is_one_pandas_read_away(self):
        lrs, iterations = [0.05, 0.2, 0.4], 6
        exp = self.admin.submit(quadratic_spec(lrs, iterations), name="py-export")
        self.assertTrue(self.admin.wait(exp, poll_s=0.05, timeout_s=45)["finished"],
                        self.cluster.logs())
        csv_path = os.path.join(self.cluster.dir, "export.csv")
        out = self.cli("export", exp, "-o", csv_path, key=self.read_key)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stderr.strip(), f"wrote {len(lrs) * iterations} rows "
                                             f"({len(lrs)} trials) to {csv_path}")
        df = pandas.read_csv(csv_path)
        self.assertEqual(list(df.columns[:5]),
                         ["trial_id", "status", "config/lr", "config/target", "config/x0"])
        self.assertEqual(len(df), len(lrs) * iterations)
        self.assertEqual(set(df["status"]), {"TERMINATED"})
        for trial_id, rows in df.groupby("trial_id"):
            lr = self.admin.trial(trial_id)["config"]["lr"]
            self.assertEqual(set(rows["config/lr"]), {lr})
            self.assertEqual(list(rows["training_iteration"]), list(range(1, iterations + 1)))
            for i, loss in zip(rows["training_iteration"], rows["loss"]):
                self.assertAlmostEqual(loss, closed_form_loss(lr, i),
                                       delta=1e-9 * max(1.0, loss))
        # The same rows as JSON lines on stdout, results' structure kept.
        out = self.cli("export", exp, "--format", "jsonl", key=self.read_key)
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        self.assertEqual(len(rows), len(df))
        # Floats are written to round-trip (pandas' default parser may differ
        # in the last bit; its round_trip parser reads them exactly).
        exact = pandas.read_csv(csv_path, float_precision="round_trip")
        self.assertEqual([r["loss"] for r in rows], list(exact["loss"]))
        self.assertEqual(rows[0]["config"], {"lr": rows[0]["config"]["lr"], "x0": 10, "target": 0})
        # An unknown experiment writes nothing.
        missing = os.path.join(self.cluster.dir, "missing.csv")
        out = self.cli("export", "e9999", "-o", missing, key=self.read_key)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("e9999", out.stderr)
        self.assertFalse(os.path.exists(missing))

    def test_mutations_of_a_running_experiment(self):
        alice = self.client(self.submit_key)
        reader = self.client(self.read_key, head_key=self.cluster.head_public)  # as Z85 text
        spec = quadratic_spec([0.1], 1_000_000, param_space={"lr": 0.1, "step_sleep_s": 0.01})
        exp = alice.submit(spec)
        self.addCleanup(self.admin.stop, exp)  # frees the worker if the test fails
        added = alice.add_trial(exp, {"lr": 0.2, "step_sleep_s": 0.01})
        self.assertEqual(added, f"{exp}_00001")
        with self.assertRaises(WaitTimeout) as timeout:
            alice.wait(exp, timeout_s=0)
        self.assertFalse(timeout.exception.experiment["finished"])
        self.assertIsInstance(timeout.exception, TimeoutError)

        first = f"{exp}_00000"
        self.assertTrue(wait_for(lambda: alice.trial(first)["iteration"] >= 1, 20),
                        self.cluster.logs())
        alice.pause(first)
        self.assertTrue(wait_for(lambda: alice.trial(first)["status"] == "PAUSED", 20),
                        self.cluster.logs())
        self.assertTrue(alice.trial(first)["held"])
        paused_at = alice.trial(first)["iteration"]
        resumed = alice.resume(first)
        self.assertEqual(resumed["trial_id"], first)
        # Queued again: the reply says PAUSED until the trial is restarted.
        self.assertIn(resumed["status"], ("PAUSED", "PENDING", "RUNNING"))
        self.assertFalse(alice.trial(first)["held"])
        self.assertTrue(wait_for(lambda: alice.trial(first)["iteration"] > paused_at, 20),
                        self.cluster.logs())

        # A read key may look but not touch; the refusal changes nothing.
        with self.assertRaises(ZtuneError) as refused:
            reader.stop(exp)
        self.assertEqual(refused.exception.code, "PermissionDenied")
        self.assertFalse(reader.experiment(exp)["stopped"])

        stopped = alice.stop(exp)
        self.assertEqual(sorted(stopped), [first, added])
        final = alice.wait(exp, poll_s=0.05, timeout_s=30)
        self.assertTrue(final["stopped"])
        self.assertEqual(final["trial_counts"]["TERMINATED"], 2)
        self.assertEqual(alice.stop(exp), [])
        with self.assertRaises(ZtuneError) as late:
            alice.add_trial(exp, {"lr": 0.3})
        self.assertEqual(late.exception.code, "FailedPrecondition")

    def test_a_read_key_may_not_submit(self):
        reader = self.client(self.read_key)
        before = len(reader.experiments())
        with self.assertRaises(ZtuneError) as e:
            reader.submit(quadratic_spec([0.1], 3))
        self.assertEqual(e.exception.code, "PermissionDenied")
        self.assertIn("may not submit", e.exception.message)
        self.assertIn("role read", e.exception.message)
        self.assertEqual(len(reader.experiments()), before)

    def test_any_role_reads_the_head_stats_and_the_cli_shows_them(self):
        stats = self.client(self.read_key).head_stats()
        self.assertGreater(stats["turns"], 0)
        self.assertGreater(stats["messages_in"], 0)
        self.assertEqual(set(stats["times"]),
                         {"turn", "drain", "handle", "commit", "send", "result_wait"})
        for h in stats["times"].values():
            self.assertEqual(sum(n for _, n in h["buckets"]), h["count"])
        out = self.cli("head-stats", key=self.read_key)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith("Head up "), out.stdout)
        self.assertIn("result_wait", out.stdout)

    def test_head_errors_carry_code_and_message(self):
        for call in (lambda: self.admin.experiment("e9999"),
                     lambda: self.admin.status("e9999"),
                     lambda: self.admin.trials("e9999"),
                     lambda: self.admin.wait("e9999", timeout_s=5)):
            with self.assertRaises(ZtuneError) as e:
                call()
            self.assertEqual(e.exception.code, "NotFound")
            self.assertEqual(e.exception.message, "unknown experiment 'e9999'")
            self.assertEqual(str(e.exception), "NotFound: unknown experiment 'e9999'")
        with self.assertRaises(ZtuneError) as e:
            self.admin.results("e9999_00000")
        self.assertEqual((e.exception.code, e.exception.message),
                         ("NotFound", "unknown trial 'e9999_00000'"))
        with self.assertRaises(ZtuneError) as e:
            self.admin.submit({"trainable": "quadratic", "bogus_key": 1})
        self.assertEqual(e.exception.code, "InvalidArgument")
        self.assertIn("bogus_key", e.exception.message)
        with self.assertRaises(ZtuneError) as e:
            self.admin.request("no_such_op")
        self.assertEqual(e.exception.code, "InvalidArgument")
        self.assertIn("unknown op 'no_such_op'", e.exception.message)

    def test_a_key_not_in_the_allow_list_is_refused_at_once(self):
        stranger = self.client(self.stranger_key)
        started = time.monotonic()
        with self.assertRaises(KeyRefused) as e:
            stranger.experiments()
        self.assertLess(time.monotonic() - started, TIMEOUT_S / 2, "waited for the timeout")
        self.assertIsInstance(e.exception, ZtuneError)
        self.assertEqual(e.exception.code, "PermissionDenied")
        self.assertIn("refused this client's key " + fingerprint(self.stranger_public),
                      e.exception.message)
        # The client stays usable (a new socket per request), refused again.
        with self.assertRaises(KeyRefused):
            stranger.submit(quadratic_spec([0.1], 3))

    def test_a_wrong_head_key_or_no_curve_is_reported(self):
        wrong = self.client(self.admin_key, head_key=self.stranger_public, timeout_s=3)
        with self.assertRaises(HeadUnavailable) as e:
            wrong.experiments()
        self.assertIn("head_key", str(e.exception))
        plain = Client(self.cluster.client_endpoint, insecure=True, timeout_s=3)
        self.addCleanup(plain.close)
        with self.assertRaises(HeadUnavailable) as e:
            plain.experiments()
        self.assertTrue("disagree on security" in str(e.exception)
                        or "require CURVE keys" in str(e.exception), str(e.exception))

    def test_keys_from_the_environment_and_home(self):
        env = {"ZTUNE_HEAD": self.cluster.client_endpoint, "ZTUNE_KEY": self.read_key,
               "ZTUNE_HEAD_KEY": self.cluster.head_pub_file}
        with mock.patch.dict(os.environ, env):
            with Client(timeout_s=TIMEOUT_S) as c:
                self.assertEqual(c.endpoint, self.cluster.client_endpoint)
                self.assertIsInstance(c.experiments(), list)
        home = tempfile.mkdtemp(dir=self.cluster.dir)
        os.makedirs(os.path.join(home, ".ztune"))
        for src, dst in ((self.read_key, "client.key"), (self.cluster.head_pub_file, "head.pub")):
            with open(src) as f, open(os.path.join(home, ".ztune", dst), "w") as g:
                g.write(f.read())
        os.chmod(os.path.join(home, ".ztune", "client.key"), 0o600)
        clean = {k: v for k, v in os.environ.items() if k not in env}
        with mock.patch.dict(os.environ, dict(clean, HOME=home), clear=True):
            with Client(self.cluster.client_endpoint, timeout_s=TIMEOUT_S) as c:
                self.assertIsInstance(c.workers(), list)
            os.chmod(os.path.join(home, ".ztune", "client.key"), 0o644)
            with self.assertRaisesRegex(ValueError, "chmod 600"):
                Client(self.cluster.client_endpoint)
            os.remove(os.path.join(home, ".ztune", "client.key"))
            with self.assertRaisesRegex(ValueError, "no key"):
                Client(self.cluster.client_endpoint)

    def test_key_files_load_as_the_cli_writes_them(self):
        pair = load_key_pair(self.stranger_key)
        self.assertEqual(pair.public, self.stranger_public)
        self.assertNotIn(pair.secret, repr(pair))
        self.assertEqual(load_public_key(self.cluster.head_pub_file), self.cluster.head_public)
        self.assertEqual(load_public_key(self.cluster.head_public), self.cluster.head_public)
        with self.assertRaisesRegex(ValueError, "neither a public key"):
            load_public_key("not-a-key")
        with self.assertRaisesRegex(ValueError, "holds no secret-key"):
            pub = self.stranger_key[:-4] + ".pub"
            os.chmod(pub, 0o600)
            load_key_pair(pub)


def fingerprint(z85):
    import zmq.utils.z85
    return zmq.utils.z85.decode(z85.encode())[:6].hex()


@unittest.skipIf(MISSING, f"ztune binaries not built: {MISSING}")
class InsecureRateLimitedHeadTest(unittest.TestCase):
    """A head with --insecure that allows 2 requests/s (bursts of 4) per connection."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = LocalCluster(cls.addClassCleanup, "plain", insecure=True)
        cls.cluster.start_head("--client-requests-per-s", "2")

    def test_a_rate_limit_refusal_is_waited_out_and_resent(self):
        c = CountingClient(self.cluster.client_endpoint, insecure=True, timeout_s=TIMEOUT_S)
        self.addCleanup(c.close)
        self.assertIsNone(c.public_key)
        for _ in range(7):
            self.assertEqual(c.experiments(), [])
        self.assertGreaterEqual(len(c.refusals), 1, "the burst of 4 should have run out")
        refusal = c.refusals[0]
        self.assertNotIn("rid", refusal)
        self.assertEqual(refusal["error"]["code"], "ResourceExhausted")
        self.assertGreater(refusal["retry_after_ms"], 0)
        self.assertEqual(c.sends, 7 + len(c.refusals))
        # A mutation too: nothing was done, so the resend is safe. This one
        # is then answered by the head itself (the spec is invalid).
        refused = len(c.refusals)
        with self.assertRaises(ZtuneError) as e:
            c.submit({"trainable": "quadratic", "bogus_key": 1})
        self.assertEqual(e.exception.code, "InvalidArgument")
        self.assertEqual(len(c.refusals), refused + 1)

    def test_a_refusal_longer_than_the_timeout_is_raised(self):
        c = Client(self.cluster.client_endpoint, insecure=True, timeout_s=0.1)
        self.addCleanup(c.close)
        with self.assertRaises(ZtuneError) as e:
            for _ in range(20):
                c.workers()
        self.assertEqual(e.exception.code, "ResourceExhausted")
        self.assertGreater(e.exception.retry_after_ms, 0)

    def test_curve_client_to_an_insecure_head_is_reported(self):
        keys = tempfile.mkdtemp(dir=self.cluster.dir)
        key, public = self.cluster.keygen(os.path.join(keys, "me"))
        c = Client(self.cluster.client_endpoint, client_key=key, head_key=public, timeout_s=3)
        self.addCleanup(c.close)
        with self.assertRaises(HeadUnavailable):
            c.workers()


@unittest.skipIf(MISSING, f"ztune binaries not built: {MISSING}")
class NoHeadTest(unittest.TestCase):
    def test_no_head_is_head_unavailable_within_the_timeout(self):
        endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
        c = CountingClient(endpoint, insecure=True, timeout_s=0.3, retries=2)
        self.addCleanup(c.close)
        started = time.monotonic()
        with self.assertRaises(HeadUnavailable) as e:
            c.workers()
        elapsed = time.monotonic() - started
        # Within a timeout this short the refusal may or may not have been seen.
        self.assertIn(str(e.exception), (
            f"no reply from head at {endpoint} within 300 ms (3 attempts); "
            "is ztune-head running there?",
            f"cannot connect to the head at {endpoint}: connection refused for 300 ms "
            f"(3 attempts); is ztune-head running at {endpoint}?"))
        self.assertEqual(c.sends, 3)  # a read: resent, each on a new socket
        self.assertLess(elapsed, 5.0)
        self.assertGreaterEqual(elapsed, 0.9)
        # A mutation is never resent blindly.
        c.sends = 0
        with self.assertRaises(HeadUnavailable):
            c.submit(quadratic_spec([0.1], 3))
        self.assertEqual(c.sends, 1)

    def test_no_head_is_reported_after_the_connect_check_not_the_timeout(self):
        endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
        c = Client(endpoint, insecure=True, timeout_s=60)
        self.addCleanup(c.close)
        started = time.monotonic()
        with self.assertRaises(HeadUnavailable) as e:
            c.workers()
        self.assertLess(time.monotonic() - started, 30)  # far below the timeout
        self.assertEqual(str(e.exception),
                         f"cannot connect to the head at {endpoint}: connection refused for "
                         f"1000 ms; is ztune-head running at {endpoint}?")

    def test_without_keys_nothing_is_sent(self):
        home = tempfile.mkdtemp()
        self.addCleanup(os.rmdir, home)
        with mock.patch.dict(os.environ, {"HOME": home}):
            os.environ.pop("ZTUNE_KEY", None)
            os.environ.pop("ZTUNE_HEAD_KEY", None)
            with self.assertRaisesRegex(ValueError, "no key: pass client_key=FILE"):
                Client("tcp://127.0.0.1:1")
        with self.assertRaises(ClientError):
            c = Client("tcp://127.0.0.1:1", insecure=True)
            c.close()
            c.workers()


class FakeHeadTest(unittest.TestCase):
    """Reply handling that a real head does not provoke on demand: lost and
    stale replies, garbage, unknown error codes. A ROUTER in a thread plays
    the head, answering each request as `script` says."""

    def start(self, script):
        import json
        import threading

        import zmq
        ctx = zmq.Context()
        router = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        seen = []  # (routing id, request)
        stop = threading.Event()

        def serve():
            while not stop.is_set():
                if not router.poll(20):
                    continue
                identity, version, body = router.recv_multipart()
                request = json.loads(body)
                seen.append((identity, request))
                for reply in script(len(seen), request):
                    frames = reply if isinstance(reply, list) else [b"ZTUNE1",
                                                                    json.dumps(reply).encode()]
                    router.send_multipart([identity, *frames])

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()

        def shutdown():
            stop.set()
            thread.join(5)
            router.close(linger=0)
            ctx.term()
        self.addCleanup(shutdown)
        return f"tcp://127.0.0.1:{port}", seen

    def test_a_lost_reply_is_retried_on_a_new_socket_and_stale_ones_are_dropped(self):
        def script(n, request):
            if n == 1:
                return []  # lost
            return [{"rid": request["rid"] - 1, "ok": True, "workers": ["stale"]},
                    [b"ZTUNE1", b"not json"], [b"ZTUNE2", b"{}"],
                    {"rid": request["rid"], "ok": True, "workers": [{"worker_id": "w"}]}]
        endpoint, seen = self.start(script)
        with Client(endpoint, insecure=True, timeout_s=0.5, retries=1) as c:
            self.assertEqual(c.workers(), [{"worker_id": "w"}])
        self.assertEqual(len(seen), 2)
        self.assertNotEqual(seen[0][0], seen[1][0], "a retry must use a new socket")
        self.assertNotEqual(seen[0][1]["rid"], seen[1][1]["rid"])
        self.assertEqual(seen[1][1], {"op": "workers", "rid": seen[1][1]["rid"]})

    def test_unknown_error_codes_are_internal_and_ridless_errors_answer(self):
        def script(n, request):
            if n == 1:
                return [{"rid": request["rid"], "ok": False,
                         "error": {"code": "Weird", "message": "new head"}}]
            return [{"ok": False, "error": {"code": "InvalidArgument", "message": "bad frame"}}]
        endpoint, _ = self.start(script)
        with Client(endpoint, insecure=True, timeout_s=2) as c:
            with self.assertRaises(ZtuneError) as e:
                c.trial("e0001_00000")
            self.assertEqual((e.exception.code, e.exception.message), ("Internal", "Weird: new head"))
            with self.assertRaises(ZtuneError) as e:
                c.trial("e0001_00000")
            self.assertEqual((e.exception.code, e.exception.message),
                             ("InvalidArgument", "bad frame"))


if __name__ == "__main__":
    unittest.main()
