"""Durations (`90s`, `1h30m`) and Kubernetes quantities (`500m`, `1Gi`, `2e3`), parsed exactly.

Both are bounded, so no input can overflow what reads them later (timedelta, int64 on the API server):
a duration is finite and at most `DURATION_MAX`; a quantity is finite, has an exponent of at most
three digits and is at most `QUANTITY_MAX`, the largest value a Kubernetes quantity holds.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from decimal import Decimal, InvalidOperation

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal("1e3"),
            "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18")}
DURATION_MAX = timedelta(days=365)
QUANTITY_MAX = Decimal(2**63 - 1)
# Three exponent digits at most: `1e999999999` would make Decimal compute a billion-digit power.
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d{1,3})|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def parse_duration(text: str | int | float) -> timedelta:
    """`90s`, `1h30m`, `2d`, `250ms`, or a bare number of seconds. Raises ValueError naming the problem."""
    if isinstance(text, bool):
        raise ValueError(f"expected a duration like 90s or 1h, got {text!r}")
    if isinstance(text, int) and abs(text) > DURATION_MAX.total_seconds():
        seconds = math.inf  # float() of a 400-digit int would raise OverflowError
    elif isinstance(text, (int, float)):
        seconds = float(text)
    elif not isinstance(text, str):
        raise ValueError(f"expected a duration like 90s, 15m, 1h30m or 2d, got {type(text).__name__}")
    else:
        s = text.strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", s):
            seconds = float(s)
        else:
            pos, seconds = 0, 0.0
            for m in _DURATION_PART.finditer(s):
                if m.start() != pos:
                    break
                seconds += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
                pos = m.end()
            if pos != len(s) or not s:
                raise ValueError(f"expected a duration like 90s, 15m, 1h30m or 2d, got {_clip(text)}")
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative, got {_clip(text)}")
    # A NaN passes every comparison, so test finiteness first; the bound keeps timedelta from overflowing.
    if not math.isfinite(seconds) or seconds > DURATION_MAX.total_seconds():
        raise ValueError(f"a duration must be at most {format_duration(DURATION_MAX)}, got {_clip(text)}")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    d, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((d, "d"), (h, "h"), (m, "m"), (s, "s")) if v) or "0s"


def parse_quantity(text: str | int | float) -> Decimal:
    """A Kubernetes resource quantity as an exact decimal: `500m` → 0.5, `1Gi` → 1073741824."""
    if isinstance(text, bool):
        raise ValueError(f"expected a quantity like 2, 500m or 4Gi, got {text!r}")
    if isinstance(text, float) and not math.isfinite(text):
        raise ValueError(f"a quantity must be a finite number, got {text!r}")
    if isinstance(text, (int, float)):
        value = Decimal(str(text))
    elif not isinstance(text, str):
        raise ValueError(f"expected a quantity like 2, 500m or 4Gi, got {type(text).__name__}")
    else:
        m = _QUANTITY.match(text.strip())
        if not m:
            raise ValueError(f"expected a quantity like 2, 500m or 4Gi, got {_clip(text)}")
        try:
            number = Decimal(m.group(1))
        except InvalidOperation as e:  # pragma: no cover - the regex admits only numbers
            raise ValueError(f"not a number: {text!r}") from e
        if m.group(2):
            value = number * (Decimal(10) ** int(m.group(2)[1:]))
        else:
            suffix = m.group(3) or ""
            value = number * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])
    if value < 0:
        raise ValueError(f"a quantity cannot be negative, got {_clip(text)}")
    if value > QUANTITY_MAX:
        raise ValueError(f"a quantity must be at most {QUANTITY_MAX}, got {_clip(text)}")
    return value


def _clip(text: object) -> str:
    """The offending value for an error line: a 100,000-digit number stays one short line."""
    r = repr(text)
    return r if len(r) <= 40 else r[:20] + "…" + r[-10:]


def format_bytes(value: Decimal | int | str) -> str:
    """A byte count the way Kubernetes writes memory: `2Gi`, `512Mi`, or `1.5Gi` when not whole."""
    n = Decimal(str(value))
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if n >= unit:
            q = n / unit
            return f"{q.normalize():f}{suffix}" if q == q.to_integral() else f"{q:.1f}{suffix}"
    return f"{n.normalize():f}"
