"""A Python client for ``ztune-head``: submit experiments and watch them.

It speaks the client protocol of ``docs/client-protocol.md`` (ZeroMQ DEALER,
two frames ``ZTUNE1`` + JSON, request ids, Lazy Pirate retries for reads,
paging) with the same CURVE keys and the same key sources as the ``ztune``
CLI, so anything the CLI can do a script or a notebook can do too, with
Python objects instead of text::

    from ztune.client import Client, ZtuneError

    spec = {
        "name": "quad", "trainable": "quadratic",
        "param_space": {"lr": {"grid_search": [0.01, 0.1, 0.3]}},
        "metric": "loss", "mode": "min",
        "stop": {"training_iteration": 20},
    }
    # Keys as for the CLI: $ZTUNE_KEY / ~/.ztune/client.key and
    # $ZTUNE_HEAD_KEY / ~/.ztune/head.pub, or client_key=..., head_key=...;
    # Client(insecure=True) for a head started with --insecure.
    with Client("tcp://127.0.0.1:7500") as c:
        exp = c.submit(spec)
        final = c.wait(exp, on_update=lambda e: print(e["trial_counts"]))
        best = c.best_trial(exp)
        print(exp, final["status"], best["trial_id"], best["value"], best["config"])
        for r in c.results(best["trial_id"]):
            print(r["training_iteration"], r["loss"])
        try:
            c.trial("e9999_00000")
        except ZtuneError as e:
            print(e.code, e.message)     # NotFound unknown trial 'e9999_00000'

Submitted code (docs/spec.md "Submitted code"): the trainable is a function or
``ztune.Trainable`` of a project directory that the client packs
(``ztune.project``), uploads once per content (``upload_project``, the
``put_code`` op) and names by its sha256, as ``ztune submit --working-dir``
does; workers started with ``--allow-submitted-code`` run it::

    with Client() as c:
        exp = c.submit({"trainable": {"python": "train.py:train"},
                        "param_space": {"lr": {"grid_search": [0.01, 0.1]}},
                        "stop": {"training_iteration": 10}},
                       working_dir="my-project")   # or spec "working_dir": "my-project"
        c.wait(exp)

Replies are the protocol's documents as plain dicts and lists (ExperimentDoc,
TrialDoc, WorkerDoc, result objects); fields this module does not know are
passed through untouched, because later heads add fields without changing the
protocol version.

Only ``pyzmq`` (Debian: ``python3-zmq``) and the standard library are needed.
The SDK's trainable side does not import this module, so workers and trainables
never need pyzmq.

A ``Client`` and its socket belong to one thread: use one ``Client`` per thread.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import stat
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

import zmq
import zmq.utils.monitor
import zmq.utils.z85

from .project import pack_project, project_address

__all__ = [
    "Client",
    "ClientError",
    "ZtuneError",
    "KeyRefused",
    "HeadUnavailable",
    "WaitTimeout",
    "KeyPair",
    "load_key_pair",
    "load_public_key",
    "DEFAULT_ENDPOINT",
    "PROTOCOL_VERSION",
    "READ_ONLY_OPS",
    "RETRY_SAFE_OPS",
    "CODE_PAGE_BYTES",
    "ERROR_CODES",
]

#: First frame of every request and reply.
PROTOCOL_VERSION = b"ZTUNE1"
#: The head's ``--client-endpoint`` default; ``$ZTUNE_HEAD`` overrides it.
DEFAULT_ENDPOINT = "tcp://127.0.0.1:7500"
#: The largest request JSON frame the head accepts (16 MiB).
MAX_REQUEST_BYTES = 16 << 20
#: Ops that only read head state.
READ_ONLY_OPS = frozenset(
    {"experiments", "experiment", "status", "trials", "trial", "results", "workers",
     "checkpoint", "logs", "wait_trials", "head_stats"}
)
#: The longest a request may wait on the head (``wait_ms`` of add_trial and
#: wait_trials; the head refuses more).
MAX_WAIT_MS = 60_000
#: Ops resent after a timeout (as client/client.cc IsRetrySafeOp): the reads,
#: and put_code, whose page at an offset the head takes once however often it
#: arrives (a copy it already took is refused with FailedPrecondition, and the
#: uploader asks where the upload stands). A resent submit, add_trial, stop,
#: pause or resume could be applied twice: those are never resent.
RETRY_SAFE_OPS = READ_ONLY_OPS | {"put_code"}
#: Project archives travel in pages of at most this many bytes (1 MiB,
#: before base64): the head refuses a larger page.
CODE_PAGE_BYTES = 1 << 20
#: Rounds of an upload: each asks the head where the upload stands and sends
#: from there; a page refused for its offset (another client uploading the
#: same project, a head restart) starts the next (client/project_upload.cc).
_MAX_UPLOAD_ROUNDS = 5
#: The prefix of a spec's working_dir that names an uploaded archive.
_CODE_PREFIX = "sha256:"
#: The head never asks for a longer back-off than this (as client/client.cc):
#: a confused head cannot park the client for long.
_MAX_RETRY_AFTER_MS = 10_000

# A head that refused every connection this long is not there (one that is
# starting binds within it): say so then, not at the end of the timeout.
CONNECT_CHECK_S = 1.0

# The hint of an attempt ended by the connect check.
_REFUSED = "<connection refused>"

_MONITOR_EVENTS = (
    zmq.EVENT_CONNECTED
    | zmq.EVENT_CONNECT_RETRIED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


_monitor_serial = itertools.count(1)

#: The protocol's closed set of error codes; another name is reported as
#: Internal (docs/client-protocol.md, "Error codes").
ERROR_CODES = frozenset({
    "InvalidArgument", "NotFound", "AlreadyExists", "FailedPrecondition", "Unavailable",
    "TimedOut", "Aborted", "Corruption", "IOError", "Internal", "ResourceExhausted",
    "PermissionDenied",
})


# ---- errors ----


class ClientError(Exception):
    """Base of every error this module raises about talking to a head."""


class ZtuneError(ClientError):
    """The head answered ``ok: false``.

    ``code`` is the protocol's error code name (``"NotFound"``,
    ``"InvalidArgument"``, ``"PermissionDenied"``, ``"ResourceExhausted"``, ...;
    ``ERROR_CODES`` lists them; a name outside that set becomes ``"Internal"``
    with the name kept in front of the message, as the protocol asks) and
    ``message`` the head's text, which names
    the offending key or id. ``retry_after_ms`` is set only on a rate-limit
    refusal that outlasted the client's timeout.
    """

    def __init__(self, code: str, message: str, retry_after_ms: Optional[int] = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms


class KeyRefused(ZtuneError):
    """The head refused this client's key at the CURVE handshake.

    The key is not in the head's ``clients.allow`` (or was revoked). It is a
    ``ZtuneError`` with code ``PermissionDenied`` because it is the same kind of
    answer as a role refusal, only given before any request could be read; the
    message carries the key's fingerprint so an operator can find it.
    """

    def __init__(self, message: str):
        super().__init__("PermissionDenied", message)


class HeadUnavailable(ClientError):
    """No answer from the head: nothing listens, the head is stuck or
    restarting, or the connection's handshake failed (wrong head key, CURVE on
    one side only). The message says which when it can tell.

    After this error on a state-changing op the change may or may not have
    happened: look with a read (``experiments()``, ``trial()``) before trying
    again.
    """


class WaitTimeout(ClientError, TimeoutError):
    """``Client.wait`` gave up before the experiment finished.

    ``experiment`` holds the last ExperimentDoc seen.
    """

    def __init__(self, message: str, experiment: Dict[str, Any]):
        super().__init__(message)
        self.experiment = experiment


# ---- keys (the formats of common/security/curve_keys.h) ----


class KeyPair:
    """A CURVE key pair as Z85 text (40 characters each)."""

    __slots__ = ("public", "secret")

    def __init__(self, public: str, secret: str):
        self.public = public
        self.secret = secret

    def __repr__(self) -> str:  # never show the secret
        return f"KeyPair(public={self.public!r})"


def _is_z85_key(text: str) -> bool:
    if len(text) != 40:
        return False
    try:
        return len(zmq.utils.z85.decode(text.encode("ascii"))) == 32
    except (ValueError, UnicodeError, KeyError, IndexError):
        return False


def _parse_key_file(path: str) -> Dict[str, str]:
    """Reads ``name = value`` lines ('#' comments) as ``ztune keygen`` writes them."""
    try:
        with open(path, "rb") as f:
            raw = f.read(64 * 1024 + 1)
    except OSError as e:
        raise ValueError(f"cannot read key file {path}: {e.strerror or e}") from None
    if len(raw) > 64 * 1024:
        raise ValueError(f"{path} is too large to be a key file")
    fields: Dict[str, str] = {}
    for number, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
        stripped = line.strip(" \t\r")
        if not stripped or stripped.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        if not eq:
            raise ValueError(f"{path}:{number}: expected 'public-key = ...' or 'secret-key = ...'")
        name = name.strip(' \t\r"')
        value = value.strip(' \t\r"')
        if name not in ("public-key", "secret-key"):
            raise ValueError(f"{path}:{number}: unknown field '{name}' (known: public-key, secret-key)")
        fields[name] = value
    return fields


def load_key_pair(path: str) -> KeyPair:
    """Reads a secret key file (``NAME.key`` from ``ztune keygen``).

    Refuses a file that group or others may read, as the CLI and ssh do: a
    secret that leaked is no authentication. Checks that the public key in the
    file belongs to the secret one. Raises ``ValueError`` saying what is wrong.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise ValueError(f"cannot read key file {path}: {e.strerror or e}") from None
    if mode & 0o077:
        raise ValueError(
            f"secret key file {path} has mode {stat.S_IMODE(mode):04o}: others can read it. "
            f"Run: chmod 600 {path}"
        )
    fields = _parse_key_file(path)
    secret = fields.get("secret-key", "")
    if not secret:
        raise ValueError(f"{path} holds no secret-key (a .pub file? pass the .key)")
    if not _is_z85_key(secret):
        raise ValueError(f"{path}: secret-key is not 40 characters of Z85 text")
    public = zmq.curve_public(secret.encode("ascii")).decode("ascii")
    if fields.get("public-key") and fields["public-key"] != public:
        raise ValueError(f"{path}: public-key does not belong to secret-key")
    return KeyPair(public, secret)


