"""Plain JSON values from analysis results: numpy scalars to Python, NaN and inf to None; typed trees and back."""
from __future__ import annotations

import base64
import dataclasses
import functools
import math
import types
import typing
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


# --- typed plain data: a dataclass tree to JSON values and back, led by its type hints ----------------------------
# For stores that must never run code (the dashboard's disk cache): what comes back is only ever built from the
# declared field types (numbers, strings, lists, dicts, numeric arrays, frames, the dataclasses themselves), and a
# value that does not fit its hint is refused with ValueError.
_NUMERIC_KINDS = "biuf"   # array dtypes that may be stored: no objects, no strings


def to_plain(hint: Any, value: Any, frames: list[Any]) -> Any:
    """``value`` (of type ``hint``) as JSON values; DataFrames are appended to ``frames`` and stored by index.

    TypeError when ``value`` holds something outside the hint's plain types (it is then not stored).
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if value is None:
        return None
    if hint is Any or hint is object:
        return _checked_json(value)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"cannot store a value of {hint}: more than one type besides None")
        return to_plain(inner[0], value, frames)
    names = _record_fields(hint)
    if names is not None:
        hints = _hints(hint)
        return {name: to_plain(hints[name], getattr(value, name), frames) for name in names}
    if hint is np.ndarray:
        arr = np.ascontiguousarray(value)
        if arr.dtype.kind not in _NUMERIC_KINDS:
            raise TypeError(f"cannot store an array of {arr.dtype}")
        return {"dtype": arr.dtype.str, "shape": list(arr.shape), "data": base64.b64encode(arr.tobytes()).decode()}
    if getattr(hint, "__name__", None) == "DataFrame":
        frames.append(value)
        return len(frames) - 1
    if origin in (list, tuple) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected a sequence for {hint}, got {type(value).__name__}")
        items = _item_hints(hint, len(value))
        return [to_plain(h, v, frames) for h, v in zip(items, value, strict=True)]
    if origin is dict or hint is dict:
        key_hint, value_hint = args or (str, Any)
        if not isinstance(value, dict):
            raise TypeError(f"expected a dict for {hint}, got {type(value).__name__}")
        return {_key_text(key_hint, k): to_plain(value_hint, v, frames) for k, v in value.items()}
    if hint in (int, float, str, bool):
        return _scalar(hint, json_scalar(value))
    raise TypeError(f"cannot store a value of {hint}")


def from_plain(hint: Any, data: Any, frames: typing.Sequence[Any]) -> Any:
    """The value ``to_plain(hint, ...)`` described, rebuilt from its declared types only; ValueError if it does not fit."""
    try:
        return _from_plain(hint, data, frames)
    except (TypeError, KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"not a stored {getattr(hint, '__name__', hint)}: {exc}") from None


def _from_plain(hint: Any, data: Any, frames: typing.Sequence[Any]) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if data is None:
        if hint is Any or hint is object or (origin in (typing.Union, types.UnionType) and type(None) in args):
            return None
        raise TypeError(f"None where {hint} belongs")
    if hint is Any or hint is object:
        return _checked_json(data)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return _from_plain(inner, data, frames)
    names = _record_fields(hint)
    if names is not None:
        hints = _hints(hint)
        if not isinstance(data, dict) or set(data) != set(names):
            raise TypeError(f"{hint.__name__} needs exactly the fields {names}")
        return hint(**{n: _from_plain(hints[n], data[n], frames) for n in names})
    if hint is np.ndarray:
        dtype = np.dtype(_text(data["dtype"]))
        if dtype.kind not in _NUMERIC_KINDS:
            raise TypeError(f"an array of {dtype}")
        shape = tuple(_scalar(int, n) for n in data["shape"])
        return np.frombuffer(base64.b64decode(_text(data["data"]), validate=True), dtype=dtype).reshape(shape).copy()
    if getattr(hint, "__name__", None) == "DataFrame":
        frame = frames[_scalar(int, data)]
        if not isinstance(frame, hint):
            raise TypeError("not a frame")
        return frame
    if origin in (list, tuple) or hint in (list, tuple):
        if not isinstance(data, list):
            raise TypeError(f"expected a list for {hint}")
        items = [_from_plain(h, v, frames) for h, v in zip(_item_hints(hint, len(data)), data, strict=True)]
        return tuple(items) if origin is tuple or hint is tuple else items
    if origin is dict or hint is dict:
        key_hint, value_hint = args or (str, Any)
        if not isinstance(data, dict):
            raise TypeError(f"expected a dict for {hint}")
        return {_key_value(key_hint, k): _from_plain(value_hint, v, frames) for k, v in data.items()}
    if hint in (int, float, str, bool):
        return _scalar(hint, data)
    raise TypeError(f"cannot read a value of {hint}")


def _record_fields(hint: Any) -> list[str] | None:
    """The fields a dataclass (those its constructor takes) or a NamedTuple is built from; None for other types."""
    if dataclasses.is_dataclass(hint):
        return [f.name for f in dataclasses.fields(hint) if f.init]
    if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields"):
        return list(hint._fields)
    return None


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _item_hints(hint: Any, n: int) -> list[Any]:
    args = typing.get_args(hint)
    if not args:
        return [Any] * n
    if typing.get_origin(hint) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(args) != n:
            raise TypeError(f"{hint} holds {len(args)} items, not {n}")
        return list(args)
    return [args[0]] * n


def _key_text(key_hint: Any, key: Any) -> str:
    if key_hint is int and isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return str(int(key))
    if key_hint is not int and isinstance(key, str):
        return key
    raise TypeError(f"cannot store a dict key {type(key).__name__}")


def _key_value(key_hint: Any, key: str) -> Any:
    return int(key) if key_hint is int else _text(key)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def json_scalar(value: Any) -> Any:
    """A numpy scalar as the Python number it holds; anything else unchanged."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _scalar(hint: type, value: Any) -> Any:
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if hint in (str, bool) and type(value) is hint:
        return value
    raise TypeError(f"expected {hint.__name__}, got {type(value).__name__}")


def _checked_json(value: Any) -> Any:
    """A value without a declared type must already be plain JSON (dicts with text keys, lists, scalars)."""
    value = json_scalar(value)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_checked_json(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _checked_json(v) for k, v in value.items()}
    raise TypeError(f"a {type(value).__name__} where only plain data is declared")
