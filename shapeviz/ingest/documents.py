"""Small untrusted documents (fleet files, plans, load-test results): read bounded, checked, said in one line.

The command line reads fleet, plan and result files people pass around, and the dashboard reads uploaded results.
Each is parsed as data and nothing else, and every way a hostile one could cost the server is closed here:

- its size is capped before it is read whole (``max_bytes``);
- JSON integers longer than ``MAX_INT_DIGITS`` digits are refused while parsing (a 400-digit integer would
  overflow the first ``float()`` it meets), and so is nesting deeper than ``MAX_DEPTH`` (no ``RecursionError``);
- a YAML document is composed (no Python objects: safe loading) and refused when its aliases would expand it past
  ``MAX_YAML_NODES`` nodes, before anything is built or printed (a 400-byte alias bomb is a billion nodes);
- values quoted in a message are shortened (``short``), so a message is one line however big the value.
"""
from __future__ import annotations

import json
import math
import reprlib
from pathlib import Path
from typing import Any

MIB = 1 << 20
MAX_DOCUMENT_BYTES = 16 * MIB    # a fleet file or a plan: a few kB in practice
MAX_INT_DIGITS = 30              # nanosecond timestamps have 19
MAX_DEPTH = 64                   # nesting of objects and arrays
MAX_YAML_NODES = 100_000         # nodes of a YAML document once its aliases are expanded

_SHORT = reprlib.Repr()
_SHORT.maxstring = 60
_SHORT.maxother = 60
_SHORT.maxlong = 40
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 6
_SHORT.maxlevel = 3


def short(value: Any) -> str:
    """``repr(value)`` cut to a few dozen characters: what a message may quote of an untrusted value."""
    return _SHORT.repr(value)


def read_capped(path: str | Path, what: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> bytes:
    """A file's bytes; ValueError when it is missing or larger than ``max_bytes`` (never read past the cap)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {p.name!r} not found")
    with p.open("rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{what} {p.name!r} is larger than {max_bytes // MIB} MiB; this is not a {what}")
    return data


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text):,} digits")
    return int(text)


def _depth_ok(value: Any, max_depth: int = MAX_DEPTH) -> bool:
    """True when no object or array nests deeper than ``max_depth`` (iterative: any depth is measured safely).

    A container shared by several parents (a YAML alias) is walked again only when met deeper than before.
    """
    deepest: dict[int, int] = {}
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > max_depth:
            return False
        if deepest.get(id(node), 0) >= depth:
            continue
        deepest[id(node)] = depth
        stack.extend((child, depth + 1) for child in children)
    return True


def parse_json(data: bytes | str, name: str) -> Any:
    """One JSON document, with bounded integers and nesting; ValueError with one line otherwise."""
    try:
        text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
        document = json.loads(text, parse_int=_bounded_int)
    except RecursionError:
        raise ValueError(f"{name}: nested more than {MAX_DEPTH} levels deep") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{name}: not UTF-8 text") from None
    except ValueError as exc:   # an over-long integer
        raise ValueError(f"{name}: {str(exc).splitlines()[0][:80]} is refused (at most {MAX_INT_DIGITS} digits)") from None
    if not _depth_ok(document):
        raise ValueError(f"{name}: nested more than {MAX_DEPTH} levels deep")
    return document


def _expanded_nodes(root: Any, cap: int) -> int | None:
    """Nodes of a composed YAML document with every alias expanded (stops past ``cap``); None for a cycle."""
    import yaml

    size: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        if done:
            open_.discard(id(node))
            size[id(node)] = min(1 + sum(size[id(c)] for c in children), cap + 1)
            continue
        if id(node) in size:
            continue
        if id(node) in open_:
            return None
        open_.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_:
                return None   # an alias inside itself: a recursive document
            if id(child) not in size:
                stack.append((child, False))
    return size[id(root)]


def parse_yaml(text: str, name: str) -> Any:
    """One YAML document, safely (plain data only), refused when aliases would expand it past ``MAX_YAML_NODES``."""
    import yaml  # optional: only YAML fleet files need it

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        nodes = _expanded_nodes(node, MAX_YAML_NODES)
        if nodes is None or nodes > MAX_YAML_NODES:
            raise ValueError(f"{name}: its aliases expand to more than {MAX_YAML_NODES:,} values (or refer to "
                             "themselves); write the values out")
        document = loader.construct_document(node)
    except RecursionError:
        raise ValueError(f"{name}: nested more than {MAX_DEPTH} levels deep") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{name}: not valid YAML ({str(exc).splitlines()[0][:120]})") from None
    finally:
        loader.dispose()
    if not _depth_ok(document):
        raise ValueError(f"{name}: nested more than {MAX_DEPTH} levels deep")
    return document


def finite_number(value: Any, where: str, *, low: float = 0.0, high: float = math.inf,
                  strict_low: bool = True) -> float:
    """``value`` as a finite float with ``low < value <= high`` (``low <= value`` when not strict)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} must be a number, got {short(value)}")
    try:
        v = float(value)
    except OverflowError:
        v = math.inf
    below = v <= low if strict_low else v < low
    if not math.isfinite(v) or below or v > high:
        bound = f"{'>' if strict_low else '≥'} {low:g}" + (f" and at most {high:g}" if math.isfinite(high) else "")
        raise ValueError(f"{where} must be a finite number {bound}, got {short(value)}")
    return v


def whole_number(value: Any, where: str, *, high: int, low: int = 1) -> int:
    """``value`` as an int in ``[low, high]``; ValueError (never OverflowError) for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not math.isfinite(value)) or not low <= value <= high \
            or int(value) != value:
        raise ValueError(f"{where} must be a whole number from {low:,} to {high:,}, got {short(value)}")
    return int(value)
