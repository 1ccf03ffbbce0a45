"""Files a user hands us, read and written one way everywhere (no torch, no Triton).

Reading (:func:`read_bytes`, :func:`read_text`): a progress record, a roster, a config, a notebook
handed in, a committed record.  Only a regular file is opened: a FIFO, a device or a socket where a
file should be would block ``open`` or ``read`` forever (a FIFO until a writer comes), a folder, a
dangling link or a link loop fail with errors that name no reason.  Each is an OSError
(:class:`NotRegularFile`) naming the file and what is there instead; a file past ``limit`` bytes is
:class:`TooLarge`; a missing one stays FileNotFoundError.

Writing (:func:`atomic_write`): a kill at any moment, or an error half-way (a name that cannot be
encoded), leaves the old file or the whole new one, never a part.  :func:`shown_name` makes a name
read from the file system (undecodable bytes kept as surrogates by ``os.fsdecode``) printable.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path


class NotRegularFile(OSError):
    """What is at the path is no regular file (a folder, FIFO, device, socket, broken link)."""


class TooLarge(OSError):
    """The file holds more bytes than its reader takes."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def regular_file_problem(path) -> str | None:
    """Why ``path`` is no regular file to read (None when it is one); FileNotFoundError when
    nothing is there.  Never opens it."""
    os.lstat(path)  # FileNotFoundError: nothing there, not even a link
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "a dangling symbolic link"
    except OSError as exc:  # ELOOP: a symbolic link loop
        return f"a link that cannot be followed ({exc.strerror})"
    return None if stat.S_ISREG(info.st_mode) else _kind(info.st_mode)


def is_regular_file(path, role: str = "a file") -> bool:
    """True when a regular file is at ``path``, False when nothing is; NotRegularFile naming what
    is there otherwise (``role``: what it should be, for the message).  Never opens it."""
    try:
        problem = regular_file_problem(path)
    except FileNotFoundError:
        return False
    if problem:
        raise NotRegularFile(f"{path} is {problem}, not {role}")
    return True


def read_bytes(path, limit: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (module docstring: what else is refused, how)."""
    if not is_regular_file(path):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    # O_NONBLOCK: a FIFO swapped in since the check opens without waiting, then is refused below
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as file:
        mode = os.fstat(file.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{path} is {_kind(mode)}, not a file")
        raw = file.read() if limit is None else file.read(limit + 1)
    if limit is not None and len(raw) > limit:
        raise TooLarge(f"{path} is larger than {limit:,} bytes: too large to be what it should be")
    return raw


def read_text(path, limit: int | None = None, encoding: str = "utf-8") -> str:
    """:func:`read_bytes` decoded (UnicodeDecodeError when it is not ``encoding``)."""
    return read_bytes(path, limit).decode(encoding)


def shown_name(text: str) -> str:
    """``text`` (a file or folder name) as printable UTF-8: bytes that were no UTF-8 (kept by
    ``os.fsdecode`` as lone surrogates) become ``\\xe9`` escapes."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no undecodable byte makes
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def printable(value):
    """``value`` with every string in it (in lists, tuples and dicts too) made printable by :func:`shown_name`."""
    if isinstance(value, str):
        return shown_name(value)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable(v) for v in value]
    return value


#: a spreadsheet reads a cell starting with one of these as a formula (=HYPERLINK(...) in a folder name)
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    """:func:`printable`, and every string a spreadsheet would run as a formula quoted with a leading
    apostrophe (what spreadsheets themselves do), for the CSV files a teacher opens."""
    return _unformula(printable(value))


def _unformula(value):
    if isinstance(value, str):
        return "'" + value if value.startswith(_FORMULA_STARTS) else value
    if isinstance(value, dict):
        return {_unformula(k): _unformula(v) for k, v in value.items()}
    if isinstance(value, list):  # printable made every tuple a list
        return [_unformula(v) for v in value]
    return value


@contextlib.contextmanager
def atomic_write(path, newline: str | None = None):
    """Open ``path`` for writing UTF-8 text: it goes to a temporary file beside it, flushed and
    fsync'ed, then renamed over ``path``; on an error the temporary is removed, ``path`` kept.
    The temporary's name is new for every write (exclusive creation), so two threads or processes
    writing one file at once each replace it whole: a reader sees one of them, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the name cut so that the temporary's stays within a file system's 255 bytes where path's does
    tmp = path.with_name(f".{path.name[:200]}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
    try:
        with tmp.open("x", newline=newline, encoding="utf-8") as f:  # "x": never another writer's file
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
