"""Read each serving engine's own argument-parser source and write the flag names and types it defines.

The engines are not imported (they need CUDA, torch and each other's pins): their source files are parsed with
``ast`` and the parser's own rules are applied to what is written there.

- **vLLM**: ``add_argument("--name", **<X>_kwargs["field"])`` calls of ``EngineArgs.add_cli_args``
  (``vllm/engine/arg_utils.py``) and one ``--field-name`` per field of ``FrontendArgs``
  (``vllm/entrypoints/openai/cli_args.py``); the type is the config dataclass field's annotation read the way
  ``arg_utils._compute_kwargs`` reads it (a dataclass → JSON, bool → ``--x``/``--no-x``, Literal → choices,
  list/tuple → list, int, float, dict → JSON, else text), ``Literal`` aliases resolved in the files read.
- **SGLang**: ``parser.add_argument(...)`` calls of ``python/sglang/srt/server_args.py``: names, ``type=``,
  ``action="store_true"``, ``choices=`` (a list, or a module-level list by name).
- **TensorRT-LLM**: the ``@click.option(...)`` decorators of ``serve`` in ``tensorrt_llm/commands/serve.py``:
  names, ``type=`` (``int``/``float``/``str``, ``click.Choice``/``ChoiceWithAlias`` of a list), ``is_flag=True``.

Usage (the wheels come from PyPI with ``pip download --no-deps --only-binary :all: vllm==0.11.0 sglang==0.5.3``;
TensorRT-LLM publishes only a redirect stub on PyPI, so its ``serve.py`` is given as a file read at a pinned
commit of its repository)::

    python scripts/extract_engine_flags.py --vllm-wheel vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl \\
        --sglang-wheel sglang-0.5.3-py3-none-any.whl --trtllm-serve serve.py --out data/engine_cli_source.json

Only the extracted names and types are written (with the release, file hashes and paths they came from), never
the engines' code.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
import zipfile
from datetime import date
from pathlib import Path
from typing import Any, Iterable

ROOT = Path(__file__).resolve().parents[1]

# Where each engine's source was read. The wheel hashes are checked before anything is read.
PINS: dict[str, dict[str, str]] = {
    "vllm": {"release": "0.11.0", "file": "vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl",
             "sha256": "3861c75ff2b12e24f6d179ff5c084d791b42ded8675d76c8706697c79f68cd62",
             "where": "PyPI wheel (pip download --no-deps --only-binary :all: vllm==0.11.0)"},
    "sglang": {"release": "0.5.3", "file": "sglang-0.5.3-py3-none-any.whl",
               "sha256": "14b20822b7c36d7069556e559181bcaa1d3d44b2b0fcbf8818313af4ca22ae7f",
               "where": "PyPI wheel (pip download --no-deps --only-binary :all: sglang==0.5.3)"},
    "trtllm": {"release": "main of the 1.x line", "repository": "NVIDIA/TensorRT-LLM",
               "commit": "00209af149e7774406881a37283dce303571eb11",
               "where": "the `serve` command's click decorators of tensorrt_llm/commands/serve.py at that commit, "
                        "copied as read (help texts left out; the repository snapshot is too large to fetch whole, "
                        "and PyPI's tensorrt-llm 1.0.0-1.2.1 are redirect stubs without source)"},
}
VLLM_FILES = ("vllm/engine/arg_utils.py", "vllm/entrypoints/openai/cli_args.py",
              "vllm/model_executor/layers/quantization/__init__.py")
VLLM_CONFIG_DIR = "vllm/config/"
SGLANG_FILES = ("sglang/srt/server_args.py", "sglang/version.py")
SCALARS = {"int": "int", "float": "float", "str": "str"}


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_wheel(path: Path, engine: str, names: Iterable[str], prefix: str | None = None) -> dict[str, str]:
    """The named members (and every ``.py`` under ``prefix``) of a pinned wheel, after checking its hash."""
    found = sha256(path)
    if found != PINS[engine]["sha256"]:
        raise SystemExit(f"{path.name}: sha256 {found} is not the pinned {PINS[engine]['sha256']}")
    with zipfile.ZipFile(path) as wheel:
        members = [n for n in wheel.namelist() if n in names or (prefix and n.startswith(prefix) and n.endswith(".py"))]
        return {n: wheel.read(n).decode("utf-8") for n in sorted(members)}


# --- annotations ---------------------------------------------------------------------------------------------
def _literal_aliases(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Module-level ``Name = Literal[...]`` aliases of every file read."""
    aliases: dict[str, list[str]] = {}
    for tree in trees.values():
        for node in tree.body:
            target, value = None, None
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target, value = node.targets[0].id, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                target, value = node.target.id, node.value
            if target and isinstance(value, ast.Subscript) and _name(value.value) == "Literal":
                aliases[target] = _constants(value.slice)
    return aliases


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _constants(node: ast.AST) -> list[str]:
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
    return [str(e.value) for e in elts if isinstance(e, ast.Constant)]


