"""Environment variables, read one way per kind everywhere (no torch, no Triton).

Flags: ``1``/``true``/``yes``/``on`` and ``0``/``false``/``no``/``off``, any case, spaces around
ignored; unset or empty is the default.  Anything else is a ValueError naming the variable, as a
bad ``GEMM_KERNELS_ARCH`` is: ``GEMM_KERNELS_KEEP_LAUNCHES=flase`` must not quietly mean either.
Paths that may be switched off (:func:`path_or_off`): an off-word (``off``, ``0``, ``no``,
``none``, ``false``, ``disabled``) is off, an on-word is refused (a path is expected), anything
else is the path, ``~`` expanded (a ``~user`` with no home is refused).  Numbers
(:func:`number`): a float, or a ValueError naming the variable.
"""

from __future__ import annotations

import os

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
#: the values that switch off a variable that takes a path
PATH_OFF = ("off", "0", "no", "none", "false", "disabled")


def parse_flag(value: str | None, name: str, default: bool) -> bool:
    """``value`` of the variable ``name`` as a bool (``default`` when unset or empty)."""
    text = (value or "").strip().lower()
    if not text:
        return default
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise ValueError(f"{name}={value!r} is not a yes/no value: use one of {', '.join(TRUE)} (on) "
                     f"or {', '.join(FALSE)} (off), in any case, or leave it unset")


def flag(name: str, default: bool) -> bool:
    """The environment variable ``name`` as a bool (:func:`parse_flag`)."""
    return parse_flag(os.environ.get(name), name, default)


def parse_path_or_off(value: str | None, name: str) -> str | None:
    """``value`` of the path-or-off variable ``name``: None when unset or blank, ``"off"`` for an
    off-word, else the path (stripped, ``~`` expanded); an on-word such as ``1`` is a ValueError (a
    path is expected, not a file named ``1``), and so is ``~user`` for a user with no home
    (pathlib's ``expanduser`` would raise a RuntimeError naming nothing)."""
    text = (value or "").strip()
    if not text:
        return None
    if text.lower() in PATH_OFF:
        return "off"
    if text.lower() in TRUE:
        raise ValueError(f"{name}={value!r}: give a path, or one of {', '.join(PATH_OFF)} to switch it "
                         "off, or leave it unset for the default")
    path = os.path.expanduser(text)
    if path.startswith("~"):
        raise ValueError(f"{name}={value!r}: {path.split('/')[0]} is no user's home directory here; give a path")
    return path


def path_or_off(name: str) -> str | None:
    """The environment variable ``name`` read by :func:`parse_path_or_off`."""
    return parse_path_or_off(os.environ.get(name), name)


def number(name: str) -> float | None:
    """The environment variable ``name`` as a finite float (None when unset or blank)."""
    value = os.environ.get(name)
    text = (value or "").strip()
    if not text:
        return None
    try:
        result = float(text)
    except ValueError:
        result = float("nan")
    if result != result or result in (float("inf"), float("-inf")):
        raise ValueError(f"{name}={value!r} is not a number: give a number, or leave it unset")
    return result
