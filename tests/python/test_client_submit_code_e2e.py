"""Submitted code from Python: ztune.project packs a project directory as the
C++ client does, and ztune.client uploads it (put_code) and submits it.

Three parts:
* the archive format, read back here by an independent parser, and what a
  project may not hold (no binaries needed);
* the upload protocol against a fake head (a ROUTER in a thread that keeps
  uploads as head/code_store.cc does): pages, resume, a lost reply resent, a
  FailedPrecondition that starts a new round;
* a real ztune-head and a ztune-worker started with --allow-submitted-code:
  the `ztune` CLI and pack_project give the same archive (the head stores
  what the CLI uploaded under the sha256 Python computes), Client.submit(...,
  working_dir=...) runs the project's function to TERMINATED, and a second
  submit of the same directory sends no page.

Waits poll with deadlines; nothing sleeps for timing.
"""

import base64
import hashlib
import json
import os
import shutil
import stat
import struct
import subprocess
import tempfile
import threading
import unittest
import zlib

import client_cluster
from client_cluster import LocalCluster, wait_for

from ztune.client import CODE_PAGE_BYTES, RETRY_SAFE_OPS, Client, HeadUnavailable, ZtuneError
from ztune.project import left_out, pack_project, project_address

MISSING = client_cluster.missing_binaries()
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 10.0


