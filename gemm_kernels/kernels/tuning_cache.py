"""Tuned picks kept on disk, so a new process launches with them instead of tuning again.

:class:`~gemm_kernels.kernels.configs.TunedKernel` asks here when its key (bucketed rows,
``configs.row_bucket``) has no pick in memory, and writes here after a tuning run.  One JSON
file per kernel, named by a hash of what makes a pick stale: Triton's version, the GPU's name
and capability, the kernel's source (Triton's ``JITFunction.cache_key``, which covers the
functions it calls; Triton 3.6's depended on the kernels the process hashed before, so
``_triton_compat.hash_callees_first`` makes it the same in every process) and its config list.
Inside: ``"picks"``, the chosen config's ``all_kwargs()`` by search mode and tuning key.  A
pick is used only if it is still one of the configs that fit the launch
(``configs.fit_to_device``), so a changed list or limit cannot launch a config the kernel no
longer offers.

Where: ``GEMM_KERNELS_TUNING_CACHE`` (a directory, or ``off``; read at each miss), else
``$XDG_CACHE_HOME/gemm_kernels/tuning`` (``~/.cache/...``) on a GPU; off in the interpreter
(nothing is timed there).  A file that cannot be read or parsed is named in a warning, ignored,
and replaced at the next write (an entry that is not a config is dropped alone, the rest kept); a directory that cannot be written is named once, then left.
Writes go through a temporary file of their own and ``os.replace`` (``_files.atomic_write``): a
reader never sees half a file.  A write merges into the file as it is then, one writer at a time:
threads of a process under a lock, processes under an advisory lock on ``<file>.lock`` (``fcntl``;
where there is none, two processes tuning at once may lose a pick, which is tuned again later).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import threading
import warnings
from pathlib import Path

from .. import _env, _files, runtime

ENV = "GEMM_KERNELS_TUNING_CACHE"
#: a file of picks is a few kB; a larger one at its place is not ours (and is never read whole)
MAX_BYTES = 1 << 20
#: one reader or writer of the picks at a time in a process (threads tuning at once): a put merges
#: into the picks as read, and json.dumps must not see them change under it
_LOCK = threading.RLock()


def cache_directory() -> Path | None:
    """The directory of the tuning files, or None when the cache is off."""
    value = _env.path_or_off(ENV)  # off-words switch it off; an on-word is refused (a path is expected)
    if value is not None:
        return None if value == "off" else Path(value).expanduser()
    if not runtime.on_gpu():
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gemm_kernels" / "tuning"


def kernel_source_hash(kernel) -> str:
    """Triton's hash of the kernel's source and the jit functions it calls; the Python source
    where the object has none (the interpreter's stand-in)."""
    key = getattr(kernel, "cache_key", None)
    if isinstance(key, str):
        return key
    fn = getattr(kernel, "fn", kernel)
    return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()


def _identity(kernel, config_list, variant: str) -> dict:
    import triton

    return {
        "kernel": getattr(kernel, "__name__", None) or getattr(getattr(kernel, "fn", None), "__name__", "kernel"),
        "variant": variant,
        "triton": triton.__version__,
        "gpu": runtime.gpu_name(),
        "capability": list(runtime.RUNTIME.capability or ()),
        "source": kernel_source_hash(kernel),
        "configs": [str(sorted(c.all_kwargs().items())) for c in config_list],
    }


def _pick_name(mode: str, key: tuple) -> str:
    return f"{mode} {key!r}"  # ints, bools, strings and None: a stable repr


@contextlib.contextmanager
def _across_processes(path: Path):
    """Hold an advisory lock on ``<path>.lock`` (one process at a time merges into ``path``); no
    lock where ``fcntl`` is missing.  An OSError taking it is the caller's (a directory that
    cannot be written)."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        yield
        return
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _is_config(pick) -> bool:
    """Whether a file's entry reads as a config's ``all_kwargs()``: names to plain values (a
    hand-edited entry nested deep would also be too deep to write back)."""
    return isinstance(pick, dict) and all(isinstance(v, (bool, int, float, str, type(None))) for v in pick.values())


class DiskPicks:
    """The picks of one kernel on disk: :meth:`get` a config among candidates, :meth:`put` one."""

    def __init__(self, kernel, config_list, variant: str = ""):
        self._kernel, self._configs, self._variant = kernel, list(config_list), variant
        self._name: str | None = None  # the file's name, worked out once
        self._path: Path | None = None  # the file last read or written
        self._picks: dict = {}
        self._stamp = None  # (mtime_ns, size) of the file as last read
        self._warned: set = set()

    def path(self) -> Path | None:
        """This kernel's file (None when the cache is off); the directory is read each time (the
        environment may change it), the name is worked out once."""
        directory = cache_directory()
        if directory is None:
            return None
        if self._name is None:
            identity = _identity(self._kernel, self._configs, self._variant)
            digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]
            self._name = f"{identity['kernel']}{self._variant}-{digest}.json"
        path = directory / self._name
        if path != self._path:  # another directory: nothing of the last one applies
            self._path, self._picks, self._stamp = path, {}, None
        return path

    def _warn(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(message, RuntimeWarning, stacklevel=4)

    def _read(self, path: Path) -> dict:
        """The file's picks ({} when there is no file; a warning naming it when it is unreadable)."""
        try:
            stat = path.stat()
        except OSError:
            return {}
        self._stamp = (stat.st_mtime_ns, stat.st_size)
        try:
            if stat.st_size > MAX_BYTES:
                raise ValueError(f"{stat.st_size} bytes, more than a tuning file holds ({MAX_BYTES})")
            data = json.loads(_files.read_text(path, limit=MAX_BYTES))  # a FIFO put there: refused, not waited on
            picks = data["picks"]
            if not isinstance(picks, dict):
                raise ValueError("'picks' is not a mapping of configs")
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as err:
            # RecursionError: a deeply nested file (json's decoder recurses), read as any bad file
            self._warn(f"read {path}", f"gemm_kernels: ignoring the tuning cache file {path} "
                                       f"({type(err).__name__}: {str(err)[:200]}); "
                                       "shapes it held are tuned again and the file is rewritten")
            return {}
        # one hand-edited entry costs that entry only: the others are kept (and written back by put)
        bad = [name for name, pick in picks.items() if not _is_config(pick)]
        if bad:
            self._warn(f"entries {path}", f"gemm_kernels: dropping {len(bad)} tuning cache entr"
                                          f"{'y' if len(bad) == 1 else 'ies'} of {path} that are not "
                                          f"configs ({', '.join(map(repr, bad[:5]))}); the other picks are kept")
        return {name: pick for name, pick in picks.items() if _is_config(pick)}

    def _refresh(self, path: Path) -> None:
        """Read the file again when it changed since the last read (another process tuned)."""
        try:
            stat = path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            stamp = None
        if stamp != self._stamp:
            self._picks = self._read(path) if stamp is not None else {}
            self._stamp = stamp

    def get(self, key: tuple, candidates):
        """The kept pick of ``key`` (this search mode) if it is one of ``candidates``, else None."""
        path = self.path()
        if path is None:
            return None
        with _LOCK:
            self._refresh(path)
            kept = self._picks.get(_pick_name(runtime.autotune_mode(), key))
        if kept is None:
            return None
        return next((c for c in candidates if c.all_kwargs() == kept), None)

    def put(self, key: tuple, config) -> None:
        """Keep ``config`` as the pick of ``key``: merged into the file as it is now, written whole."""
        path = self.path()
        if path is None:
            return
        pick = config.all_kwargs()
        if not _is_config(pick):  # kept, it would make every later write of the file fail
            self._warn(f"pick {path}", f"gemm_kernels: not keeping a pick whose values are not plain "
                                       f"(int, float, str, bool, None) in {path}: {str(pick)[:200]}")
            return
        with _LOCK:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with _across_processes(path):
                    self._refresh(path)
                    self._picks[_pick_name(runtime.autotune_mode(), key)] = pick
                    data = {**_identity(self._kernel, self._configs, self._variant), "picks": self._picks}
                    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
                    with _files.atomic_write(path) as f:
                        f.write(text)
                stat = path.stat()
                self._stamp = (stat.st_mtime_ns, stat.st_size)
            # read-only home, full disk, an unserialisable value; RecursionError: a deeply nested
            # entry read from a hand-edited file, too deep for json.dumps from a deep stack
            except (OSError, TypeError, ValueError, RecursionError) as err:
                self._warn(f"write {path}", f"gemm_kernels: cannot write the tuning cache file {path} ({err}); "
                                            f"picks stay in memory only (set {ENV} to another directory, or off)")
