"""The sandbox a submitted notebook's process runs in (:mod:`._grade_judge`): an allow list.

:func:`sandbox_prefix` is a command prefix.  ``unshare`` gives the command its own user, mount,
process and network namespaces; in them a shell builds a new root on an empty tmpfs that shows,
read-only, only what a notebook's process needs:

* Python: its prefixes (a venv's and its interpreter's) and site-packages folders;
* the package, less :func:`hidden_paths` (the check modules, nbgrader's markup, ``lab``'s
  bytecode), and in a checkout the ``images/`` beside it (the committed measurements lessons read);
* the system: ``/usr``, ``/bin``, ``/sbin``, ``/lib*`` (links stay links), :data:`ETC` of ``/etc``, ``/sys``;
* ``/dev``'s basics (:data:`DEVICES`, NVIDIA's devices where there are any), ``/proc`` of its own
  process namespace; and, empty and writable, ``/tmp``, ``/dev/shm`` and the home folder, each a
  tmpfs of at most :data:`WRITABLE_MB` (what is written there is memory).

Nothing else is there: not the grader's home, the submissions, the course's folders, the
repository's notebooks, nor any other path.  The shell then moves into that root with
``pivot_root`` and unmounts the old one (``chroot`` would leave it reachable), and runs the command
with no capabilities (``setpriv``), so it cannot remount or unmount what it was shown.  ``hide``
names more paths to leave out where they lie inside a shown folder.  It fails closed: a step that
fails stops the shell before the command runs.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import _env

#: the switch (a flag, on by default): off, no notebook is graded unless the grader asks for no sandbox
ENV = "GEMM_KERNELS_GRADE_SANDBOX"
#: the system's folders shown (those that exist; a link is shown as the link it is)
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
#: the files and folders of /etc shown (users' names, the loader's cache, the compiler's alternatives)
ETC = ("passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
       "alternatives")
#: the devices shown, with NVIDIA's (``/dev/nvidia*``) where there are any
DEVICES = ("null", "zero", "full", "random", "urandom")
#: the programs that build it (util-linux's), looked up in PATH and the system's sbin folders
TOOLS = ("unshare", "mount", "umount", "findmnt", "pivot_root", "setpriv")
#: MiB each writable folder (``/tmp``, ``/dev/shm``, the home folder) may hold: a tmpfs is memory,
#: which the notebook's memory cap does not count (Triton's cache, in ``/tmp``, takes a few MiB)
WRITABLE_MB = 256
#: KiB of ``/dev`` (a tmpfs too: device nodes and links only)
DEV_KB = 256
#: what the probe imports in the sandbox: a notebook's process needs them all
PROBE_IMPORTS = "import numpy, torch, triton, gemm_kernels.lab._grade_worker"

_PROBED: list = []  # [(works, why)] once probed in this process


def package_dir() -> Path:
    return Path(__file__).resolve().parents[1]


def hidden_paths(package: Path | None = None) -> list[Path]:
    """The package's files a notebook's process never sees: the check modules (their references),
    nbgrader's markup (its hidden tests) and ``lab``'s bytecode (which holds the markup compiled)."""
    lab = (package or package_dir()) / "lab"
    return [lab / "exercises", lab / "nbgrader_markup.py", lab / "__pycache__"]


def python_paths() -> list[Path]:
    """The folders Python needs: its prefixes, its interpreter's folder and its site-packages, with
    those on its path (another environment's, named in a ``.pth`` file)."""
    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)), *site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        found.append(site.getusersitepackages())
    found += [p for p in sys.path if {"site-packages", "dist-packages"} & set(Path(p).parts)]
    return [Path(p) for p in found if p and os.path.isdir(p)]


def shown_paths() -> list[Path]:
    """Every folder shown read-only (less :func:`hidden_paths`), as given and as resolved (a link
    on the way, as in a home that is a link); none inside another."""
    package = package_dir()
    roots = [*python_paths(), package]
    if checkout(package):
        roots.append(package.parent / "images")  # its committed measurements, which lessons read
    roots += [Path(os.path.realpath(p)) for p in roots]
    roots = [Path(os.path.abspath(p)) for p in dict.fromkeys(roots)]
    return [r for r in roots if not any(o in r.parents for o in roots)]


def checkout(package: Path) -> bool:
    """Whether ``package`` lies in a checkout of the repository (its notebooks beside it)."""
    return (package.parent / "pyproject.toml").is_file() and (package.parent / "notebooks").is_dir()


def _repository_rest(package: Path, shown: list[Path]) -> list[Path]:
    """In a checkout, the repository's entries that are neither the package, its images nor a folder
    Python needs (the notebooks, solved; git's history; a build): hidden, should a folder Python needs
    hold the whole checkout."""
    if not checkout(package):
        return []
    keep = {package, package.parent / "images"}
    return [e for e in package.parent.iterdir()
            if e not in keep and not any(e == s or e in s.parents for s in shown)]


