"""Plain JSON values from analysis results: numpy scalars to Python, NaN and inf to None."""
from __future__ import annotations

import math
from typing import Any

import numpy as np


def json_safe(value: Any) -> Any:
    """The same structure with numpy scalars as Python numbers and non-finite floats as None.

    ``json.dump(..., allow_nan=False)`` then never fails, and JSON readers never meet ``NaN``.
    """
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (np.floating, float)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
