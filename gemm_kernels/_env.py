"""Boolean environment variables, read one way everywhere (no torch, no Triton).

``1``/``true``/``yes``/``on`` and ``0``/``false``/``no``/``off``, any case, spaces around
ignored; unset or empty is the default.  Anything else is a ValueError naming the variable, as a
bad ``GEMM_KERNELS_ARCH`` is: ``GEMM_KERNELS_KEEP_LAUNCHES=flase`` must not quietly mean either.
"""

from __future__ import annotations

import os

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


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
