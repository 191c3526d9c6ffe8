"""How numbers and settings are written for people: console, status and report."""
from __future__ import annotations

import math
from typing import Any


def sig4(v: Any) -> str:
    """A number at 4 significant digits; anything else as it is."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return str(v)
    return f"{v:.4g}" if math.isfinite(v) else str(v)


def params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={sig4(v)}" for k, v in params.items())


def clock_text(seconds: float) -> str:
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60}:{rem % 60:02d}"
