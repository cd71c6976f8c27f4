"""Imports point one way: no import cycle between the kit's modules (every import counts, also one
inside a function: it hides a cycle, it does not remove it), and the target order of layers.

The layers, lowest first, each a folder of ``grpo_kit/``: errors; config; core (the GRPO math:
advantages, losses, preferences, metrics); data (items, tasks, run-folder files); model (batches,
sampling, log-probs, the tiny model, LoRA, memory, critic); rewards; eval; loop; lab; view;
engines; the CLI. No module imports a higher layer, ``core`` imports only itself and errors,
``config`` only errors, and no module imports another's private (``_name``) names.
"""
import ast
from pathlib import Path

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


# The order, lowest first; a module may import its own layer and the layers below. A layer is a
# folder of grpo_kit/ (errors, config, the CLI and the old-name aliases are single modules).
LAYERS = ["errors", "config", "core", "data", "model", "rewards", "eval", "loop", "lab", "view", "engines", "cli"]
TOP_LEVEL = {"errors": "errors", "config": "config", "cli": "cli", "compat": "cli", "": "cli"}  # "" is __init__


def layer_of(module: str) -> str:
    short = module.removeprefix("grpo_kit").removeprefix(".")
    if short in TOP_LEVEL:
        return TOP_LEVEL[short]
    folder = short.split(".")[0]
    assert folder in LAYERS, f"{module} has no layer: put it in a layer folder or add it to TOP_LEVEL"
    return folder


def layer_breaks(g) -> list[str]:
    """Imports that point up the layers, and those the two strict rules forbid: ``core`` imports only
    ``core`` and ``errors`` (the GRPO math stands alone), ``config`` only ``errors`` (a config is
    checked without loading a model, a reward or a task)."""
    out = []
    for m, ts in g.items():
        lm = layer_of(m)
        for t in ts:
            lt = layer_of(t)
            if LAYERS.index(lt) > LAYERS.index(lm):
                out.append(f"{m} ({lm}) imports {t} ({lt}), a higher layer")
            elif lm == "core" and lt not in ("core", "errors"):
                out.append(f"{m} (core) imports {t} ({lt}): core imports only core and errors")
            elif lm == "config" and lt != "errors":
                out.append(f"{m} (config) imports {t} ({lt}): config imports only errors")
    return sorted(out)


def private_imports(path: Path, known: set[str]) -> list[str]:
    """``from grpo_kit.x import _name`` of another module: a private name is that module's own business."""
    name = module_name(path)
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grpo_kit") and node.module != name:
            out += [f"{name} imports {node.module}.{a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_every_module_has_a_layer():
    for m in graph():
        layer_of(m)


def test_imports_point_down_the_layers():
    assert layer_breaks(graph()) == []


def test_the_rules_catch_a_break():
    g = {"grpo_kit.core.advantages": {"grpo_kit.rewards.judges"}, "grpo_kit.config": {"grpo_kit.core.losses"},
         "grpo_kit.model.tiny": {"grpo_kit.eval.inference"}, "grpo_kit.loop.train": {"grpo_kit.model.tiny"},
         "grpo_kit.core.losses": {"grpo_kit.config"}}
    assert layer_breaks(g) == [
        "grpo_kit.config (config) imports grpo_kit.core.losses (core), a higher layer",
        "grpo_kit.core.advantages (core) imports grpo_kit.rewards.judges (rewards), a higher layer",
        "grpo_kit.core.losses (core) imports grpo_kit.config (config): core imports only core and errors",
        "grpo_kit.model.tiny (model) imports grpo_kit.eval.inference (eval), a higher layer"]


def test_no_module_imports_another_modules_private_names():
    files = {module_name(p): p for p in PKG.rglob("*.py")}
    found = [line for p in files.values() for line in private_imports(p, set(files))]
    assert found == [], found


def test_old_module_names_still_import_the_moved_modules():
    import importlib

    from grpo_kit import compat

    for old, new in compat.OLD_NAMES.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    from grpo_kit.rewards.resolve import (
        resolve_reward_func,  # a saved config's reward, written before the move
    )
    assert resolve_reward_func("grpo_kit.failures:length_judge").__module__ == "grpo_kit.lab.failures"


SURFACE = {"grpo_kit", "grpo_kit.cli", *(f"grpo_kit.{layer}" for layer in
                                         ("core", "model", "data", "rewards", "loop", "eval", "lab", "view", "engines"))}


def test_notebooks_import_from_the_documented_surface():
    """A notebook imports from ``grpo_kit`` and the layer packages (each documents its names in its
    docstring and ``__all__``), or a layer's module as a whole (``from grpo_kit.loop import schedules``)."""
    import importlib

    bad = []
    for nb in sorted((PKG.parent / "notebooks").glob("*.py")):
        for node in ast.walk(ast.parse(nb.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                bad += [f"{nb.name}: import {a.name}" for a in node.names
                        if a.name.startswith("grpo_kit") and a.name not in SURFACE]
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grpo_kit")):
                continue
            if node.module not in SURFACE:
                bad.append(f"{nb.name}: from {node.module} import ...")
                continue
            package = importlib.import_module(node.module)
            for a in node.names:
                submodule = (PKG.parent / node.module.replace(".", "/") / f"{a.name}.py").is_file()
                if a.name not in getattr(package, "__all__", ()) and not submodule:
                    bad.append(f"{nb.name}: {a.name} is not in {node.module}.__all__")
    assert bad == []


def test_a_layer_package_exports_no_name_of_its_own_modules():
    """``from grpo_kit.loop import train`` must stay the module (mock paths, ``import ... as`` resolve it)."""
    import importlib

    for layer in sorted(SURFACE - {"grpo_kit", "grpo_kit.cli"}):
        package = importlib.import_module(layer)
        folder = PKG.parent / layer.replace(".", "/")
        for name in package.__all__:
            assert not (folder / f"{name}.py").is_file(), f"{layer}.__all__ has {name!r}, also a module there"
            assert getattr(package, name) is not None