def _hints(node: ast.AST) -> list[ast.AST]:
    """The alternatives of an annotation: Optional/Union/``|``/SkipValidation/Annotated unwrapped."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _hints(node.left) + _hints(node.right)
    if isinstance(node, ast.Subscript):
        outer = _name(node.value)
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if outer in ("Optional", "SkipValidation"):
            return _hints(inner[0]) + ([ast.Constant(None)] if outer == "Optional" else [])
        if outer == "Union":
            return [h for part in inner for h in _hints(part)]
        if outer == "Annotated":
            return _hints(inner[0])
    return [node]


def vllm_type(annotation: ast.AST, aliases: dict[str, list[str]], dataclasses: set[str]) -> dict[str, Any]:
    """The CLI type vLLM's ``_compute_kwargs`` gives a config field of this annotation (same order of rules)."""
    hints = _hints(annotation)
    names = [_name(h.value) if isinstance(h, ast.Subscript) else _name(h) for h in hints]
    literal = [v for h in hints if isinstance(h, ast.Subscript) and _name(h.value) == "Literal"
               for v in _constants(h.slice)]
    literal += [v for h in hints if _name(h) in aliases for v in aliases[_name(h)]]
    if any(n in dataclasses for n in names):
        return {"type": "json"}
    if "bool" in names:
        return {"type": "bool_optional"}
    if literal:
        return {"type": "choice", "choices": literal}
    if any(n in ("list", "tuple", "List", "Tuple") for n in names):
        return {"type": "list"}
    for scalar in ("int", "float"):
        if scalar in names:
            return {"type": scalar}
    if any(n in ("dict", "Dict") for n in names):
        return {"type": "json"}
    return {"type": "str"}


def _class_fields(trees: dict[str, ast.Module]) -> tuple[dict[str, dict[str, ast.AST]], set[str]]:
    """Annotated fields per class, and the names of classes decorated as dataclasses/configs."""
    fields: dict[str, dict[str, ast.AST]] = {}
    dataclasses: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                own = {s.target.id: s.annotation for s in node.body
                       if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
                fields.setdefault(node.name, {}).update(own)
                decorators = {_name(d.func) if isinstance(d, ast.Call) else _name(d) for d in node.decorator_list}
                if decorators & {"dataclass", "config"}:
                    dataclasses.add(node.name)
    return fields, dataclasses


def _override(spec: dict[str, Any], call: ast.Call, lists: dict[str, list[str]]) -> dict[str, Any]:
    """Explicit ``type=``, ``action=``, ``choices=``, ``is_flag=`` keywords of an add_argument/option call."""
    for kw in call.keywords:
        if kw.arg == "action":
            action = kw.value.value if isinstance(kw.value, ast.Constant) else _name(kw.value)
            if action in ("store_true", "store_false"):
                spec = {"type": "flag"}
            elif action == "BooleanOptionalAction":
                spec = {"type": "bool_optional"}
        elif kw.arg == "is_flag" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
            spec = {"type": "flag"}
        elif kw.arg == "type":
            spec = _typed(kw.value, spec)
        elif kw.arg == "choices":
            choices = _choices(kw.value, lists)
            spec = {"type": "choice", "choices": choices} if choices is not None else {**spec, "choices": "dynamic"}
    return spec


def _typed(node: ast.AST, spec: dict[str, Any]) -> dict[str, Any]:
    name = _name(node.func) if isinstance(node, ast.Call) else _name(node)
    if name in SCALARS:
        return {"type": SCALARS[name]}
    if name in ("Choice", "ChoiceWithAlias") and isinstance(node, ast.Call) and node.args:
        choices = _constants(node.args[0]) if isinstance(node.args[0], (ast.List, ast.Tuple)) else None
        return {"type": "choice", "choices": choices} if choices else {"type": "choice", "choices": "dynamic"}
    if name == "loads":
        return {"type": "json"}
    if name in ("nullable_str", "Path"):
        return {"type": "str"}
    return {**spec, "type": spec.get("type", "str"), "parser": ast.unparse(node)}


def _choices(node: ast.AST, lists: dict[str, list[str]]) -> list[str] | None:
    if isinstance(node, (ast.List, ast.Tuple)):
        return _constants(node)
    if isinstance(node, ast.Name) and node.id in lists:
        return lists[node.id]
    return None


def _option_names(call: ast.Call) -> list[str]:
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
            and a.value.startswith("--")]


