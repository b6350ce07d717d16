"""The engines' flag names and types, as read from their CLI sources (``data/engine_flags.json``), and a checker.

Every config shapeviz emits is checked against this file, so a renamed or retyped flag shows up as a failed
test instead of a server that refuses to start.
"""
from __future__ import annotations

import json
import math
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from shapeviz.datadir import DATA_DIR

FLAGS_PATH = DATA_DIR / "engine_flags.json"
ENGINES: tuple[str, ...] = ("vllm", "sglang", "trtllm")
NO_VALUE_TYPES = frozenset({"flag", "bool_optional"})


@lru_cache(maxsize=2)
def load_flags(path: Path | None = None) -> dict[str, Any]:
    """The flags document (engines → command, version, source, flags, yaml_keys; model_repos)."""
    with open(path or FLAGS_PATH, encoding="utf-8") as fh:
        return json.load(fh)


def engine_spec(engine: str) -> dict[str, Any]:
    """One engine's entry of the flags document; ValueError naming the known engines otherwise."""
    engines = load_flags()["engines"]
    if engine not in engines:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(sorted(engines))}")
    return engines[engine]


def model_repo(model_id: str) -> str | None:
    """The Hugging Face repo id assumed for a shapeviz model id (None when the catalogue has none)."""
    repos = load_flags()["model_repos"]
    return repos.get(model_id)


def check_value(spec: Mapping[str, Any], value: str | None) -> str | None:
    """Why ``value`` would not parse as this flag's type (None when it parses)."""
    kind = spec["type"]
    if kind in NO_VALUE_TYPES:
        return None if value is None else f"takes no value, got {value!r}"
    if value is None:
        return f"needs a {kind} value"
    if kind == "str":
        return None if value != "" else "needs a non-empty value"
    if kind == "int":
        try:
            int(value, 10)
        except ValueError:
            return f"{value!r} is not an integer"
        return _in_range(spec, float(value))
    if kind == "float":
        try:
            number = float(value)
        except ValueError:
            return f"{value!r} is not a number"
        return f"{value!r} is not finite" if not math.isfinite(number) else _in_range(spec, number)
    if kind == "bool":
        return None if value in ("true", "false") else f"{value!r} is not true/false"
    if kind == "choice":
        return None if value in spec["choices"] else f"{value!r} is not one of {spec['choices']}"
    if kind == "json":
        try:
            document = json.loads(value)
        except json.JSONDecodeError as exc:
            return f"is not JSON ({exc.msg})"
        if not isinstance(document, dict):
            return "must be a JSON object"
        for key, allowed in spec.get("json_keys", {}).items():
            if key in document and document[key] not in allowed:
                return f"{key}={document[key]!r} is not one of {allowed}"
        return None
    raise ValueError(f"internal: unknown flag type {kind!r} in {FLAGS_PATH.name}")


def _in_range(spec: Mapping[str, Any], number: float) -> str | None:
    lo, hi = spec.get("min"), spec.get("max")
    if lo is not None and number <= lo:
        return f"{number:g} must be above {lo:g}"
    if hi is not None and number > hi:
        return f"{number:g} must be at most {hi:g}"
    return None


def check_args(engine: str, args: list[str]) -> list[str]:
    """Problems of an argument list (after the command and positional model) against the engine's flags."""
    flags = engine_spec(engine)["flags"]
    problems: list[str] = []
    i = 0
    while i < len(args):
        name = args[i]
        if name not in flags:
            problems.append(f"{engine}: unknown flag {name!r}")
            i += 1
            continue
        spec = flags[name]
        if spec["type"] in NO_VALUE_TYPES:
            value = None
            i += 1
        else:
            value = args[i + 1] if i + 1 < len(args) else None
            i += 2
        why = check_value(spec, value)
        if why:
            problems.append(f"{engine} {name}: {why}")
    return problems


def check_command(engine: str, command: str) -> list[str]:
    """Problems of a whole shell command line (``vllm serve MODEL --flag v ...``) against the engine's flags."""
    spec = engine_spec(engine)
    words = shlex.split(command, comments=True)
    prefix = shlex.split(spec["command"])
    if words[: len(prefix)] != prefix:
        return [f"{engine}: command must start with {spec['command']!r}"]
    rest = words[len(prefix):]
    if spec.get("positional"):
        if not rest or rest[0].startswith("--"):
            return [f"{engine}: the model ({spec['positional']}) must follow {spec['command']!r}"]
        rest = rest[1:]
    return check_args(engine, rest)


def check_yaml_keys(engine: str, options: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Problems of a nested options mapping (TensorRT-LLM's extra LLM API YAML) against the engine's keys."""
    keys = engine_spec(engine).get("yaml_keys", {})
    problems: list[str] = []
    for key, value in options.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            problems.extend(check_yaml_keys(engine, value, prefix=f"{dotted}."))
            continue
        if dotted not in keys:
            problems.append(f"{engine}: unknown option {dotted!r}")
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        why = check_value(keys[dotted], text)
        if why:
            problems.append(f"{engine} {dotted}: {why}")
    return problems