def tools() -> dict | None:
    """{name: path} of :data:`TOOLS`, or None where one is missing."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
    found = {name: shutil.which(name, path=path) for name in TOOLS}
    return None if None in found.values() else found


def mount_point() -> Path:
    """An empty folder of this user's where the new root is mounted (in the sandbox's own mount
    namespace: outside it, the folder stays empty)."""
    path = Path(tempfile.gettempdir()) / f".gemm-kernels-sandbox-{os.getuid()}"
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise OSError(f"{path} is not a folder of this user's: the sandbox needs it as its mount point")
    return path


def _q(path) -> str:
    return shlex.quote(str(path))


class _Script:
    """The shell lines that build the new root at ``root``."""

    def __init__(self, root: Path, hidden: list[Path]):
        self.root, self.hidden, self.lines = root, hidden, []

    def at(self, path) -> str:
        return _q(f"{self.root}{Path(path)}")

    def show(self, path: Path) -> None:
        """``path`` read-only at its place, less the hidden paths inside it (its other entries shown one by one)."""
        if path in self.hidden:
            return
        if path.is_symlink():
            self.lines.append(f"ln -s {_q(os.readlink(path))} {self.at(path)}")
        elif any(path in h.parents for h in self.hidden):
            self.lines.append(f"mkdir -p {self.at(path)}")
            for entry in sorted(path.iterdir()):
                self.show(entry)
            # read-only too where it lies in a writable place (a checkout under /tmp: the sandbox's own /tmp)
            self.lines.append(f"mount --rbind {self.at(path)} {self.at(path)}; ro {self.at(path)}")
        elif path.is_dir():
            self.lines.append(f"mkdir -p {self.at(path)}; mount --rbind {_q(path)} {self.at(path)}; ro {self.at(path)}")
        elif path.is_file():
            self.lines.append(f"touch {self.at(path)}; mount --bind {_q(path)} {self.at(path)}; "
                              f"mount -o remount,bind,ro {self.at(path)}")
        # (a socket, a FIFO or a device among them: not shown)

    def empty(self, path, mode: str, size: str) -> None:
        """An empty tmpfs at ``path`` of at most ``size`` (tmpfs's own units: ``256m``, ``64k``)."""
        self.lines.append(f"mkdir -p {self.at(path)}; mount -t tmpfs -o mode={mode},size={size} tmpfs {self.at(path)}")


def _devices(script: _Script, writable_mb: int) -> None:
    script.empty("/dev", "0755", f"{DEV_KB}k")
    names = [*DEVICES, *sorted(p.name for p in Path("/dev").glob("nvidia*"))]
    for name in names:
        device = Path("/dev") / name
        if device.is_dir():
            script.lines.append(f"mkdir {script.at(device)}; mount --rbind {_q(device)} {script.at(device)}")
        elif device.exists():
            script.lines.append(f"touch {script.at(device)}; mount --bind {_q(device)} {script.at(device)}")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        script.lines.append(f"ln -s {target} {script.at(Path('/dev') / name)}")
    script.empty("/dev/shm", "1777", f"{writable_mb}m")


def sandbox_prefix(hide=(), writable_mb: int = WRITABLE_MB) -> list[str] | None:
    """The command prefix that runs a notebook's process in the sandbox (module docstring), or None
    where it cannot be built here (:func:`sandbox_problem` says why).  Building it runs nothing: a
    step that fails when it runs stops the command (:func:`sandbox_available` tries it once).
    ``writable_mb``: the MiB each of its writable folders may hold."""
    writable_mb = int(writable_mb)
    if writable_mb <= 0:
        raise ValueError(f"writable_mb must be a positive number of MiB, not {writable_mb}")
    if not _env.flag(ENV, True) or sys.platform != "linux":
        return None
    found = tools()
    if found is None:
        return None
    try:
        root = mount_point()
    except OSError:
        return None
    package = package_dir()
    shown = shown_paths()
    hidden = [Path(os.path.abspath(p)) for p in [*hidden_paths(package), *_repository_rest(package, shown), *hide]]
    script = _Script(root, hidden)
    home = Path(os.path.abspath(os.path.expanduser("~")))
    places = [(p, "show") for p in shown] + [(Path("/tmp"), "tmp")]
    if home != Path("/") and not any(home == s or s in home.parents for s in shown):
        places.append((home, "home"))  # empty (a shown folder inside it comes back after)
    places += [(Path(p), "show") for p in SYSTEM if os.path.lexists(p)]
    places += [(Path("/etc") / name, "show") for name in ETC if os.path.lexists(f"/etc/{name}")]
    script.lines.append(f"mount -t tmpfs -o mode=0755 tmpfs {_q(root)}")
    for path, kind in sorted(places, key=lambda place: (len(place[0].parts), str(place[0]))):
        script.lines.append(f"mkdir -p {script.at(path.parent)}")
        if kind == "show":
            script.show(path)
        else:
            script.empty(path, "1777" if kind == "tmp" else "0700", f"{writable_mb}m")
    _devices(script, writable_mb)
    script.lines.append(f"mkdir {script.at('/proc')}; mount --rbind /proc {script.at('/proc')}")
    ro = ('ro() { mount -o remount,bind,ro "$1"; mounts=$(findmnt -R -n -l -o TARGET -- "$1"); '
          'printf "%s\\n" "$mounts" | while IFS= read -r m; do mount -o remount,bind,ro "$m"; done; }')
    lines = [
        "set -e", f'PATH="$PATH:{os.path.dirname(found["mount"])}:{os.path.dirname(found["findmnt"])}"', ro,
        *script.lines,
        f"mount -o remount,ro {_q(root)}",
        # the old root goes: no path, no open folder leads back to it
        f"cd {_q(root)}", f"{found['pivot_root']} . .", f"{found['umount']} -l .", "cd /tmp",
        # the command runs with no capability: it cannot remount, unmount or leave what it was given
        f"{found['setpriv']} --bounding-set=-all --inh-caps=-all --no-new-privs "
        "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked,+keep_caps_locked -- \"$@\"",
    ]
    # the notebook's process runs under sh, not as the namespace's init (which no signal of its own
    # reaches); its own process ids too: when it ends, whatever it forked (setsid or not) ends with it
    return [found["unshare"], "--user", "--map-root-user", "--mount", "--net", "--pid", "--fork", "--kill-child",
            "--mount-proc", "--", "sh", "-c", "\n".join(lines), "sh"]


def process_limit() -> int | None:
    """The tasks (threads included: torch's, one a core, and Triton's compiler) a sandboxed notebook's
    process may run at once, with room to spare: its RLIMIT_NPROC, so a fork bomb stops there.  None
    before Linux 5.14, which counts every process of the grading user, not the sandbox's own; the
    kernel applies it to no process of root's (a grader running as root: no bound)."""
    release = tuple(int(n) for n in re.findall(r"\d+", platform.release())[:2])
    if sys.platform != "linux" or release < (5, 14):
        return None
    return 256 + 4 * (os.cpu_count() or 1)


def child_environment(extra: dict | None = None) -> dict:
    """The environment a notebook's process gets: a few of this one's variables (no secrets), the
    package's parent on PYTHONPATH."""
    env = {key: value for key, value in os.environ.items()
           if key in ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "TRITON_INTERPRET", "GEMM_KERNELS_ARCH",
                      "CUDA_VISIBLE_DEVICES", "GEMM_KERNELS_EXAM", "GEMM_KERNELS_PROGRESS", "MPLBACKEND")}
    env.update(TMPDIR="/tmp", MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1", **(extra or {}))
    # this judge's own package first, installed or not (a checkout run from its folder has it on no path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(package_dir().parent), env.get("PYTHONPATH")) if p)
    return env


def sandbox_problem() -> str:
    """Why no notebook can run sandboxed here, or "" where one can."""
    if not _env.flag(ENV, True):
        return f"{ENV} turns it off"
    if sys.platform != "linux":
        return "it needs Linux (namespaces)"
    if tools() is None:
        missing = [n for n in TOOLS if not shutil.which(n, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")]
        return f"no {', '.join(missing)} (util-linux) on this machine"
    try:
        mount_point()
    except OSError as exc:
        return str(exc)
    return "" if sandbox_available() else _PROBED[0][1]


def sandbox_available() -> bool:
    """Whether a notebook's process can run in the sandbox here: tried once per process, by importing
    what it needs (:data:`PROBE_IMPORTS`) in it."""
    prefix = sandbox_prefix([])
    if prefix is None:
        return False
    if not _PROBED:
        env = child_environment()
        try:
            done = subprocess.run([*prefix, sys.executable, "-c", PROBE_IMPORTS], capture_output=True, timeout=120,
                                  env=env, stdin=subprocess.DEVNULL)
            why = " ".join(done.stderr.decode(errors="replace").split())[-400:]
            _PROBED.append((done.returncode == 0, why or f"it exited with code {done.returncode}"))
        except (OSError, subprocess.TimeoutExpired) as exc:
            _PROBED.append((False, f"it could not start: {exc}"))
    return _PROBED[0][0]
