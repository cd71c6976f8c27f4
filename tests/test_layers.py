"""Imports point one way: no import cycle between the kit's modules (every import counts, also one
inside a function: it hides a cycle, it does not remove it), and the target order of layers.

The layer order is the target of the layered core (lowest first): errors; core (the GRPO math:
advantages, losses, preferences, log-probs, metrics); config; model and data; rewards; loop; eval;
lab; view; engines; the CLI. The modules still sit flat in ``grpo_kit/`` and some still import
upwards, so the order test is a strict xfail that lists what breaks it; it turns into a plain test
once the files have moved.
"""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "grpo_kit"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def kit_imports(path: Path, known: set[str]) -> set[str]:
    """The kit modules ``path`` imports anywhere in its body (``from . import x`` counts x)."""
    name, is_pkg = module_name(path), path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            up = base[:len(base) - node.level + 1] if node.level else []
            mod = ".".join(up + ([node.module] if node.module else [])) if node.level else (node.module or "")
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in known and t != name}
    # a module's parent packages are imported before it in any case: ``from . import judges`` is an edge
    # to judges, not to grpo_kit/__init__.py
    parents = {".".join(name.split(".")[:i]) for i in range(1, len(name.split(".")))}
    return found - parents


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PKG.rglob("*.py")}
    known = set(files)
    return {m: kit_imports(p, known) for m, p in files.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
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

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_walker_sees_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "grpo_kit"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("def f():\n    from .b import x\n    from . import c\n")
    known = {"grpo_kit.a", "grpo_kit.b", "grpo_kit.c", "grpo_kit.sub.d"}
    global PKG
    saved, PKG = PKG, pkg
    try:
        assert kit_imports(pkg / "a.py", known) == {"grpo_kit.b", "grpo_kit.c"}
        (pkg / "sub" / "d.py").write_text("from ..a import f\n")
        assert kit_imports(pkg / "sub" / "d.py", known) == {"grpo_kit.a"}
    finally:
        PKG = saved
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    found = cycles(graph())
    assert found == [], found


# The target order, lowest first; a module may import its own layer and the layers below.
LAYERS = [
    ("errors", {"errors"}),
    ("core", {"advantages", "losses", "preferences", "logprobs", "metrics"}),
    ("config", {"config"}),
    ("model", {"sampling", "tiny", "lora", "memory", "critic", "tasks"}),
    ("rewards", {"judges", "learned_judge", "remote", "resolve", "serve", "symbolic"}),
    ("loop", {"step", "train", "schedules", "dynamic", "replay", "beyond_scalar", "runfolder"}),
    ("eval", {"inference", "diagnostics"}),
    ("lab", {"failures", "population", "offline"}),
    ("view", {"plotting", "dashboard", "widgets", "nbtools"}),
    ("engines", {"engines", "engines.trl_engine", "engines.verl_export", "export"}),
    ("cli", {"cli", ""}),  # "" is grpo_kit/__init__.py, the public API
]


def layer_of(module: str) -> int:
    short = module.removeprefix("grpo_kit").removeprefix(".")
    for i, (_, names) in enumerate(LAYERS):
        if short in names:
            return i
    raise AssertionError(f"{module} has no layer: add it to LAYERS")


def upward_imports(g) -> list[str]:
    return sorted(f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
                  for m, ts in g.items() for t in ts if layer_of(t) > layer_of(m))


def test_every_module_has_a_layer():
    for m in graph():
        layer_of(m)


@pytest.mark.xfail(strict=True, reason="the files have not moved into their layers yet: see upward_imports(graph())")
def test_imports_point_down_the_layers():
    assert upward_imports(graph()) == []