def load_public_key(key_or_path: str) -> str:
    """The head's public key, given as Z85 text or as a ``.pub``/``.key`` file.

    A file is tried first, as the CLI does: a 40-character path can be valid
    Z85 too. Returns the Z85 text; raises ``ValueError``.
    """
    if os.path.exists(key_or_path):
        public = _parse_key_file(key_or_path).get("public-key", "")
        if not public:
            raise ValueError(f"{key_or_path} holds no public-key")
        if not _is_z85_key(public):
            raise ValueError(f"{key_or_path}: not a CURVE public key (want 40 characters of Z85 text)")
        return public
    if _is_z85_key(key_or_path):
        return key_or_path
    raise ValueError(
        f"'{key_or_path}' is neither a public key (40 characters of Z85) nor a key file"
    )


def _key_source(explicit: Optional[str], env: str, home_file: str) -> Optional[str]:
    """The CLI's order: the argument, else the environment, else ~/.ztune/FILE if it exists."""
    if explicit:
        return explicit
    value = os.environ.get(env, "")
    if value:
        return value
    home = os.environ.get("HOME", "")
    if home:
        path = os.path.join(home, ".ztune", home_file)
        if os.path.exists(path):
            return path
    return None


def _wait_ms(wait_s: float) -> int:
    if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not 0 <= wait_s <= MAX_WAIT_MS / 1000:
        raise ValueError(f"wait_s must be a number of seconds in [0, {MAX_WAIT_MS // 1000}], not {wait_s!r}")
    return int(round(wait_s * 1000))


