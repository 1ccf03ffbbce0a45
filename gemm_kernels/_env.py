"""Environment variables, read one way per kind everywhere (no torch, no Triton).

Flags: ``1``/``true``/``yes``/``on`` and ``0``/``false``/``no``/``off``, any case, spaces around
ignored; unset or empty is the default.  Anything else is a ValueError naming the variable, as a
bad ``GEMM_KERNELS_ARCH`` is: ``GEMM_KERNELS_KEEP_LAUNCHES=flase`` must not quietly mean either.
Paths that may be switched off (:func:`path_or_off`): an off-word (``off``, ``0``, ``no``,
``none``, ``false``, ``disabled``) is off, an on-word is refused (a path is expected), anything
else is the path, ``~`` expanded (a ``~user`` with no home is refused).  Numbers
(:func:`number`): ASCII digits (``str.isdigit``, ``int`` and ``float`` take any script's digits:
``٩`` is 9 to them), a finite float, else a ValueError naming the variable.  A message echoes a
value trimmed (:func:`shown`): a 100,000-character value must not make a 100 kB error.
"""

from __future__ import annotations

import os
import re

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
#: the values that switch off a variable that takes a path
PATH_OFF = ("off", "0", "no", "none", "false", "disabled")
#: a decimal number in ASCII digits: 8, 0.5, .5, 1e3 (no underscores, other scripts' digits, nan or inf)
NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: the most characters of a value a message echoes
SHOWN = 60


def shown(value) -> str:
    """``value`` as a message echoes it: its repr, trimmed to about :data:`SHOWN` characters."""
    text = repr(value)
    if len(text) <= SHOWN:
        return text
    return f"{text[:SHOWN - 10]}...' ({len(value) if isinstance(value, str) else len(text)} characters)"


def parse_flag(value: str | None, name: str, default: bool) -> bool:
    """``value`` of the variable ``name`` as a bool (``default`` when unset or empty)."""
    text = (value or "").strip().lower()
    if not text:
        return default
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise ValueError(f"{name}={shown(value)} is not a yes/no value: use one of {', '.join(TRUE)} (on) "
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
        raise ValueError(f"{name}={shown(value)}: give a path, or one of {', '.join(PATH_OFF)} to switch it "
                         "off, or leave it unset for the default")
    path = os.path.expanduser(text)
    if path.startswith("~"):
        raise ValueError(f"{name}={shown(value)}: {shown(path.split('/')[0])} is no user's home directory here; "
                         "give a path")
    return path


def path_or_off(name: str) -> str | None:
    """The environment variable ``name`` read by :func:`parse_path_or_off`."""
    return parse_path_or_off(os.environ.get(name), name)


def parse_number(value: str | None, name: str) -> float | None:
    """``value`` of the variable ``name`` as a finite float (None when unset or blank): ASCII digits
    only; one past float's range is out of range, not "not a number"."""
    text = (value or "").strip()
    if not text:
        return None
    if not NUMBER.fullmatch(text):
        raise ValueError(f"{name}={shown(value)} is not a number: give one in the digits 0-9 (such as 8 or 0.5), "
                         "or leave it unset")
    result = float(text)
    if result in (float("inf"), float("-inf")):
        raise ValueError(f"{name}={shown(value)} is out of range: give a number below 1e308, or leave it unset")
    return result


def number(name: str) -> float | None:
    """The environment variable ``name`` read by :func:`parse_number`."""
    return parse_number(os.environ.get(name), name)
