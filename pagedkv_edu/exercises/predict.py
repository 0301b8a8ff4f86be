"""Predict, then run: the reader writes a number down before the cell that measures it."""

from __future__ import annotations

import math

from .messages import language, say


def check_prediction(name: str, zh: str, predicted: float | None, measured: float, *,
                     tolerance: float = 0.0, absolute: bool = False, unit: str = "", why: str = "",
                     why_zh: str = "") -> bool:
    """Print and return whether ``predicted`` is ``measured`` within ``tolerance``.

    ``tolerance`` is a relative error, or, with ``absolute=True``, a distance in the measured
    value's own units (percentage points, say); ``unit`` is printed after both numbers. ``why``
    (and ``why_zh``, the same in zh-TW: a notebook's code is the same in both editions) explains a miss.
    """
    if not math.isfinite(measured):
        raise ValueError(f"{name}: the measured value {measured!r} is not a finite number")
    if tolerance < 0:
        raise ValueError(f"{name}: tolerance={tolerance} must be >= 0")
    if predicted is None:
        print(say("no_prediction", name=name, zh=zh))
        return False
    try:
        if isinstance(predicted, bool):
            raise TypeError("a bool is not a number")
        value = float(predicted)
    except (TypeError, ValueError):
        print(say("not_a_number", name=name, zh=zh, value=repr(predicted)))
        return False
    close = math.isfinite(value) and abs(value - measured) <= tolerance * (1.0 if absolute else abs(measured))
    shown = f"{measured:,.0f}" if float(measured).is_integer() else f"{measured:,.3g}"
    verdict = say("prediction_close" if close else "prediction_off", name=name, zh=zh, predicted=f"{value:,g}",
                  measured=shown, unit=unit)
    reason = why_zh if language() == "zh-TW" and why_zh else why
    print(verdict if close or not reason else say("prediction_why", verdict=verdict, why=reason))
    return close