def _fingerprint(z85: str) -> str:
    """12 hex digits of the raw key, as the head's logs show it."""
    try:
        return zmq.utils.z85.decode(z85.encode("ascii"))[:6].hex()
    except Exception:  # noqa: BLE001 - only for messages
        return "(none)"


# ---- the client ----


class Client:
    """A connection to one ``ztune-head``'s client endpoint.

    Arguments:
      endpoint: the head's ``--client-endpoint``; default ``$ZTUNE_HEAD``, else
        ``tcp://127.0.0.1:7500`` (as the CLI).
      client_key: this client's secret key file (``ztune keygen``); default
        ``$ZTUNE_KEY``, else ``~/.ztune/client.key`` if it exists. Its public
        key must be in the head's ``clients.allow`` with a role.
      head_key: the head's public key, as Z85 text or a file holding it
        (``ztune-head --print-public-key``); default ``$ZTUNE_HEAD_KEY``, else
        ``~/.ztune/head.pub`` if it exists.
      insecure: plain TCP, for a head started with ``--insecure`` (keys are
        then not read).
      timeout_s: how long one attempt waits for its reply (the CLI's 10 s).
      retries: extra attempts after a timeout, for read-only ops and
        ``put_code`` only (``RETRY_SAFE_OPS``), each on a fresh socket (Lazy
        Pirate). The default 0 is the CLI's; pass a few to ride out a head
        restart, e.g. during a long ``wait``.
      context: a ``zmq.Context`` to use; by default the client makes its own
        and terminates it in ``close()``.

    Raises ``ValueError`` when keys are missing or unreadable, naming the
    argument, variable or file to fix: nothing can be sent without them.
    """

    def __init__(
        self,
        endpoint: Optional[str] = None,
        *,
        client_key: Optional[str] = None,
        head_key: Optional[str] = None,
        insecure: bool = False,
        timeout_s: float = 10.0,
        retries: int = 0,
        context: Optional[zmq.Context] = None,
    ):
        if endpoint is None:
            endpoint = os.environ.get("ZTUNE_HEAD") or DEFAULT_ENDPOINT
        if not isinstance(endpoint, str) or "://" not in endpoint:
            raise ValueError(f"invalid endpoint {endpoint!r} (want e.g. tcp://HOST:7500)")
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.endpoint = endpoint
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self._keys: Optional[tuple] = None  # (head public, own KeyPair)
        if insecure:
            if client_key or head_key:
                raise ValueError("insecure=True takes no client_key or head_key (the head has CURVE off)")
        else:
            key_path = _key_source(client_key, "ZTUNE_KEY", "client.key")
            head_source = _key_source(head_key, "ZTUNE_HEAD_KEY", "head.pub")
            if not key_path:
                raise ValueError(
                    "no key: pass client_key=FILE (a key pair made by `ztune keygen`) or set ZTUNE_KEY, "
                    "or insecure=True for a head started with --insecure"
                )
            if not head_source:
                raise ValueError(
                    "no head key: pass head_key=KEY|FILE (`ztune-head --data-dir DIR "
                    "--print-public-key` prints it) or set ZTUNE_HEAD_KEY, or insecure=True for "
                    "a head started with --insecure"
                )
            own = load_key_pair(key_path)
            try:
                server = load_public_key(head_source)
            except ValueError as e:
                raise ValueError(f"head_key: {e}") from None
            self._keys = (server, own)
        if not zmq.has("curve") and self._keys is not None:
            raise ValueError("this libzmq was built without CURVE; use insecure=True")
        self._own_context = context is None
        self._ctx = zmq.Context() if context is None else context
        self._rids = itertools.count(1)
        self._sock: Optional[zmq.Socket] = None
        self._monitor: Optional[zmq.Socket] = None
        self._handshake_done = False
        self._cut = False
        self._refused = False
        self._connected = False
        self._closed = False

    # -- lifecycle --

    def close(self) -> None:
        """Closes the socket with LINGER 0, so an unanswered request never keeps
        the process alive, and terminates the client's own context."""
        if self._closed:
            return
        self._drop_socket()
        if self._own_context:
            self._ctx.term()
        self._closed = True

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "insecure" if self._keys is None else f"key {_fingerprint(self._keys[1].public)}"
        return f"Client({self.endpoint!r}, {mode})"

    @property
    def public_key(self) -> Optional[str]:
        """This client's public key (Z85), None when insecure: what goes into
        ``clients.allow``."""
        return None if self._keys is None else self._keys[1].public

    # -- the raw request --

    def request(self, op: str, **args: Any) -> Dict[str, Any]:
        """Sends one request and returns the head's reply without ``rid``/``ok``.

        The methods below are thin wrappers of this; it is public for ops and
        arguments a newer head adds. Read-only ops and ``put_code``
        (``RETRY_SAFE_OPS``) are resent up to ``retries`` times after a
        timeout, each on a new socket; a rate-limit refusal
        (``ResourceExhausted`` with ``retry_after_ms``: the head did nothing) is
        waited out and resent, any op, within ``timeout_s``.
        """
        if self._closed:
            raise ClientError("the client is closed")
        if "op" in args or "rid" in args:
            raise ValueError('request arguments must not contain "op" or "rid"')
        attempts = 1 + (self.retries if op in RETRY_SAFE_OPS else 0)
        throttle_deadline = time.monotonic() + self.timeout_s
        attempt = 1
        while True:
            rid = next(self._rids)
            try:
                body = json.dumps({"op": op, "rid": rid, **args}, allow_nan=False).encode("utf-8")
            except (TypeError, ValueError) as e:
                raise ValueError(f"request arguments are not JSON: {e}") from None
            if len(body) > MAX_REQUEST_BYTES:
                raise ValueError(
                    f"request is {len(body)} bytes; the head accepts at most {MAX_REQUEST_BYTES} bytes"
                )
            # A request that may wait on the head (wait_ms) gets that long more.
            wait_ms = args.get("wait_ms")
            extra_s = wait_ms / 1000.0 if isinstance(wait_ms, int) and wait_ms > 0 else 0.0
            reply, hint = self._attempt(rid, body, extra_s)
            if reply is None:
                # Lazy Pirate: never reuse a socket after a timeout, so a late
                # reply to this request cannot be taken for a later one's. A
                # refused connection is retried the same way (a head restart).
                self._drop_socket()
                if attempt >= attempts:
                    tries = f" ({attempts} attempts)" if attempts > 1 else ""
                    if hint == _REFUSED:
                        ms = int(min(CONNECT_CHECK_S, self.timeout_s) * 1000)
                        raise HeadUnavailable(
                            f"cannot connect to the head at {self.endpoint}: connection refused "
                            f"for {ms} ms{tries}; is ztune-head running at {self.endpoint}?")
                    ms = int(self.timeout_s * 1000)
                    raise HeadUnavailable(
                        f"no reply from head at {self.endpoint} within {ms} ms{tries}{hint}")
                attempt += 1
                continue
            if reply.get("ok") is True:
                return {k: v for k, v in reply.items() if k not in ("rid", "ok")}
            if reply.get("ok") is not False:
                raise ZtuneError("Internal", 'malformed reply from head: no boolean "ok"')
            error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
            code = error.get("code") if isinstance(error.get("code"), str) else "Internal"
            message = error.get("message") if isinstance(error.get("message"), str) else ""
            if code not in ERROR_CODES:
                code, message = "Internal", f"{code}: {message}"
            retry = reply.get("retry_after_ms")
            if isinstance(retry, int) and not isinstance(retry, bool) and retry > 0:
                wait_s = min(retry, _MAX_RETRY_AFTER_MS) / 1000.0
                if time.monotonic() + wait_s < throttle_deadline:
                    # Over this connection's budget: nothing was done, so even a
                    # mutation may be sent again once the head admits it.
                    time.sleep(wait_s)
                    continue
                raise ZtuneError(code, message, retry_after_ms=retry)
            raise ZtuneError(code, message)

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            if self._keys is not None:
                server, own = self._keys
                sock.setsockopt(zmq.CURVE_SERVERKEY, server.encode("ascii"))
                sock.setsockopt(zmq.CURVE_PUBLICKEY, own.public.encode("ascii"))
                sock.setsockopt(zmq.CURVE_SECRETKEY, own.secret.encode("ascii"))
            # Watched from before connect, so that a refused handshake is seen
            # and reported at once instead of as a silent timeout. A fresh
            # inproc name per socket: a closed monitor's name may linger.
            address = f"inproc://ztune-client-monitor-{id(self):x}-{next(_monitor_serial)}"
            sock.monitor(address, _MONITOR_EVENTS)
            monitor = self._ctx.socket(zmq.PAIR)
            monitor.setsockopt(zmq.LINGER, 0)
            monitor.connect(address)
            try:
                sock.connect(self.endpoint)
            except zmq.ZMQError as e:
                sock.disable_monitor()
                monitor.close(linger=0)
                sock.close(linger=0)
                raise ValueError(f"invalid endpoint {self.endpoint!r}: {e}") from None
            self._sock, self._monitor = sock, monitor
            self._handshake_done = False
            self._cut = False
            self._refused = False
            self._connected = False
        return self._sock

    def _drop_socket(self) -> None:
        if self._sock is not None:
            try:
                self._sock.disable_monitor()
            except zmq.ZMQError:
                pass
        if self._monitor is not None:
            self._monitor.close(linger=0)
            self._monitor = None
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def _attempt(self, rid: int, body: bytes, extra_s: float = 0.0):
        """One send and wait (``timeout_s`` plus ``extra_s``). Returns
        (reply, "") or (None, hint) on timeout."""
        sock = self._socket()
        try:
            sock.send_multipart([PROTOCOL_VERSION, body], flags=zmq.NOBLOCK)
        except zmq.Again:
            # A DEALER refuses only with a full queue: nothing gets through.
            return None, "; cannot queue the request (is ztune-head running there?)"
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        start = time.monotonic()
        deadline = start + self.timeout_s + extra_s
        check_at = start + min(CONNECT_CHECK_S, self.timeout_s)
        while True:
            now = time.monotonic()
            if not self._connected and self._refused and now >= check_at:
                return None, _REFUSED
            left = deadline - now
            if left <= 0:
                return None, self._timeout_hint()
            if not self._connected and now < check_at:
                left = min(left, check_at - now)
            ready = dict(poller.poll(left * 1000))
            if self._monitor in ready:
                self._read_monitor()
            if sock not in ready:
                continue
            # Drain what is ready: the reply may sit behind stale ones.
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                reply = self._match(frames, rid)
                if reply is not None:
                    return reply, ""

    def _read_monitor(self) -> None:
        """Turns a refused handshake into an error now, as client/client.cc does."""
        while True:
            try:
                msg = zmq.utils.monitor.recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            event, value = msg["event"], msg["value"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._handshake_done = True
            elif event == zmq.EVENT_CONNECTED:
                self._connected = True
            elif event == zmq.EVENT_CONNECT_RETRIED:
                self._refused = True
            elif event == zmq.EVENT_DISCONNECTED:
                self._cut = True
            elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self._drop_socket()
                fp = _fingerprint(self._keys[1].public) if self._keys else "(none)"
                raise KeyRefused(
                    f"the head at {self.endpoint} refused this client's key {fp}: it is not in "
                    f"the head's clients allow-list, or it was revoked"
                )
            elif event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
                self._drop_socket()
                if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
                    why = ("the head and this side disagree on security (one uses CURVE, the "
                           "other does not: check insecure on both)")
                elif value in (zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC,
                               zmq.PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE):
                    why = "the CURVE handshake failed (a wrong head public key?)"
                else:
                    why = f"the handshake failed (protocol error {value})"
                raise HeadUnavailable(f"cannot talk to the head at {self.endpoint}: {why}")
            elif event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                self._drop_socket()
                raise HeadUnavailable(
                    f"cannot talk to the head at {self.endpoint}: the head closed the connection "
                    f"during the handshake: {self._closed_hint()}"
                )

    def _closed_hint(self) -> str:
        if self._keys is not None:
            return ("is the head's public key (head_key) the right one? (or was the head started "
                    "with --insecure?)")
        return ("the head may require CURVE keys: pass client_key and head_key (or start the head with "
                "--insecure)")

    def _timeout_hint(self) -> str:
        if self._monitor is not None:
            self._read_monitor()  # may raise: a refused handshake says more
        if not self._handshake_done and self._cut:
            return f": the head closed every connection during the handshake ({self._closed_hint()})"
        if not self._handshake_done:
            return "; is ztune-head running there?"
        return ""

    @staticmethod
    def _match(frames: List[bytes], rid: int) -> Optional[Dict[str, Any]]:
        """The reply to `rid`, or None for stale and malformed messages."""
        if len(frames) == 3 and frames[0] == b"":
            frames = frames[1:]  # a REQ-style delimiter
        if len(frames) != 2 or frames[0] != PROTOCOL_VERSION:
            return None
        try:
            reply = json.loads(frames[1])
        except ValueError:
            return None
        if not isinstance(reply, dict):
            return None
        if "rid" not in reply:
            # The head could not read the request (or refused it unread, over
            # the rate limit): such an error has no rid. One request is in
            # flight on this socket, so it is this one's answer.
            return reply if reply.get("ok") is False else None
        got = reply["rid"]
        if isinstance(got, bool) or not isinstance(got, int) or got != rid:
            return None  # stale: an earlier request's late reply
        return reply

    def _all_pages(self, op: str, list_key: str, page_size: Optional[int], **args: Any) -> Iterator[Dict[str, Any]]:
        """Yields every page's reply of a paged read, asking on with
        ``offset = next_offset`` until it is null (docs: "Paging")."""
        offset = 0
        while True:
            page_args = dict(args, offset=offset)
            if page_size is not None:
                page_args["limit"] = int(page_size)
            reply = self.request(op, **page_args)
            yield reply
            nxt = reply.get("next_offset")
            if not isinstance(nxt, int) or isinstance(nxt, bool) or nxt <= offset:
                return
            offset = nxt

    # -- mutations (never resent after a timeout, but put_code) --

    def submit(
        self,
        spec: Dict[str, Any],
        name: Optional[str] = None,
        working_dir: Union[None, str, "os.PathLike[str]"] = None,
    ) -> str:
        """Submits an experiment spec (docs/spec.md); returns its experiment id.

        ``name`` overrides ``spec["name"]`` without changing the caller's dict.
        The head validates the whole spec: a bad one raises ``ZtuneError``
        ``InvalidArgument`` naming the key; a trainable no registered worker
        hosts is refused too, so start workers first. After ``HeadUnavailable``
        the experiment may exist: look with ``experiments()`` before submitting
        again.

        Submitted code (``"trainable": {"python": "FILE:NAME"}``): the project
        directory ``working_dir``, or else a spec ``"working_dir"`` that is a
        path (relative to the current directory) and not ``"sha256:..."``, is
        packed and uploaded first (``upload_project``: nothing is sent when
        the head has it), and the spec goes to the head with ``"working_dir":
        "sha256:<hex>"``, again without changing the caller's dict.
        ``working_dir`` may also be such a ``"sha256:..."`` address
        (``upload_project``'s return), which is used as it is. A project that
        cannot be packed (a symbolic link in it, not a directory) raises
        ``ValueError`` before anything is sent.
        """
        if not isinstance(spec, dict):
            raise TypeError(f"spec must be a dict, not {type(spec).__name__}")
        if name is not None:
            spec = dict(spec, name=name)
        project: Optional[str] = None
        if working_dir is not None:
            project = os.fspath(working_dir)
            if not isinstance(project, str) or not project:
                raise ValueError("working_dir must be a non-empty path or \"sha256:...\"")
        else:
            given = spec.get("working_dir")
            if isinstance(given, str) and given and not given.startswith(_CODE_PREFIX):
                project = given
        if project is not None:
            address = project if project.startswith(_CODE_PREFIX) else self.upload_project(project)
            spec = dict(spec, working_dir=address)
        return self.request("submit", spec=spec)["experiment_id"]

    def upload_project(self, directory: Union[str, "os.PathLike[str]"]) -> str:
        """Packs the project ``directory`` (``ztune.project.pack_project``:
        the same bytes as ``ztune submit --working-dir``) and uploads it unless
        the head has it; returns its address ``"sha256:<64 hex digits>"``, the
        value of a spec's ``working_dir``.

        ``ValueError`` (naming the path) for a directory that cannot be packed,
        before anything is sent; ``ZtuneError`` for the head's refusal, e.g.
        ``ResourceExhausted`` for a project over its ``--max-code-bytes`` or
        ``PermissionDenied`` for a key with the read role.
        ``upload_archive`` does the same for bytes packed already and says
        whether anything was sent.
        """
        path = os.fspath(directory)
        archive = pack_project(path)
        try:
            return self.upload_archive(archive)["working_dir"]
        except ZtuneError as e:
            if type(e) is not ZtuneError:  # KeyRefused says all there is
                raise
            raise ZtuneError(e.code, f"cannot upload {path}: {e.message}", e.retry_after_ms) from e

    def upload_archive(self, archive: bytes) -> Dict[str, Any]:
        """Uploads a project archive (``ztune.project.pack_project``'s bytes)
        with the ``put_code`` op, page by page (docs/client-protocol.md
        "put_code"), unless the head stores it already; resumes where the head
        says an upload stands. Returns ``{"working_dir": "sha256:<hex>",
        "sha256": hex, "size", "already_stored", "bytes_sent"}``:
        ``already_stored`` is true when the head had the archive and no page
        was sent.

        Safe to repeat, also after ``HeadUnavailable``: the head keeps an
        archive once under its sha256. A page the head reports at another
        offset (``FailedPrecondition``: another client uploads the same
        project, or the head restarted and forgot the upload) starts a new
        round from the head's answer; ``ZtuneError`` ``Aborted`` after 5.
        """
        if not isinstance(archive, (bytes, bytearray, memoryview)):
            raise TypeError(f"archive must be bytes, not {type(archive).__name__}")
        data = memoryview(archive).cast("B")
        size = data.nbytes
        hexdigest = project_address(data)
        result = {"working_dir": _CODE_PREFIX + hexdigest, "sha256": hexdigest, "size": size,
                  "already_stored": False, "bytes_sent": 0}

        def put(offset: int, page: Optional[memoryview] = None) -> Dict[str, Any]:
            args: Dict[str, Any] = {"code": hexdigest, "size": size, "offset": offset}
            if page is not None:
                args["data"] = base64.b64encode(page).decode("ascii")
            return self.request("put_code", **args)

        for _ in range(_MAX_UPLOAD_ROUNDS):
            reply = put(0)  # where does the upload stand?
            if reply.get("stored") is True:
                result["already_stored"] = result["bytes_sent"] == 0
                return result
            while True:
                offset = reply.get("next_offset")
                if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < size:
                    raise ZtuneError("Internal", "the head's put_code reply has no usable "
                                     f"next_offset: {json.dumps(reply)}")
                n = min(CODE_PAGE_BYTES, size - offset)
                try:
                    reply = put(offset, data[offset:offset + n])
                except ZtuneError as e:
                    if e.code != "FailedPrecondition":
                        raise
                    break  # the upload moved on (or was forgotten): ask again
                result["bytes_sent"] += n
                if reply.get("stored") is True:
                    return result
        raise ZtuneError("Aborted", f"the upload of sha256:{hexdigest} was interrupted "
                         f"{_MAX_UPLOAD_ROUNDS} times; try again")

    def add_trial(
        self,
        experiment_id: str,
        config: Dict[str, Any],
        restore_from: Optional[str] = None,
        *,
        wait_s: Optional[float] = None,
    ) -> str:
        """Adds one trial with exactly ``config`` to a running experiment;
        returns its trial id. ``restore_from``: start from that trial's newest
        persistent checkpoint. ``FailedPrecondition`` once the experiment
        finished (or, with ``search_alg`` external, once all its
        ``num_samples`` configs were added).

        ``wait_s``: add it only into a free trial slot (fewer live trials than
        the experiment's max_concurrent, fewer PENDING trials than the head's
        max_pending_trials), waiting on the head up to ``wait_s`` seconds (at
        most 60) for one; ``ZtuneError`` code ``Unavailable`` when none came
        free (nothing was added). What an ask/tell searcher calls before it
        asks for the next config."""
        if not isinstance(config, dict):
            raise TypeError(f"config must be a dict, not {type(config).__name__}")
        args: Dict[str, Any] = {"experiment_id": experiment_id, "config": config}
        if restore_from is not None:
            args["restore_from"] = restore_from
        if wait_s is not None:
            args["wait_ms"] = _wait_ms(wait_s)
        return self.request("add_trial", **args)["trial_id"]

    def wait_trials(self, trial_ids: Iterable[str], wait_s: float = 0.0) -> Dict[str, Any]:
        """Which of ``trial_ids`` (1 to 1,000) have finished:
        ``{"finished": [TrialDoc...], "unfinished": [ids]}``, in the order
        given. With ``wait_s`` the head answers as soon as one of them has
        finished, or after ``wait_s`` seconds (at most 60) with none. A
        finished trial's ``last_result`` holds its final metric."""
        ids = list(trial_ids)
        return self.request("wait_trials", trial_ids=ids, wait_ms=_wait_ms(wait_s))

    def stop(self, id: str) -> List[str]:  # noqa: A002 - the protocol's name
        """Stops a trial, or every unfinished trial of an experiment (which then
        gets no more). Returns the trial ids this call stopped (empty when all
        had finished already)."""
        return list(self.request("stop", id=id)["stopped"])

    def pause(self, trial_id: str) -> Dict[str, Any]:
        """Pauses a trial (memory checkpoint, frees its resources). Returns
        ``{"trial_id", "status"}``; status is RUNNING until the pause completes,
        then PAUSED."""
        return self.request("pause", trial_id=trial_id)

    def resume(self, id: str, *, errored: Optional[str] = None, unfinished: Optional[bool] = None) -> Dict[str, Any]:  # noqa: A002
        """Resumes a paused trial, or applies resume policies to an experiment.

        For a trial: returns ``{"trial_id", "status"}``. For an experiment:
        ``errored`` ``"retry"`` (ERROR trials go back to the queue with their
        ids, from their newest checkpoint) or ``"restart"`` (fresh trials with
        new ids); ``unfinished=False`` terminates every unfinished trial.
        Returns ``{"experiment_id", "retried", "restarted", "terminated"}``.
        The head decides by the id which one it is; the policy arguments are
        ignored for a trial.
        """
        if errored not in (None, "retry", "restart"):
            raise ValueError('errored must be None, "retry" or "restart"')
        args: Dict[str, Any] = {"id": id}
        if errored is not None:
            args["errored"] = errored
        if unfinished is not None:
            args["unfinished"] = bool(unfinished)
        return self.request("resume", **args)

    # -- reads (resent after a timeout, up to `retries` times) --

    def experiments(self) -> List[Dict[str, Any]]:
        """Every experiment's ExperimentDoc."""
        return list(self.request("experiments")["experiments"])

    def experiment(self, experiment_id: str) -> Dict[str, Any]:
        """One experiment's ExperimentDoc (no trials: the cheap read ``wait``
        polls)."""
        return self.request("experiment", experiment_id=experiment_id)["experiment"]

    def status(self, experiment_id: Optional[str] = None, *, page_size: Optional[int] = None) -> Dict[str, Any]:
        """The progress report: ``{"experiments", "trials", "resources",
        "workers_alive"}`` for one experiment or (None) all of them, with the
        trials of every page (the head answers at most 500 per request).
        ``experiments``, ``resources`` and ``workers_alive`` are from the last
        page."""
        args: Dict[str, Any] = {}
        if experiment_id is not None:
            args["experiment_id"] = experiment_id
        merged: Optional[Dict[str, Any]] = None
        for reply in self._all_pages("status", "trials", page_size, **args):
            if merged is None:
                merged = reply
                merged["trials"] = list(reply.get("trials") or [])
            else:
                merged["trials"].extend(reply.get("trials") or [])
                for key in ("experiments", "resources", "workers_alive"):
                    if key in reply:
                        merged[key] = reply[key]
        assert merged is not None
        for key in ("offset", "next_offset", "total"):
            merged.pop(key, None)
        return merged

    def iter_trials(self, experiment_id: str, *, page_size: Optional[int] = None) -> Iterator[Dict[str, Any]]:
        """Yields the experiment's TrialDocs in creation order, fetching one page
        at a time (``page_size`` per request, at most the head's 500). Pages are
        read at different moments: a trial may change between them, but none
        is listed twice or missed."""
        for reply in self._all_pages("trials", "trials", page_size, experiment_id=experiment_id):
            yield from reply.get("trials") or []

    def trials(
        self,
        experiment_id: str,
        status: Union[None, str, Iterable[str]] = None,
        *,
        page_size: Optional[int] = None,
    ) -> List[Dict[str, Any]]:
        """Every TrialDoc of the experiment (all pages), optionally only those
        whose status is ``status`` (a name like ``"ERROR"`` or several). The
        protocol has no such filter: it is applied here."""
        wanted = None
        if status is not None:
            wanted = {status} if isinstance(status, str) else set(status)
        return [
            t for t in self.iter_trials(experiment_id, page_size=page_size)
            if wanted is None or t.get("status") in wanted
        ]

    def trial(self, trial_id: str) -> Dict[str, Any]:
        """One trial's TrialDoc."""
        return self.request("trial", trial_id=trial_id)["trial"]

    def iter_results(self, trial_id: str, *, page_size: Optional[int] = None) -> Iterator[Dict[str, Any]]:
        """Yields the trial's results in training_iteration order, one page per
        request (``page_size``, at most the head's 1,000)."""
        for reply in self._all_pages("results", "results", page_size, trial_id=trial_id):
            yield from reply.get("results") or []

    def results(self, trial_id: str, *, page_size: Optional[int] = None) -> List[Dict[str, Any]]:
        """Every stored result of the trial (all pages), each iteration once."""
        return list(self.iter_results(trial_id, page_size=page_size))

    def logs(self, trial_id: str, *, stream: str = "stdout", attempt: Optional[int] = None) -> bytes:
        """What the trial's process trainable wrote to ``stream`` ("stdout" or
        "stderr") so far: every attempt the head remembers, oldest first, or
        only ``attempt``; each attempt's part starts with its header line. Read
        page by page through the head from the workers that ran the attempts
        (``ztune logs`` without ``--follow``)."""
        def page(a: Optional[int], offset: int) -> Dict[str, Any]:
            args: Dict[str, Any] = {"trial_id": trial_id, "stream": stream, "offset": offset}
            if a is not None:
                args["attempt"] = a
            return self.request("logs", **args)

        first = page(attempt, 0)
        attempts = [attempt] if attempt is not None else sorted(first.get("attempts") or [])
        out = bytearray()
        for a in attempts:
            offset = 0
            while True:
                reply = first if (a == first.get("attempt") and offset == 0) else page(a, offset)
                out += base64.b64decode(reply["data"])
                offset = reply["next_offset"]
                if offset >= reply["size"]:
                    break
        return bytes(out)

    def workers(self) -> List[Dict[str, Any]]:
        """Every WorkerDoc the head knows, dead ones too (``alive``)."""
        return list(self.request("workers")["workers"])

    def head_stats(self) -> Dict[str, Any]:
        """The head's counters and the time histograms of its loop
        (docs/client-protocol.md, ``head_stats``): ``{"uptime_s", "turns",
        "commits", "messages_in", "result_batches", ..., "times": {"turn",
        "drain", "handle", "commit", "send", "result_wait"}}``, each time a
        ``{"count", "p50_ms", "p99_ms", "max_ms", "buckets"}`` counted since
        the head started."""
        return dict(self.request("head_stats")["head"])

    def dashboard_login(self) -> Dict[str, Any]:
        """A link to the head's web dashboard (docs/dashboard.md): ``{"url",
        "login", "expires_in_s", "user"}``. With logins (the dashboard on
        HTTPS) ``url`` logs one browser in as this client's key, once, within
        ``expires_in_s`` seconds; otherwise it is the open dashboard's address
        and ``login`` is False. A dashboard bound to every address (0.0.0.0,
        [::]) is named by the host this client reaches the head at."""
        reply = dict(self.request("dashboard_login"))
        reply.pop("rid", None)
        reply.pop("ok", None)
        url = reply.get("url", "")
        m = re.match(r"^(https?://)(0\.0\.0\.0|\[::\]|\[::0\])(:.*)$", url)
        host = re.match(r"^tcp://(.+):\d+$", self.endpoint)
        if m and host and host.group(1) not in ("*", "0.0.0.0", "[::]"):
            reply["url"] = m.group(1) + host.group(1) + m.group(3)
        return reply

    def best_trial(self, experiment_id: str) -> Optional[Dict[str, Any]]:
        """The head's best trial of the experiment: ``{"trial_id", "metric",
        "value", "iteration", "config"}`` (the trial whose last result is best by
        the spec's metric and mode), or None without a metric or before any
        result. Call ``trial(best["trial_id"])`` for the whole TrialDoc."""
        return self.experiment(experiment_id).get("best_trial")

    def wait(
        self,
        experiment_id: str,
        poll_s: float = 1.0,
        timeout_s: Optional[float] = None,
        on_update: Optional[Callable[[Dict[str, Any]], None]] = None,
    ) -> Dict[str, Any]:
        """Polls until the experiment is finished (every trial TERMINATED or
        ERROR and no more to come) and returns its final ExperimentDoc, also
        when some trials ended in ERROR: check ``trial_counts["ERROR"]``.

        ``on_update(doc)`` is called after the first poll and whenever the
        experiment's status or trial counts change. ``timeout_s`` (0 = look
        once) raises ``WaitTimeout`` carrying the last doc; None waits
        indefinitely. A head that stops answering raises ``HeadUnavailable``
        (give the client ``retries`` to ride out a restart).
        """
        if poll_s <= 0:
            raise ValueError("poll_s must be positive")
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        last_seen = None
        while True:
            doc = self.experiment(experiment_id)
            seen = (doc.get("status"), json.dumps(doc.get("trial_counts"), sort_keys=True))
            if on_update is not None and seen != last_seen:
                on_update(doc)
            last_seen = seen
            if doc.get("finished") is True:
                return doc
            sleep_s = poll_s
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    counts = doc.get("trial_counts") or {}
                    shown = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
                    raise WaitTimeout(
                        f"experiment {experiment_id} not finished after {timeout_s:g} s "
                        f"({shown or 'no trials yet'})",
                        doc,
                    )
                sleep_s = min(sleep_s, left)
            time.sleep(sleep_s)
