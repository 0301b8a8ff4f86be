"""Predict, then run: the reader writes a number down before the cell that measures it."""

from __future__ import annotations

import math


def check_prediction(name: str, zh: str, predicted: float | None, measured: float, *,
                     tolerance: float = 0.0, absolute: bool = False, unit: str = "", why: str = "") -> bool:
    """Print and return whether ``predicted`` is ``measured`` within ``tolerance``.

    ``tolerance`` is a relative error, or, with ``absolute=True``, a distance in the measured
    value's own units (percentage points, say); ``unit`` is printed after both numbers.
    """
    if not math.isfinite(measured):
        raise ValueError(f"{name}: the measured value {measured!r} is not a finite number")
    if tolerance < 0:
        raise ValueError(f"{name}: tolerance={tolerance} must be >= 0")
    if predicted is None:
        print(f"○ {name}（{zh}）: no prediction yet. Write your number above, then run the measurement.")
        return False
    try:
        if isinstance(predicted, bool):
            raise TypeError("a bool is not a number")
        value = float(predicted)
    except (TypeError, ValueError):
        print(f"✗ {name}（{zh}）: {predicted!r} is not a number")
        return False
    close = math.isfinite(value) and abs(value - measured) <= tolerance * (1.0 if absolute else abs(measured))
    shown = f"{measured:,.0f}" if float(measured).is_integer() else f"{measured:,.3g}"
    if close:
        print(f"✓ {name}（{zh}）: you predicted {value:,g}{unit}; measured {shown}{unit}")
        return True
    print(f"✗ {name}（{zh}）: you predicted {value:,g}{unit}; measured {shown}{unit}" + (f". {why}" if why else ""))
    return False
