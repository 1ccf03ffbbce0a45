"""Integer checks shared by the models and the launchers (numpy only: no torch, no Triton)."""

from __future__ import annotations

import numpy as np


def require_int(value, name: str) -> int:
    """``value`` as a Python int (numpy integers accepted, bools not); TypeError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


def check_int(value, name: str, minimum: int = 1) -> int:
    """:func:`require_int`, and at least ``minimum`` (ValueError)."""
    value = require_int(value, name)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value
