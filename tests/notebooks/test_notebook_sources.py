"""The notebook sources (jupytext percent files, notebooks/NN_name.py) are real code, and the .ipynb match them.

- every ``.py`` has its ``.ipynb`` and they are in sync: regenerating the notebook from the source
  with jupytext (what ``jupytext --to ipynb --update`` writes) gives the committed file byte for byte;
- the committed notebooks carry no outputs;
- ruff finds nothing in the sources;
- each source compiles, and every ``grpo_kit`` name it imports exists.
"""
from __future__ import annotations

import ast
import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NB = ROOT / "notebooks"
SOURCES = sorted(NB.glob("[0-9][0-9]*_*.py"))
IDS = [p.stem for p in SOURCES]


def sync_command(py: Path) -> str:
    rel = py.relative_to(ROOT)
    return f".venv/bin/jupytext --to ipynb --update {rel}"


def test_every_notebook_has_a_source_and_back():
    notebooks = sorted(p.stem for p in NB.glob("[0-9][0-9]*_*.ipynb") if not p.stem.endswith(".out"))
    assert len(SOURCES) >= 4, "the notebook sources notebooks/NN_name.py are missing"
    assert notebooks == IDS, f"notebooks without a source or sources without a notebook: {set(notebooks) ^ set(IDS)}"


@pytest.mark.parametrize("py", SOURCES, ids=IDS)
def test_source_and_notebook_are_in_sync(py, tmp_path):
    """Regenerate the .ipynb from the .py in a scratch folder and compare bytes."""
    from jupytext.cli import jupytext as jupytext_cli

    ipynb = py.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.relative_to(ROOT)} is missing; create it with: {sync_command(py)}"
    for f in (py, ipynb, NB / "jupytext.toml"):
        shutil.copy(f, tmp_path / f.name)
    jupytext_cli(["--quiet", "--to", "ipynb", "--update", str(tmp_path / py.name)])
    want = (tmp_path / ipynb.name).read_text()
    assert ipynb.read_text() == want, (
        f"{py.relative_to(ROOT)} and {ipynb.relative_to(ROOT)} are out of sync. If you edited the .py, run: "
        f"{sync_command(py)}  (if you edited the .ipynb: .venv/bin/jupytext --sync {py.relative_to(ROOT)} "
        "updates the older of the two)")


