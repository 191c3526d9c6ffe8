"""Small value and text helpers shared by the service: how numbers and settings are written for
people (console, status, report), whether a reported value is a finite number, an error's last line."""
from __future__ import annotations

import math
from typing import Any, TypeGuard


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
    s = round(seconds)
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60}:{rem % 60:02d}"


def finite(v: Any) -> TypeGuard[float]:
    """A real, finite number (not a bool, not NaN or inf): what may be told, plotted or ranked."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def last_line(text: str) -> str:
    """A text's last non-empty line (an error's own message, not the wrapper around it)."""
    return next((ln.strip() for ln in reversed(str(text).splitlines()) if ln.strip()), str(text))
