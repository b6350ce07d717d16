"""The house: every module of ``shapeviz/`` imports only its own layer or the layers below it, with no circle.

The layers are the table in ``docs/ARCHITECTURE.md``. Imports are read from the source (function-level ones
too), so an import tucked inside a function to dodge a circle is caught like any other.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "shapeviz"

# The first matching prefix decides a module's layer (longest prefixes first).
LAYERS: dict[str, int] = {
    "shapeviz": 0, "shapeviz.schema": 0, "shapeviz.datadir": 0, "shapeviz.text": 0, "shapeviz.plain": 0, "shapeviz.progress": 0,
    "shapeviz.plotstyle": 0,
    "shapeviz.ingest": 1,
    "shapeviz.workload": 2,
    "shapeviz.physics": 3,
    "shapeviz.analyses": 4,
    "shapeviz.serving": 5,
    "shapeviz.fleet": 6,
    "shapeviz.recommend": 7, "shapeviz.analysis": 7,
    "shapeviz.outputs": 8,
    "shapeviz.cli": 9, "shapeviz.__main__": 9,
}
# Function-level imports of shapeviz modules are allowed only for the command line's dispatch to a subcommand.
LAZY_ALLOWED = {"shapeviz.cli"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return LAYERS[prefix]
    raise AssertionError(f"{module} is in no layer: add it to docs/ARCHITECTURE.md and to LAYERS here")


def imports_of(path: Path) -> list[tuple[str, int, bool]]:
    """(imported shapeviz module, line, inside a function?) for every import statement of a file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, in_function) for a in child.names if a.name.startswith("shapeviz"))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - child.level + 1] + ([base] if base else []))
                if base.startswith("shapeviz"):
                    for a in child.names:   # `from shapeviz.analyses import prefix` imports a module
                        sub = f"{base}.{a.name}"
                        target = sub if (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists() or \
                            (PACKAGE.parent / sub.replace(".", "/")).is_dir() else base
                        found.append((target, child.lineno, in_function))
            visit(child, nested)

    visit(tree, False)
    return found


def graph() -> dict[str, list[tuple[str, int, bool]]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_has_a_layer() -> None:
    for module in graph():
        layer_of(module)


def test_no_import_points_up() -> None:
    upward = []
    for module, imports in graph().items():
        for target, line, _ in imports:
            if layer_of(target) > layer_of(module):
                upward.append(f"{module}:{line} imports {target} (layer {layer_of(module)} → {layer_of(target)})")
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)


def test_no_function_level_import_dodges_a_circle() -> None:
    lazy = [f"{module}:{line} imports {target} inside a function"
            for module, imports in graph().items() for target, line, inside in imports
            if inside and not any(module == a or module.startswith(a + ".") for a in LAZY_ALLOWED)]
    assert not lazy, "\n".join(lazy)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            strong(v)
    return out


def test_no_circle_of_imports() -> None:
    g = graph()
    # A package's __init__ re-exporting its own modules is not a circle of the house: drop parent→child edges.
    edges = {m: {t for t, _, _ in imps if t in g and t != m and not t.startswith(m + ".")} for m, imps in g.items()}
    assert _cycles(edges) == []


def test_the_circle_check_finds_a_planted_circle() -> None:
    """The cycle finder itself can fail: a planted a → b → c → a is found, a tail into it is not part of it."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