# --- engines ---------------------------------------------------------------------------------------------------
def vllm_flags(sources: dict[str, str]) -> dict[str, dict[str, Any]]:
    """vLLM's ``vllm serve`` flags: EngineArgs.add_cli_args calls and FrontendArgs fields."""
    trees = {path: ast.parse(text) for path, text in sources.items()}
    aliases = _literal_aliases(trees)
    fields, dataclasses = _class_fields(trees)
    flags: dict[str, dict[str, Any]] = {}
    engine = trees["vllm/engine/arg_utils.py"]
    kwargs_of: dict[str, str] = {}
    for node in ast.walk(engine):   # model_kwargs = get_kwargs(ModelConfig)
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _name(node.value.func) == "get_kwargs"
                and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.value.args):
            kwargs_of[node.targets[0].id] = _name(node.value.args[0])
    for node in ast.walk(engine):
        if not (isinstance(node, ast.Call) and _name(node.func) == "add_argument"):
            continue
        names = _option_names(node)
        if not names:
            continue
        spec: dict[str, Any] = {"type": "str"}
        origin = ""
        for kw in node.keywords:   # **model_kwargs["max_model_len"]
            if kw.arg is None and isinstance(kw.value, ast.Subscript) and isinstance(kw.value.value, ast.Name):
                cls = kwargs_of.get(kw.value.value.id, "")
                field = kw.value.slice.value if isinstance(kw.value.slice, ast.Constant) else ""
                if field in fields.get(cls, {}):
                    spec = vllm_type(fields[cls][field], aliases, dataclasses)
                    origin = f"{cls}.{field}"
        spec = _override(spec, node, {})
        _add(flags, names, spec, "vllm/engine/arg_utils.py", origin)
    for field, annotation in fields["FrontendArgs"].items():   # for key in frontend_kwargs: --key-with-dashes
        spec = vllm_type(annotation, aliases, dataclasses)
        _add(flags, [f"--{field.replace('_', '-')}"], spec, "vllm/entrypoints/openai/cli_args.py",
             f"FrontendArgs.{field}")
    return flags


def sglang_flags(sources: dict[str, str]) -> dict[str, dict[str, Any]]:
    """SGLang's ``python -m sglang.launch_server`` flags: the add_argument calls of server_args.py."""
    tree = ast.parse(sources["sglang/srt/server_args.py"])
    lists = {n.targets[0].id: _constants(n.value) for n in tree.body
             if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
             and isinstance(n.value, (ast.List, ast.Tuple))}
    flags: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) == "add_argument" and _option_names(node):
            _add(flags, _option_names(node), _override({"type": "str"}, node, lists), "sglang/srt/server_args.py", "")
    return flags


def trtllm_flags(text: str) -> dict[str, dict[str, Any]]:
    """TensorRT-LLM's ``trtllm-serve serve`` flags: the click options decorating ``serve``."""
    tree = ast.parse(text)
    flags: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "serve":
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and _name(decorator.func) == "option":
                    _add(flags, _option_names(decorator), _override({"type": "str"}, decorator, {}),
                         "tensorrt_llm/commands/serve.py", "")
    if not flags:
        raise SystemExit("no click option of `serve` found in the TensorRT-LLM file given")
    return flags


def _add(flags: dict[str, dict[str, Any]], names: list[str], spec: dict[str, Any], path: str, origin: str) -> None:
    entry = {**spec, "file": path, **({"field": origin} if origin else {})}
    if len(names) > 1:
        entry["aliases"] = names
    for name in names:
        flags[name] = entry
        if spec["type"] == "bool_optional" and not name.startswith("--no-"):
            flags["--no-" + name[2:]] = entry   # argparse.BooleanOptionalAction adds the negative form


def main(argv: list[str] | None = None) -> int:
    """Parse the three engines' sources and write the JSON document."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-wheel", type=Path, required=True)
    parser.add_argument("--sglang-wheel", type=Path, required=True)
    parser.add_argument("--trtllm-serve", type=Path, required=True,
                        help="tensorrt_llm/commands/serve.py at the pinned commit, or its `serve` decorators")
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "engine_cli_source.json")
    args = parser.parse_args(argv)

    vllm_src = _read_wheel(args.vllm_wheel, "vllm", VLLM_FILES, VLLM_CONFIG_DIR)
    sglang_src = _read_wheel(args.sglang_wheel, "sglang", SGLANG_FILES)
    trtllm_text = args.trtllm_serve.read_text(encoding="utf-8")
    engines = {
        "vllm": {**PINS["vllm"], "command": "vllm serve", "paths": sorted(vllm_src), "flags": vllm_flags(vllm_src)},
        "sglang": {**PINS["sglang"], "command": "python -m sglang.launch_server", "paths": sorted(sglang_src),
                   "flags": sglang_flags(sglang_src)},
        "trtllm": {**PINS["trtllm"], "command": "trtllm-serve serve", "paths": ["tensorrt_llm/commands/serve.py"],
                   "excerpt_sha256": sha256(args.trtllm_serve), "flags": trtllm_flags(trtllm_text)},
    }
    for spec in engines.values():
        spec["flags"] = dict(sorted(spec["flags"].items()))
    doc = {
        "_about": "Every flag each engine's own argument parser defines, with its type, extracted from the engine's "
                  "source by scripts/extract_engine_flags.py (ast, no import). Types: int, float, str, choice "
                  "(choices listed, or 'dynamic' when the source builds them at run time), flag (store_true / "
                  "is_flag: no value), bool_optional (argparse BooleanOptionalAction: --x and --no-x, no value), "
                  "json, list. tests/unit/test_deploy_configs.py checks every flag shapeviz emits against this file.",
        "extracted_on": date.today().isoformat(),
        "engines": engines,
    }
    args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    counts = ", ".join(f"{k} {len(v['flags'])}" for k, v in engines.items())
    print(f"wrote {args.out.name}: {counts} flags", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
