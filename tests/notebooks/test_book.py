"""`make book` (tools/book.py) in a real browser: a one-notebook book, served on 127.0.0.1, read in chromium.

tools.book.build runs notebook 01 in smoke mode (it is missing from the empty executed folder) and
builds the site; chromium (Debian's, through Playwright, as in tests/notebooks/test_browser.py) opens the home
page, finds the notebook table, follows its link to notebook 01 and checks that every figure loaded,
that the math is typeset, that the page says it shows a smoke run, and that no page asked for anything
off 127.0.0.1 (every such request is blocked and reported). Screenshots go to ``runs/browser/``
(or ``$GRPO_KIT_BROWSER_ARTIFACTS``).
"""
from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("book", ROOT / "tools" / "book.py")  # tools/ is not a package
book = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(book)
CHROMIUM = os.environ.get("GRPO_KIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
ARTIFACTS = Path(os.environ.get("GRPO_KIT_BROWSER_ARTIFACTS", ROOT / "runs" / "browser"))
NAME = "01_group_normalization"

JS_IMAGES = """() => Array.from(document.images).map(i => ({src: i.src.slice(0, 30), complete: i.complete,
                                                        width: i.naturalWidth}))"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.mark.notebook
def test_book_pages_link_and_show_their_figures(tmp_path):
    executed = tmp_path / "executed"
    index = book.build(executed, tmp_path / "book", smoke_missing=True, names=[NAME], timeout=300)
    assert index.is_file()
    # a missing notebook run in smoke mode goes to the smoke cache, never among the full runs
    assert (tmp_path / "executed-smoke" / f"{NAME}.ipynb").is_file() and not executed.exists()

    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no chromium at {CHROMIUM}: install it with `apt-get install -y chromium`")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_Quiet, directory=str(tmp_path / "book")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    blocked = []

    def only_local(route):
        if route.request.url.startswith(base) or route.request.url.startswith("data:"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.route("**/*", only_local)
        page.goto(base + "index.html", wait_until="load")
        table = page.locator("article table").first
        assert table.locator("tr").count() == 1 + len(book.source_notebooks())  # the header and one row per notebook
        assert "Group normalisation" in table.inner_text()
        page.screenshot(path=str(ARTIFACTS / "book_index.png"))

        page.locator("article table a", has_text="01 · Group normalisation").click()
        page.wait_for_load_state("load")
        assert page.url == base + f"{NAME}.html"
        assert page.locator("article h1").first.inner_text().strip().startswith("01")
        text = page.locator("article").inner_text()
        assert "Smoke run." in text and "not results" in text  # the page says its numbers are a smoke run's
        assert "An interactive widget" in text  # the sliders, which need a live kernel, say so
        images = page.evaluate(JS_IMAGES)
        assert images, "no figure on the notebook page"
        assert all(i["complete"] and i["width"] > 0 for i in images), images
        assert all(i["src"].startswith("data:image/png") for i in images), images  # embedded, nothing to fetch
        page.wait_for_function("() => document.querySelectorAll('.MathJax, .MathJax_Display').length > 0",
                               timeout=20_000)  # the math is typeset by the site's own MathJax
        page.locator("article img").first.scroll_into_view_if_needed()
        page.wait_for_timeout(500)  # the header's title finishes its scroll transition
        page.screenshot(path=str(ARTIFACTS / "book_notebook.png"))

        # the README is a page of the site, its picture shown and its reference links leading to pages
        page.goto(base + "kit/index.html", wait_until="load")
        images = page.evaluate(JS_IMAGES)
        assert images and all(i["complete"] and i["width"] > 0 for i in images), images
        page.locator("article a", has_text="Graduating to many GPUs").first.click()
        page.wait_for_load_state("load")
        assert page.url == base + "kit/graduating.html"
        assert page.locator("article h1").first.inner_text().strip() == "Graduating to many GPUs"
        page.goto(base + "REFERENCE.html", wait_until="load")
        assert "Glossary" in page.locator("article").inner_text()
        print(f"\nbook screenshots: {ARTIFACTS / 'book_index.png'}, {ARTIFACTS / 'book_notebook.png'}")
        browser.close()
    finally:
        pw.stop()
        server.shutdown()
    assert not blocked, f"the pages asked for something off the local server: {blocked}"
