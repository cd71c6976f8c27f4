"""`make book`: the notebooks, with their outputs, as a static site in build/book/ (MkDocs + mkdocs-jupyter).

The pages come from executed notebooks: ``make test-full`` keeps each full run in build/executed/
(``GRPO_KIT_KEEP_EXECUTED``, tests/conftest.py). A notebook missing there is run first, at its full
parameters, into build/executed/; with ``--smoke-missing`` (``make book BOOK_SMOKE=1``) it is run in
smoke mode instead, into build/executed-smoke/, and its page opens with a note that its numbers are a
smoke run, not results. The home page is notebooks/README.md (its table links to the notebook pages);
the reference card (notebooks/REFERENCE.md), the project README and its reference pages (docs/*.md)
are pages too, their links rewritten to point inside the site. Figures are PNGs inside the pages, the math is typeset by a copy
of MathJax in the site, and the theme uses system fonts: neither the build nor a page fetches anything.

    python tools/book.py [--executed build/executed] [--out build/book] [--smoke-missing]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
WIDGET = "application/vnd.jupyter.widget-view+json"
PROGRESS = re.compile(r"\d+/\d+ \[|it/s\]|s/it\]")  # a tqdm bar's text fallback
WIDGET_NOTE = ("*An interactive widget (sliders or buttons) is here: open the notebook in JupyterLab "
               "(`make notebooks`) to use it.*")
# MathJax 2 from the jupyter-server-mathjax wheel, copied into the site: the math renders with no CDN
MATHJAX_URL = "assets/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
# the home page's table has six columns: a wider page and smaller table text keep it readable
EXTRA_CSS = """.md-grid { max-width: 90rem; }
.md-typeset table:not([class]) { font-size: .68rem; }
.md-typeset table:not([class]) td { padding: .6em .8em; }
"""
SMOKE_NOTE = ("> **Smoke run.** This page was executed with `SMOKE = True`: a short run that checks that every "
              "cell works. Its numbers are not results. For the full run: `make test-full`, then `make book`.")


def source_notebooks(source_dir: Path = NOTEBOOKS, names: list[str] | None = None) -> list[Path]:
    """The notebooks of the book, in order (``NN_name.ipynb``), or only those named (stems)."""
    found = sorted(Path(source_dir).glob("[0-9][0-9]*_*.ipynb"))
    if names is not None:
        found = [p for p in found if p.stem in names]
        missing = set(names) - {p.stem for p in found}
        if missing:
            raise FileNotFoundError(f"no such notebook in {source_dir}: {sorted(missing)}")
    return found


def kit_page(text: str) -> str:
    """A markdown page of the repository (README.md or docs/*.md) with its links rewritten for the site's
    ``kit/`` folder: ``docs/X.md`` -> ``X.md``, ``notebooks/X`` -> ``../X``, ``docs/img/`` -> ``img/``."""
    text = re.sub(r"\]\(docs/", "](", text)
    return re.sub(r"\]\(notebooks/(README\.md)?", lambda m: "](../" + ("index.md" if m.group(1) else ""), text)


def is_smoke_run(nb: dict) -> bool:
    """Whether papermill ran this notebook with ``SMOKE = True``."""
    return bool(nb.get("metadata", {}).get("papermill", {}).get("parameters", {}).get("SMOKE"))


def executed_copy(src: Path, executed_dir: Path, smoke_dir: Path, smoke_missing: bool, timeout: int) -> Path:
    """The executed copy of ``src``: build/executed/ first, else the smoke cache (smoke mode), else run it now."""
    from grpo_kit.view.nbtools import run_notebook

    for folder in [executed_dir] + ([smoke_dir] if smoke_missing else []):
        if (folder / src.name).is_file():
            return folder / src.name
    folder = smoke_dir if smoke_missing else executed_dir
    folder.mkdir(parents=True, exist_ok=True)
    mode = "smoke mode" if smoke_missing else "full parameters"
    print(f"book: {src.name} is not in {executed_dir}; running it ({mode}) into {folder}", flush=True)
    t0 = time.monotonic()
    # into a side file first: a run that fails leaves it there to read, never a copy a later build would reuse
    running = folder / f"{src.stem}.running.ipynb"
    run_notebook(src, running, parameters={"SMOKE": True} if smoke_missing else {}, timeout=timeout)
    running.replace(folder / src.name)
    print(f"book: {src.name} ran in {time.monotonic() - t0:.0f} s", flush=True)
    return folder / src.name


def page_notebook(nb: dict) -> dict:
    """The executed notebook as the page shows it.

    Widgets need a live kernel (and their JavaScript from a CDN): progress bars are dropped and every
    other widget becomes a line saying to open the notebook in JupyterLab. A smoke run gets a note
    under its title.
    """
    nb = copy.deepcopy(nb)
    nb.get("metadata", {}).pop("widgets", None)
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        outputs = []
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if WIDGET in data:
                text = data.get("text/plain", "")
                text = "".join(text) if isinstance(text, list) else text
                if PROGRESS.search(text):
                    continue
                o = {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": WIDGET_NOTE}}
            outputs.append(o)
        cell["outputs"] = outputs
    if is_smoke_run(nb):
        first_md = next((i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"), -1)
        nb["cells"].insert(first_md + 1, {"cell_type": "markdown", "metadata": {}, "source": SMOKE_NOTE})
    return nb


def mkdocs_config(docs: Path, out_dir: Path, pages: list[str]) -> dict:
    return {
        "site_name": "grpo-kit notebooks",
        "docs_dir": str(docs),
        "site_dir": str(out_dir),
        # plain .html files: the site opens from disk (file://) as well as from a server
        "use_directory_urls": False,
        # font: false keeps Material from linking Google Fonts (system fonts instead)
        "theme": {"name": "material", "font": False, "features": ["navigation.sections"]},
        "extra_css": ["extra.css"],
        "markdown_extensions": ["tables", "toc"],
        # no search plugin: its index loads in a web worker, which a page opened from disk cannot start
        "plugins": [{"mkdocs-jupyter": {"include": ["*.ipynb"], "execute": False, "include_requirejs": False,
                                        "theme": "light", "cache": False, "custom_mathjax_url": MATHJAX_URL}}],
        "nav": [{"Home": "index.md"}, {"Notebooks": pages}, {"Reference card": "REFERENCE.md"},
                {"About the kit": ["kit/index.md"] + [f"kit/{p.name}" for p in sorted((ROOT / "docs").glob("*.md"))]}],
    }


def build(executed_dir: str | Path, out_dir: str | Path, smoke_missing: bool = False,
          names: list[str] | None = None, timeout: int = 3600) -> Path:
    """Build the site into ``out_dir`` from the notebooks executed in ``executed_dir``; return index.html.

    ``names`` (notebook stems) limits the book to those notebooks (the home page table still lists all).
    A notebook missing from ``executed_dir`` is run first (see the module docstring).
    """
    executed_dir, out_dir = Path(executed_dir).resolve(), Path(out_dir).resolve()
    smoke_dir = executed_dir.with_name(executed_dir.name + "-smoke")
    with tempfile.TemporaryDirectory(prefix="grpo-kit-book-") as tmp:
        docs = Path(tmp) / "docs"
        docs.mkdir()
        # the home page hides its table of contents: the notebook table gets the room
        (docs / "index.md").write_text("---\nhide:\n  - toc\n---\n" + (NOTEBOOKS / "README.md").read_text())
        (docs / "REFERENCE.md").write_text((NOTEBOOKS / "REFERENCE.md").read_text())
        (docs / "kit").mkdir()
        (docs / "kit" / "index.md").write_text(kit_page((ROOT / "README.md").read_text()))
        for page in sorted((ROOT / "docs").glob("*.md")):
            (docs / "kit" / page.name).write_text(kit_page(page.read_text()))
        shutil.copytree(ROOT / "docs" / "img", docs / "kit" / "img")
        (docs / "extra.css").write_text(EXTRA_CSS)
        pages = []
        for src in source_notebooks(names=names):
            nb = json.loads(executed_copy(src, executed_dir, smoke_dir, smoke_missing, timeout).read_text())
            (docs / src.name).write_text(json.dumps(page_notebook(nb)))
            pages.append(src.name)
        cfg = Path(tmp) / "mkdocs.yml"
        cfg.write_text(yaml.safe_dump(mkdocs_config(docs, out_dir, pages), sort_keys=False))
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "--clean", "-f", str(cfg)],
                       check=True, cwd=tmp, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    import jupyter_server_mathjax

    shutil.copytree(Path(jupyter_server_mathjax.__file__).parent / "static", out_dir / "assets" / "mathjax")
    return out_dir / "index.html"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--executed", default=str(ROOT / "build" / "executed"),
                    help="the executed notebooks (make test-full keeps them here)")
    ap.add_argument("--out", default=str(ROOT / "build" / "book"), help="the site's folder")
    ap.add_argument("--smoke-missing", action="store_true",
                    help="run a notebook missing from --executed in smoke mode, not at full parameters")
    ap.add_argument("--only", default="", help="comma-separated notebook stems (default: all)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    index = build(args.executed, args.out, smoke_missing=args.smoke_missing,
                  names=[n for n in args.only.split(",") if n] or None)
    print(f"book: {index} ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