def write(path, data, mode=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        os.chmod(path, mode)


TRAIN_PY = """\
import ztune
from lib.helper import increment


def train(config):
    value = 0
    while True:
        value += increment(config)
        ztune.report({"value": value, "marker": MARKER})


MARKER = %r
"""


def make_project(root, marker="one", data_bytes=1000):
    """A project: a function trainable importing a module of its own package,
    names whose byte order differs from a directory-by-directory walk
    ("lib" < "lib-extra.txt" < "lib.txt" < "lib/..."), an empty directory, an
    executable file, a non-ASCII name, and what the archive leaves out."""
    write(os.path.join(root, "train.py"), TRAIN_PY % marker)
    write(os.path.join(root, "lib", "__init__.py"), "")
    write(os.path.join(root, "lib", "helper.py"),
          "def increment(config):\n    return config['increment']\n")
    write(os.path.join(root, "lib-extra.txt"), "x")
    write(os.path.join(root, "lib.txt"), "y")
    write(os.path.join(root, "Zeta.txt"), "")
    write(os.path.join(root, "run.sh"), "#!/bin/sh\necho hi\n", mode=0o755)
    write(os.path.join(root, "readonly.txt"), "r", mode=0o444)
    write(os.path.join(root, "donn\u00e9es.txt"), "caf\u00e9")
    write(os.path.join(root, "data", "blob.bin"),
          bytes((i * 2654435761 >> 13) & 0xFF for i in range(data_bytes)))
    os.makedirs(os.path.join(root, "empty"))
    os.chmod(os.path.join(root, "empty"), 0o750)
    # Kept: a file named like a left-out directory, and ".pyc" itself.
    write(os.path.join(root, "sub", ".git"), "gitdir: ../.git/worktrees/sub\n")
    write(os.path.join(root, "sub", ".pyc"), "kept")
    write(os.path.join(root, "sub", "pyc.d", "x"), "kept")
    # Left out, with everything under them.
    write(os.path.join(root, ".git", "HEAD"), "ref: refs/heads/main\n")
    write(os.path.join(root, ".git", "objects", "ab", "cdef"), "blob")
    write(os.path.join(root, "lib", "__pycache__", "helper.cpython-311.pyc"), "stale")
    write(os.path.join(root, "notes.pyc"), "stale")
    write(os.path.join(root, ".hg", "store"), "hg")
    write(os.path.join(root, ".svn", "entries"), "svn")
    write(os.path.join(root, "nb", ".ipynb_checkpoints", "a.ipynb"), "{}")
    write(os.path.join(root, ".ztune-code", "abc", "x"), "cache")
    return root


# Paths make_project keeps (and nothing else).
KEPT = {
    "train.py", "lib", "lib/__init__.py", "lib/helper.py", "lib-extra.txt", "lib.txt",
    "Zeta.txt", "run.sh", "readonly.txt", "donn\u00e9es.txt", "data", "data/blob.bin", "empty",
    "sub", "sub/.git", "sub/.pyc", "sub/pyc.d", "sub/pyc.d/x", "nb",
}


def parse_archive(blob):
    """[(kind, mode, path bytes, data or None)] of an archive, checked field
    by field (the reader of docs/protocol.md "Checkpoint directories")."""
    assert blob[:5] == b"ZTDIR", blob[:5]
    assert blob[5] == 1, "version"
    (crc,) = struct.unpack_from("<I", blob, len(blob) - 4)
    assert crc == zlib.crc32(blob[:-4]), "crc"
    (count,) = struct.unpack_from("<I", blob, 6)
    pos = 10
    entries = []
    for _ in range(count):
        kind, mode, n = struct.unpack_from("<BII", blob, pos)
        pos += 9
        path = blob[pos:pos + n]
        pos += n
        data = None
        if kind == 2:
            (size,) = struct.unpack_from("<Q", blob, pos)
            pos += 8
            data = blob[pos:pos + size]
            assert len(data) == size
            pos += size
        else:
            assert kind == 1, kind
        entries.append((kind, mode, path, data))
    assert pos == len(blob) - 4, "trailing bytes"
    return entries


class TempDirTest(unittest.TestCase):
    def tempdir(self):
        d = tempfile.mkdtemp(prefix="ztune-submit-code-")
        self.addCleanup(shutil.rmtree, d, True)
        return d


class PackProjectTest(TempDirTest):
    def test_the_archive_holds_the_project_sorted_bytewise_without_what_is_left_out(self):
        root = make_project(os.path.join(self.tempdir(), "proj"))
        blob = pack_project(root)
        entries = parse_archive(blob)
        paths = [p for _, _, p, _ in entries]
        self.assertEqual(paths, sorted(paths), "entries in byte order of the path")
        self.assertEqual({p.decode() for p in paths}, KEPT)
        # Byte order of whole paths, not a walk: "lib" < "lib-extra.txt" <
        # "lib.txt" < "lib/__init__.py"; upper case before lower case.
        self.assertLess(paths.index(b"lib.txt"), paths.index(b"lib/__init__.py"))
        self.assertLess(paths.index(b"lib-extra.txt"), paths.index(b"lib.txt"))
        self.assertEqual(paths[0], b"Zeta.txt")
        self.assertIn("donn\u00e9es.txt".encode("utf-8"), paths)
        for kind, mode, path, data in entries:
            full = os.path.join(root, os.fsdecode(path))
            st = os.lstat(full)
            self.assertEqual(mode, st.st_mode & 0o7777, path)
            if kind == 1:
                self.assertTrue(stat.S_ISDIR(st.st_mode), path)
            else:
                with open(full, "rb") as f:
                    self.assertEqual(data, f.read(), path)
        modes = {p: m for _, m, p, _ in entries}
        self.assertEqual(modes[b"run.sh"], 0o755)
        self.assertEqual(modes[b"readonly.txt"], 0o444)
        self.assertEqual(modes[b"empty"], 0o750)
        self.assertEqual(project_address(blob), hashlib.sha256(blob).hexdigest())

    def test_the_same_tree_packs_to_the_same_bytes(self):
        base = self.tempdir()
        a = make_project(os.path.join(base, "a"))
        first = pack_project(a)
        # Times, the directory's own name and path form do not matter.
        os.utime(os.path.join(a, "train.py"), (1, 1))
        self.assertEqual(pack_project(a + "/"), first)
        b = make_project(os.path.join(base, "b"))
        self.assertEqual(pack_project(b), first)
        # Content does.
        write(os.path.join(b, "lib.txt"), "z")
        self.assertNotEqual(pack_project(b), first)
        # Left-out entries do not.
        write(os.path.join(a, ".git", "ORIG_HEAD"), "x")
        write(os.path.join(a, "lib", "other.pyc"), "x")
        self.assertEqual(pack_project(a), first)

    def test_an_empty_directory_is_a_valid_archive(self):
        blob = pack_project(self.tempdir())
        self.assertEqual(parse_archive(blob), [])
        self.assertEqual(len(blob), 14)

    def test_links_special_files_and_non_directories_are_refused_naming_the_path(self):
        root = make_project(os.path.join(self.tempdir(), "proj"))
        os.symlink("train.py", os.path.join(root, "lib", "alias.py"))
        with self.assertRaisesRegex(ValueError, r"lib/alias\.py is a symbolic link"):
            pack_project(root)
        os.remove(os.path.join(root, "lib", "alias.py"))
        os.symlink(root, os.path.join(root, "loop"))  # to a directory: not followed
        with self.assertRaisesRegex(ValueError, r"loop is a symbolic link"):
            pack_project(root)
        os.remove(os.path.join(root, "loop"))
        os.mkfifo(os.path.join(root, "data", "pipe"))
        with self.assertRaisesRegex(ValueError, r"data/pipe is not a regular file"):
            pack_project(root)
        os.remove(os.path.join(root, "data", "pipe"))
        # A link that is left out by its name is never looked at (as in C++).
        os.symlink("nowhere", os.path.join(root, "lib", "gone.pyc"))
        os.symlink("nowhere", os.path.join(root, ".git", "link"))
        self.assertEqual({p.decode() for _, _, p, _ in parse_archive(pack_project(root))}, KEPT)
        with self.assertRaisesRegex(ValueError, r"train\.py is not a directory"):
            pack_project(os.path.join(root, "train.py"))
        with self.assertRaisesRegex(ValueError, r"missing is not a directory"):
            pack_project(os.path.join(root, "missing"))

    def test_a_link_to_the_project_directory_packs_the_directory(self):
        root = make_project(os.path.join(self.tempdir(), "proj"))
        via = os.path.join(self.tempdir(), "via")
        os.symlink(root, via)
        self.assertEqual(pack_project(via), pack_project(root))

    def test_left_out_names(self):
        for name in (".git", "a/.git", ".hg", ".svn", "__pycache__", "x/y/__pycache__",
                     ".ipynb_checkpoints", ".ztune-code", ".ztune-", "a/.ztune-x"):
            self.assertTrue(left_out(name, True), name)
            self.assertFalse(left_out(name, False), name)
        for name in ("a.pyc", "x/y.pyc", b"b.pyc"):
            self.assertTrue(left_out(name, False), name)
            self.assertFalse(left_out(name, True), name)
        for name, is_dir in ((".pyc", False), ("git", True), (".gitignore", False),
                             (".git/x", False), ("a.pyc/b", False), ("ztune-x", True),
                             ("a.py", False)):
            self.assertFalse(left_out(name, is_dir), name)


class CountingClient(Client):
    """Records every request (op and arguments) it is asked to send."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests = []

    def request(self, op, **args):
        self.requests.append((op, args))
        return super().request(op, **args)

    def put_codes(self):
        return [args for op, args in self.requests if op == "put_code"]

    def pages(self):
        return [args for args in self.put_codes() if args.get("data") is not None]


class FakeHead:
    """A ROUTER in a thread that keeps code uploads as head/code_store.cc:
    stored archives, uploads in progress, FailedPrecondition for an offset
    other than where the upload stands. `hook(n, request)` may answer the
    n-th request instead (a list of replies; [] loses it) or return None."""

    def __init__(self, test, hook=None):
        import zmq
        self.stored = {}
        self.uploads = {}
        self.seen = []  # requests in arrival order
        self.hook = hook
        self._ctx = zmq.Context()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        port = self._router.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        test.addCleanup(self._shutdown)

    def _shutdown(self):
        self._stop.set()
        self._thread.join(5)
        self._router.close(linger=0)
        self._ctx.term()

    def _serve(self):
        while not self._stop.is_set():
            if not self._router.poll(20):
                continue
            identity, _, body = self._router.recv_multipart()
            request = json.loads(body)
            self.seen.append(request)
            replies = self.hook(len(self.seen), request) if self.hook else None
            if replies is None:
                replies = [self.answer(request)]
            for reply in replies:
                self._router.send_multipart([identity, b"ZTUNE1", json.dumps(reply).encode()])

    def answer(self, request):
        rid = request["rid"]

        def error(code, message):
            return {"rid": rid, "ok": False, "error": {"code": code, "message": message}}

        if request["op"] == "submit":
            return {"rid": rid, "ok": True, "experiment_id": "e0001", "total_trials": 1}
        if request["op"] != "put_code":
            return error("InvalidArgument", "unknown op")
        code, size, offset = request["code"], request["size"], request["offset"]
        data = base64.b64decode(request["data"]) if request.get("data") is not None else b""
        reply = {"rid": rid, "ok": True, "code": code, "size": size, "stored": False,
                 "next_offset": None}
        if code in self.stored:
            reply.update(stored=True, size=len(self.stored[code]))
            return reply
        if len(data) > CODE_PAGE_BYTES:
            return error("InvalidArgument", "page too large")
        got = self.uploads.get(code)
        if got is None:
            if offset != 0:
                return error("FailedPrecondition", f"no upload of sha256:{code} is in progress")
            got = self.uploads[code] = bytearray()
        if not data:
            reply["next_offset"] = len(got)
            return reply
        if offset != len(got):
            return error("FailedPrecondition",
                         f"the upload of sha256:{code} goes on at offset {len(got)}, not {offset}")
        got += data
        if len(got) < size:
            reply["next_offset"] = len(got)
            return reply
        del self.uploads[code]
        if hashlib.sha256(got).hexdigest() != code:
            return error("InvalidArgument", "sha256 mismatch")
        self.stored[code] = bytes(got)
        reply["stored"] = True
        return reply


class UploadProtocolTest(TempDirTest):
    """Client.upload_archive / upload_project / submit against FakeHead."""

    def client(self, endpoint, **kwargs):
        kwargs.setdefault("timeout_s", 5)
        c = CountingClient(endpoint, insecure=True, **kwargs)
        self.addCleanup(c.close)
        return c

    def archive(self, size):
        return b"ZTDIR" + bytes((i * 7919) & 0xFF for i in range(size - 5))

    def test_pages_of_at_most_one_mib_then_nothing_when_stored(self):
        head = FakeHead(self)
        c = self.client(head.endpoint)
        blob = self.archive(2 * CODE_PAGE_BYTES + 12345)
        hexdigest = hashlib.sha256(blob).hexdigest()
        first = c.upload_archive(blob)
        self.assertEqual(first, {"working_dir": "sha256:" + hexdigest, "sha256": hexdigest,
                                 "size": len(blob), "already_stored": False,
                                 "bytes_sent": len(blob)})
        self.assertEqual(head.stored[hexdigest], blob)
        puts = c.put_codes()
        self.assertNotIn("data", puts[0], "the first request asks where the upload stands")
        self.assertEqual(puts[0]["offset"], 0)
        self.assertEqual([(p["offset"], len(base64.b64decode(p["data"]))) for p in puts[1:]],
                         [(0, CODE_PAGE_BYTES), (CODE_PAGE_BYTES, CODE_PAGE_BYTES),
                          (2 * CODE_PAGE_BYTES, 12345)])
        self.assertTrue(all(p["code"] == hexdigest and p["size"] == len(blob) for p in puts))
        c.requests.clear()
        again = c.upload_archive(blob)
        self.assertEqual((again["already_stored"], again["bytes_sent"]), (True, 0))
        self.assertEqual(len(c.put_codes()), 1)
        self.assertEqual(c.pages(), [])

    def test_an_interrupted_upload_goes_on_where_the_head_says(self):
        head = FakeHead(self)
        blob = self.archive(CODE_PAGE_BYTES + 10)
        hexdigest = hashlib.sha256(blob).hexdigest()
        head.uploads[hexdigest] = bytearray(blob[:CODE_PAGE_BYTES])  # from an earlier try
        c = self.client(head.endpoint)
        result = c.upload_archive(blob)
        self.assertEqual((result["already_stored"], result["bytes_sent"]), (False, 10))
        self.assertEqual([p["offset"] for p in c.pages()], [CODE_PAGE_BYTES])
        self.assertEqual(head.stored[hexdigest], blob)

    def test_a_lost_reply_is_resent_and_a_refused_offset_starts_a_new_round(self):
        self.assertIn("put_code", RETRY_SAFE_OPS)
        blob = self.archive(CODE_PAGE_BYTES + 10)
        hexdigest = hashlib.sha256(blob).hexdigest()
        head = None

        def lose_the_first_page_reply(n, request):
            if n == 2:  # the head takes the first page, its reply is lost
                head.answer(request)
                return []
            return None
        head = FakeHead(self, lose_the_first_page_reply)
        c = self.client(head.endpoint, timeout_s=0.5, retries=2)
        result = c.upload_archive(blob)
        self.assertEqual(head.stored[hexdigest], blob)
        # probe, page 0 (reply lost), page 0 again (FailedPrecondition: the
        # head has it), probe (next_offset 1 MiB), the last page.
        self.assertEqual([(r.get("offset"), r.get("data") is not None) for r in head.seen],
                         [(0, False), (0, True), (0, True), (0, False), (CODE_PAGE_BYTES, True)])
        self.assertEqual(result["bytes_sent"], 10)
        self.assertFalse(result["already_stored"])

    def test_without_retries_a_lost_reply_is_head_unavailable(self):
        head = FakeHead(self, lambda n, request: [] if n == 2 else None)
        c = self.client(head.endpoint, timeout_s=0.3)
        with self.assertRaises(HeadUnavailable):
            c.upload_archive(self.archive(100))

    def test_an_upload_that_keeps_moving_is_aborted_after_five_rounds(self):
        def always_elsewhere(n, request):
            rid = request["rid"]
            if request.get("data") is None:
                return [{"rid": rid, "ok": True, "code": request["code"], "size": request["size"],
                         "stored": False, "next_offset": 0}]
            return [{"rid": rid, "ok": False, "error": {"code": "FailedPrecondition",
                                                        "message": "goes on at offset 7"}}]
        head = FakeHead(self, always_elsewhere)
        c = self.client(head.endpoint)
        with self.assertRaises(ZtuneError) as e:
            c.upload_archive(self.archive(100))
        self.assertEqual(e.exception.code, "Aborted")
        self.assertEqual(len(head.seen), 10)

    def test_head_errors_name_the_project(self):
        def too_big(n, request):
            return [{"rid": request["rid"], "ok": False,
                     "error": {"code": "ResourceExhausted", "message": "more than this head takes"}}]
        head = FakeHead(self, too_big)
        c = self.client(head.endpoint)
        root = make_project(os.path.join(self.tempdir(), "proj"))
        with self.assertRaises(ZtuneError) as e:
            c.upload_project(root)
        self.assertEqual(e.exception.code, "ResourceExhausted")
        self.assertIn(f"cannot upload {root}: more than this head takes", e.exception.message)

    def test_submit_uploads_first_and_leaves_the_callers_spec_alone(self):
        head = FakeHead(self)
        c = self.client(head.endpoint)
        root = make_project(os.path.join(self.tempdir(), "proj"))
        address = "sha256:" + project_address(pack_project(root))
        spec = {"trainable": {"python": "train.py:train"}, "stop": {"training_iteration": 1}}
        before = json.dumps(spec, sort_keys=True)
        self.assertEqual(c.submit(spec, working_dir=root), "e0001")
        self.assertEqual(json.dumps(spec, sort_keys=True), before)
        submitted = [r for r in head.seen if r["op"] == "submit"]
        self.assertEqual(submitted[-1]["spec"], dict(spec, working_dir=address))
        self.assertEqual([op for op, _ in c.requests][-1], "submit")
        self.assertGreaterEqual(len(c.pages()), 1)

        # A path in the spec (relative to the current directory) is uploaded
        # too; the head has it now, so only the probe goes out.
        c.requests.clear()
        with_path = dict(spec, working_dir=os.path.relpath(root), name="again")
        c.submit(with_path)
        self.assertEqual(with_path["working_dir"], os.path.relpath(root))
        self.assertEqual(len(c.put_codes()), 1)
        self.assertEqual(c.pages(), [])
        self.assertEqual(head.seen[-1]["spec"], dict(with_path, working_dir=address))

        # An address is sent as it is; working_dir= overrides the spec's.
        c.requests.clear()
        c.submit(dict(spec, working_dir="sha256:" + "0" * 64))
        c.submit(dict(spec, working_dir="/nonexistent/elsewhere"), working_dir=address)
        self.assertEqual([op for op, _ in c.requests], ["submit", "submit"])
        self.assertEqual(head.seen[-1]["spec"]["working_dir"], address)
        # Without a project the spec goes as it is.
        c.submit({"trainable": "noop"})
        self.assertEqual(head.seen[-1]["spec"], {"trainable": "noop"})

    def test_a_project_that_cannot_be_packed_sends_nothing(self):
        head = FakeHead(self)
        c = self.client(head.endpoint)
        root = make_project(os.path.join(self.tempdir(), "proj"))
        os.symlink("/etc/passwd", os.path.join(root, "data", "passwd"))
        spec = {"trainable": {"python": "train.py:train"}}
        with self.assertRaisesRegex(ValueError, r"data/passwd is a symbolic link"):
            c.submit(spec, working_dir=root)
        with self.assertRaisesRegex(ValueError, r"data/passwd is a symbolic link"):
            c.upload_project(root)
        with self.assertRaisesRegex(ValueError, r"is not a directory"):
            c.submit(dict(spec, working_dir=os.path.join(root, "train.py")))
        with self.assertRaises(ValueError):
            c.submit(spec, working_dir="")
        self.assertEqual(c.requests, [])
        self.assertEqual(head.seen, [])


@unittest.skipIf(MISSING, f"ztune binaries not built: {MISSING}")
class SubmittedCodeClusterTest(TempDirTest):
    """A CURVE head and one worker that runs submitted code, shared by the
    tests of this class (each uses a project of its own)."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = c = LocalCluster(cls.addClassCleanup, "code")
        cls.alice_key = c.add_client("alice", "submit")
        c.start_head()
        c.start_worker("py", 2, "--allow-submitted-code", "--python", "/usr/bin/python3",
                       "--python-path", os.path.join(REPO, "python"))
        cls.alice = CountingClient(c.client_endpoint, client_key=cls.alice_key,
                                   head_key=c.head_pub_file, timeout_s=TIMEOUT_S)
        cls.addClassCleanup(cls.alice.close)

        def registered():
            return any(w["alive"] and "@python" in w.get("trainables", [])
                       for w in cls.alice.workers())
        if not wait_for(registered, client_cluster.START_DEADLINE_S):
            raise RuntimeError("the worker did not register:\n" + c.logs())

    def setUp(self):
        self.alice.requests.clear()

    def spec(self, name):
        return {"name": name, "trainable": {"python": "train.py:train"},
                "param_space": {"increment": {"grid_search": [1, 2]}},
                "stop": {"training_iteration": 3}}

    def expect_ran(self, exp, marker):
        final = self.alice.wait(exp, poll_s=0.05, timeout_s=45)
        logs = self.cluster.logs
        self.assertEqual(final["status"], "TERMINATED", logs())
        self.assertEqual(final["trial_counts"]["TERMINATED"], 2, logs())
        self.assertEqual(final["trial_counts"]["ERROR"], 0, logs())
        self.assertEqual(final["trainable"], "python:train.py:train")
        for t in self.alice.trials(exp):
            results = self.alice.results(t["trial_id"])
            inc = t["config"]["increment"]
            self.assertEqual([r["value"] for r in results], [inc, 2 * inc, 3 * inc])
            self.assertEqual({r["marker"] for r in results}, {marker})
        return final

    def test_the_cli_and_pack_project_upload_the_same_archive(self):
        root = make_project(os.path.join(self.tempdir(), "cli-proj"), marker="cli",
                            data_bytes=CODE_PAGE_BYTES + 7)  # two pages
        blob = pack_project(root)
        hexdigest = project_address(blob)
        spec_file = os.path.join(self.tempdir(), "spec.json")
        with open(spec_file, "w") as f:
            json.dump(self.spec("by-cli"), f)
        c = self.cluster
        out = subprocess.run(
            [client_cluster.CLI_BIN, "--head", c.client_endpoint, "--key", self.alice_key,
             "--head-key", c.head_pub_file, "submit", spec_file, "--working-dir", root],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr + c.logs())
        self.assertIn(f"project {root}: sha256:{hexdigest[:12]} ({len(blob)} bytes, uploaded)",
                      out.stderr)
        exp = out.stdout.strip().splitlines()[-1]
        # The head checked the CLI's bytes against the address it named: the
        # address is this sha256, and Python's bytes are stored already.
        doc = self.alice.experiment(exp)
        self.assertEqual(doc["spec"]["working_dir"], "sha256:" + hexdigest)
        result = self.alice.upload_archive(blob)
        self.assertEqual((result["already_stored"], result["bytes_sent"]), (True, 0))
        self.assertEqual(self.alice.upload_project(root), "sha256:" + hexdigest)
        self.assertEqual(self.alice.pages(), [])
        self.expect_ran(exp, "cli")

    def test_submit_with_a_working_dir_runs_it_and_sends_it_once(self):
        root = make_project(os.path.join(self.tempdir(), "proj"), marker="py")
        address = "sha256:" + project_address(pack_project(root))
        spec = self.spec("by-python")
        exp = self.alice.submit(spec, working_dir=root)
        self.assertNotIn("working_dir", spec)
        self.assertGreaterEqual(len(self.alice.pages()), 1)
        self.assertEqual(self.alice.experiment(exp)["spec"]["working_dir"], address)
        self.expect_ran(exp, "py")
        # What the worker unpacked is the project without what was left out.
        code_dir = os.path.join(self.cluster.dir, "work-py", ".ztune-code", address[7:])
        self.assertTrue(os.path.isfile(os.path.join(code_dir, "lib", "helper.py")),
                        self.cluster.logs())
        self.assertTrue(os.path.isdir(os.path.join(code_dir, "empty")))
        self.assertFalse(os.path.exists(os.path.join(code_dir, ".git")))
        self.assertFalse(os.path.exists(os.path.join(code_dir, "notes.pyc")))

        # Again, with the directory in the spec: one probe, no page.
        self.alice.requests.clear()
        again = self.alice.submit(dict(spec, working_dir=os.path.relpath(root)), name="again")
        self.assertNotEqual(again, exp)
        self.assertEqual(len(self.alice.put_codes()), 1, self.alice.requests)
        self.assertEqual(self.alice.pages(), [])
        self.assertEqual(self.alice.experiment(again)["spec"]["working_dir"], address)
        self.expect_ran(again, "py")

    def test_a_link_in_the_project_sends_nothing(self):
        root = make_project(os.path.join(self.tempdir(), "bad"))
        os.symlink("train.py", os.path.join(root, "alias.py"))
        before = len(self.alice.experiments())
        self.alice.requests.clear()
        with self.assertRaisesRegex(ValueError, r"alias\.py is a symbolic link"):
            self.alice.submit(self.spec("bad"), working_dir=root)
        self.assertEqual(self.alice.requests, [])
        self.assertEqual(len(self.alice.experiments()), before)


if __name__ == "__main__":
    unittest.main()
