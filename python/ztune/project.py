"""Project archives: a working directory packed for submitted code.

A spec may name a trainable in code the client uploads (``"trainable":
{"python": "train.py:train"}``, docs/spec.md "Submitted code"). The client
packs the project directory into one archive, addresses it by its sha256 and
uploads it (``ztune.client.Client.upload_project``, ``ztune submit
--working-dir``); workers started with ``--allow-submitted-code`` fetch and
unpack it. This module packs exactly as the C++ client does
(common/checkpoint/directory_archive.cc ``PackDirectory`` with
client/project_upload.cc ``LeftOutOfProject``): the same directory gives the
same bytes, hence the same address, from Python and from the CLI, so a project
the CLI uploaded is not sent again, and back.

The format (docs/protocol.md "Checkpoint directories"; integers
little-endian)::

    magic "ZTDIR" | version u8 = 1 | entry count u32
    per entry, in byte order of the relative path:
      kind u8 (1 directory, 2 file) | mode u32 (st_mode & 0o7777) |
      path: u32 length + bytes ('/'-separated, relative) |
      file only: size u64 + bytes
    crc32 (IEEE, zlib.crc32) u32 of every preceding byte

Directories are entries too (an empty one survives); the packed directory
itself is not. No times, owners or other metadata go in, so equal trees pack
to equal bytes. Left out (``left_out``), a directory with everything under
it: ``.git``, ``.hg``, ``.svn``, ``__pycache__``, ``.ipynb_checkpoints`` and
ztune's own ``.ztune-*`` directories, and files ending in ``.pyc``. A symbolic
link or special file (FIFO, socket, device) is refused: a link could point
outside the project, and a worker would not recreate it faithfully.

Only the standard library is used.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import zlib
from typing import List, Tuple, Union

__all__ = [
    "pack_project",
    "project_address",
    "left_out",
    "MAX_PROJECT_BYTES",
    "MAX_ENTRIES",
    "MAX_PATH_BYTES",
]

_MAGIC = b"ZTDIR"
_VERSION = 1
_KIND_DIR = 1
_KIND_FILE = 2

#: The largest project the client packs (client/project_upload.h
#: kMaxProjectBytes: what a worker accepts). A head takes only what its
#: ``--max-code-bytes`` allows (default 64 MiB) and says so before any byte
#: is sent.
MAX_PROJECT_BYTES = 4 << 30
#: Limits of the archive format (common/checkpoint/directory_archive.h).
MAX_ENTRIES = 1_000_000
MAX_PATH_BYTES = 4096

_LEFT_OUT_DIRS = frozenset({b".git", b".hg", b".svn", b"__pycache__", b".ipynb_checkpoints"})


def left_out(rel_path: Union[str, bytes], is_dir: bool) -> bool:
    """Whether the project archive leaves out the entry ``rel_path``
    ('/'-separated, relative to the project directory); for a directory, with
    everything under it. Only the last component counts: version-control
    directories (``.git``, ``.hg``, ``.svn``), Python caches (``__pycache__``,
    ``*.pyc`` files), ``.ipynb_checkpoints`` and ``.ztune-*`` directories."""
    path = os.fsencode(rel_path)
    name = path.rpartition(b"/")[2]
    if is_dir:
        return name in _LEFT_OUT_DIRS or name.startswith(b".ztune-")
    return len(name) > 4 and name.endswith(b".pyc")


def _display(path: bytes) -> str:
    return os.fsdecode(path)


def _collect(root: bytes) -> List[Tuple[bytes, int, int, int]]:
    """(relative path, kind, mode, size) of every entry kept, unsorted."""
    entries: List[Tuple[bytes, int, int, int]] = []
    pending = [b""]  # relative directories still to list ("" is the root)
    while pending:
        rel_dir = pending.pop()
        abs_dir = os.path.join(root, rel_dir) if rel_dir else root
        try:
            with os.scandir(abs_dir) as it:
                names = [e.name for e in it]
        except OSError as e:
            raise OSError(e.errno, f"cannot list project directory {_display(abs_dir)}: "
                          f"{e.strerror or e}") from None
        for name in names:
            rel = rel_dir + b"/" + name if rel_dir else name
            full = os.path.join(root, rel)
            try:
                st = os.lstat(full)
            except OSError as e:
                raise OSError(e.errno, f"cannot stat {_display(full)}: {e.strerror or e}") from None
            is_dir = stat.S_ISDIR(st.st_mode)
            if left_out(rel, is_dir):
                continue
            if is_dir:
                kind, size = _KIND_DIR, 0
            elif stat.S_ISREG(st.st_mode):
                kind, size = _KIND_FILE, st.st_size
            else:
                what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                raise ValueError(
                    f"project entry {_display(rel)} is {what}; a project directory may hold "
                    f"only files and directories (in {_display(root)})"
                )
            if len(rel) > MAX_PATH_BYTES:
                raise ValueError(f"project path longer than {MAX_PATH_BYTES} bytes: {_display(rel)}")
            entries.append((rel, kind, st.st_mode & 0o7777, size))
            if len(entries) > MAX_ENTRIES:
                raise ValueError(f"project directory {_display(root)} holds more than "
                                 f"{MAX_ENTRIES} entries")
            if is_dir:
                pending.append(rel)
    return entries


def _read_exactly(path: bytes, size: int) -> bytes:
    """The first ``size`` bytes of the file (what it held when listed)."""
    try:
        with open(path, "rb") as f:
            chunks = []
            left = size
            while left > 0:
                chunk = f.read(min(left, 16 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
    except OSError as e:
        raise OSError(e.errno, f"cannot read {_display(path)}: {e.strerror or e}") from None
    if left > 0:
        raise OSError(f"{_display(path)} changed while it was being packed "
                      f"(expected {size} bytes)")
    return b"".join(chunks)


def pack_project(directory: Union[str, bytes, "os.PathLike"], max_bytes: int = MAX_PROJECT_BYTES) -> bytes:
    """Packs the project ``directory`` into archive bytes, byte for byte as
    ``ztune submit --working-dir`` does (same tree, same sha256).

    Raises ``ValueError`` naming the path for a ``directory`` that is not a
    directory (a symbolic link to one is fine), for a symbolic link or special
    file inside it, for a path over 4096 bytes, more than a million entries,
    or an archive larger than ``max_bytes``; ``OSError`` for a directory or
    file that cannot be read.
    """
    root = os.fsencode(os.fspath(directory))
    if not os.path.isdir(root):
        raise ValueError(f"working directory {_display(root)} is not a directory")
    entries = _collect(root)
    entries.sort(key=lambda e: e[0])  # bytewise, as std::string's operator<
    total = len(_MAGIC) + 1 + 4 + 4
    for rel, kind, _, size in entries:
        total += 1 + 4 + 4 + len(rel) + (8 + size if kind == _KIND_FILE else 0)
    if total > max_bytes:
        raise ValueError(f"project directory {_display(root)} packs to {total} bytes, above the "
                         f"limit of {max_bytes}")
    out = bytearray()
    out += _MAGIC
    out += struct.pack("<BI", _VERSION, len(entries))
    for rel, kind, mode, size in entries:
        out += struct.pack("<BII", kind, mode, len(rel))
        out += rel
        if kind == _KIND_FILE:
            out += struct.pack("<Q", size)
            out += _read_exactly(os.path.join(root, rel), size)
    out += struct.pack("<I", zlib.crc32(out) & 0xFFFFFFFF)
    return bytes(out)


def project_address(archive: bytes) -> str:
    """The address of an archive: its sha256 as 64 lowercase hex digits (a
    spec names it as ``"working_dir": "sha256:" + address``)."""
    return hashlib.sha256(archive).hexdigest()