@pytest.mark.parametrize("py", SOURCES, ids=IDS)
def test_notebook_is_committed_without_outputs(py):
    nb = json.loads(py.with_suffix(".ipynb").read_text())
    dirty = [i for i, c in enumerate(nb["cells"])
             if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, (f"{py.with_suffix('.ipynb').name}: cells {dirty} carry outputs; clear them "
                       f"(JupyterLab: Edit > Clear Outputs of All Cells) or regenerate with {sync_command(py)}")


def test_sources_pass_ruff():
    ruff = Path(sys.executable).with_name("ruff")
    exe = str(ruff) if ruff.exists() else shutil.which("ruff")
    assert exe, "ruff is not installed: pip install -r requirements.txt (it pins ruff)"
    res = subprocess.run([exe, "check", "--no-cache", *map(str, SOURCES)], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, f"ruff found problems in the notebook sources:\n{res.stdout}{res.stderr}"


def grpo_kit_imports(tree: ast.AST):
    """(module, name or None, line) for every import of grpo_kit in a parsed source."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "grpo_kit":
                    yield a.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "grpo_kit":
            for a in node.names:
                yield node.module, a.name, node.lineno


@pytest.mark.parametrize("py", SOURCES, ids=IDS)
def test_source_compiles_and_its_grpo_kit_imports_resolve(py):
    text = py.read_text()
    tree = ast.parse(text, filename=str(py))
    compile(tree, str(py), "exec")
    found = list(grpo_kit_imports(tree))
    assert found, f"{py.name} imports nothing from grpo_kit: a notebook teaches the kit's own code"
    for module, name, line in found:
        mod = importlib.import_module(module)
        if name is not None and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                pytest.fail(f"{py.name}:{line}: `from {module} import {name}`: {module} has no {name}")


@pytest.mark.parametrize("py", SOURCES, ids=IDS)
def test_parameters_cell_honours_the_smoke_environment_variable(py):
    """The browser test (and a Jupyter server started with GRPO_KIT_SMOKE=1) cannot pass papermill parameters:
    each notebook's parameters cell must read GRPO_KIT_SMOKE, or the notebook runs at full size there."""
    text = py.read_text()
    start = text.index('# %% tags=["parameters"]')
    cell = text[start:text.index("# %%", start + 10)]
    assert 'os.environ.get("GRPO_KIT_SMOKE") == "1"' in cell and "SMOKE = SMOKE or" in cell, (
        f"{py.name}: its parameters cell does not read GRPO_KIT_SMOKE; add "
        f"SMOKE = SMOKE or os.environ.get(\"GRPO_KIT_SMOKE\") == \"1\" after SMOKE = False")


# ------------------------------------------------------------------ every notebook ends the same way
def _section(text: str, heading: str) -> list[str]:
    """The comment lines of a markdown section ``# ## heading`` up to the next heading or cell."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == f"# ## {heading}"]
    if not starts:
        return []
    out = []
    for line in lines[starts[0] + 1:]:
        if line.startswith("# ## ") or line.startswith("# %%") or line.startswith("# <details>"):
            break
        out.append(line)
    return out


def _hidden_code_cells(text: str) -> list[str]:
    """The code cells collapsed in JupyterLab (``# %% jupyter={"source_hidden": true}``, not markdown)."""
    cells = re.split(r"^# %%", text, flags=re.M)
    return [c for c in cells if c.startswith(' jupyter={"source_hidden": true}')]


@pytest.mark.parametrize("py", SOURCES, ids=IDS)
def test_each_notebook_opens_and_ends_like_the_series(py):
    """The smoke banner at the top; a Summary of 3-5 bullets; 3-5 questions; an exercise whose worked
    solution is a collapsed code cell that asserts; a Next link to the following notebook (the last
    one back to the index), so the chain reaches every notebook in order."""
    text = py.read_text()
    name = py.name
    assert "smoke_banner(SMOKE)" in text, f"{name}: call smoke_banner(SMOKE) after the imports"
    bullets = [line for line in _section(text, "Summary") if line.startswith("# - ")]
    assert 3 <= len(bullets) <= 5, f"{name}: a '# ## Summary' of 3-5 bullets ('# - '), found {len(bullets)}"
    questions = [line for line in _section(text, "Questions") if re.match(r"# \d+\. ", line)]
    assert 3 <= len(questions) <= 5, f"{name}: a '# ## Questions' section of 3-5 numbered questions, found {len(questions)}"
    assert re.search(r"^# ## Exercises?\b", text, flags=re.M), f"{name}: an '# ## Exercises' section"
    solutions = [c for c in _hidden_code_cells(text) if re.search(r"^\s*assert ", c, flags=re.M)]
    assert solutions, f"{name}: a worked solution in a collapsed code cell that asserts its answer"
    links = re.findall(r"\*\*Next:\*\* \[[^\]]*\]\(([^)#]+)", text)
    i = IDS.index(py.stem)
    want = f"{IDS[i + 1]}.ipynb" if i + 1 < len(IDS) else "README.md"
    assert links and links[-1] == want, f"{name}: its last '**Next:** [...](...)' link must go to {want}, got {links[-1:]}"


def _question(text: str) -> str:
    m = re.search(r"^# \*\*The question\.\*\* (.+)$", text, flags=re.M)
    return m.group(1).strip() if m else ""


@pytest.mark.parametrize("py", SOURCES, ids=IDS)
def test_each_notebook_asks_one_question_and_the_indexes_quote_it(py):
    """Each notebook states its one question under its title; the README's track table and the notebook
    index (notebooks/README.md) quote that question word for word, so a reader sees the same promise."""
    q = _question(py.read_text())
    assert q.endswith("?"), f"{py.name}: put '# **The question.** ...?' right under the title"
    root = py.parent.parent
    readme = root.joinpath("README.md").read_text()
    row = re.search(rf"\]\(notebooks/{re.escape(py.stem)}\.ipynb\) \| ([^|]*) \|", readme)
    assert row and row.group(1).strip() == q, f"README.md's row for {py.stem} must quote: {q}"
    index = (py.parent / "README.md").read_text()
    row = re.search(rf"\]\({re.escape(py.stem)}\.ipynb\) \| \*\*([^*]*)\*\*", index)
    assert row and row.group(1).strip() == q, f"notebooks/README.md's row for {py.stem} must open with **{q}**"
