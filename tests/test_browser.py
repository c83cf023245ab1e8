"""The rendered book as a reader meets it, in headless Chromium, with no network.

Every page of `_toc.yml` is opened from `_build/html` on disk (file://, every http(s)
request aborted) at 1400 px and at 400 px width, and checked for: typeset math (MathJax
output present, no raw TeX left), no directive option shown as text, every exercise with
a solution that stays folded until its title is clicked, no horizontal overflow outside
scrollable boxes (nor content starting left of one), and no test markers in code. At
1400 px nothing is cut at a box's right edge: no code or output box scrolls sideways,
and no figure is shown below 85% of its size (the book's 11 pt text stays >= 13 px). No
display equation is wider than its column, at 1400 px nor at 400 px (so equation numbers
stay on a phone's screen), but for the few in WIDE_EQUATIONS_AT_400. Every image loads
and every output image has alt text (not its file name); one search box, launch buttons,
and no console errors. Screenshots of each page (top at 1400 and 400 px, exercises with
solutions open) go to `_build/screenshots/`. On the pages that carry them, every explorer
shows something and changes when a reader moves its slider or picks another option, and
the self-check questions of chapters 1 to 11 open on a click.

The book is built first (`make test` runs `make book`; this module builds it if it is
missing). Set BOOK_HTML to test another build. Chromium comes from Debian's `chromium`
package, driven by Playwright without a browser download; without it the test skips,
except under CI=true, where it fails.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("BOOK_HTML", ROOT / "_build" / "html"))
SCREENSHOTS = HTML.parent / "screenshots"
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
PAGES = [TOC["root"]] + [c["file"] for p in TOC["parts"] for c in p["chapters"]]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MIN_FIGURE_SCALE = 0.85  # figures are drawn to the 832 px column (vitbook.book.style)
# Display equations that may scroll sideways at 400 px, because they cannot be broken:
# page -> the start of their TeX. Every other equation fits a phone's column.
WIDE_EQUATIONS_AT_400: dict[str, tuple[str, ...]] = {}


def _chromium() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium")


def _missing(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (required under CI=true)")
    pytest.skip(reason)


@contextlib.contextmanager
def offline_chromium(tmp_path_factory, executable: str):
    """A headless Chromium context of its own profile in which only file: and data: URLs
    load: every page must need nothing from the network."""
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=executable,
            args=CHROMIUM_FLAGS,
            headless=True,
            viewport={"width": 1400, "height": 1000},
        )
        context.route(
            "**/*",
            lambda route: (
                route.continue_()
                if route.request.url.startswith(("file:", "data:"))
                else route.abort()
            ),
        )
        yield context
        context.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    executable = _chromium()
    if executable is None:
        _missing("chromium is not installed: apt-get install chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing(
            "the playwright package is not installed: pip install -r requirements.txt"
        )
    if not (HTML / "book" / "intro.html").exists():
        if "BOOK_HTML" in os.environ:
            pytest.fail(f"BOOK_HTML={HTML} holds no built book")
        jb = Path(sys.executable).with_name("jupyter-book")
        subprocess.run(
            [str(jb), "build", str(ROOT), "--warningiserror", "--keep-going"],
            check=True,
        )
        subprocess.run(  # as make book does
            [
                sys.executable,
                str(ROOT / "scripts" / "one_script_per_page.py"),
                str(HTML),
            ],
            check=True,
        )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with offline_chromium(tmp_path_factory, executable) as context:
        yield context


# Runs in the page; returns lists of problems (strings) found at the current width.
PAGE_CHECKS = r"""
([wide, ALLOWED, opened]) => {
  const problems = {
    math: [], markup: [], overflow: [], code: [], output: [], equations: [], figures: [],
    images: [], solutions: [],
  };
  const visible = e => {
    const s = getComputedStyle(e), r = e.getBoundingClientRect();
    return s.visibility === 'visible' && s.display !== 'none' && parseFloat(s.opacity) > 0
      && r.width * r.height > 0;
  };
  const where = e => {
    const sec = e.closest('section[id]');
    return (sec ? '#' + sec.id : '') + ' <' + e.tagName.toLowerCase()
      + (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ')[0] : '')
      + '> "' + (e.textContent || '').trim().slice(0, 50).replace(/\s+/g, ' ') + '"';
  };
  // Math: MathJax output present where there is math, no raw TeX delimiters left.
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const p = n.parentElement;
    if (p.closest('script, style, pre, code, textarea, mjx-container, .cell_output')) continue;
    if (/\\\(|\\\[|\\begin\{/.test(n.textContent)) problems.math.push('raw TeX: ' + where(p));
    // A directive option MyST did not take (e.g. after a wrapped one) shows up as text.
    if (/(^|\s):(alt|width|height|name|label|class|align|scale|figwidth):\s/.test(n.textContent))
      problems.markup.push('directive option shown as text: ' + where(p));
  }
  const maths = document.querySelectorAll('.math');
  const typeset = document.querySelectorAll('mjx-container').length;
  if (maths.length && !typeset) problems.math.push(`${maths.length} formulas, no MathJax output`);
  for (const e of document.querySelectorAll('mjx-merror'))
    problems.math.push('TeX error: ' + (e.getAttribute('data-mjx-error') || e.textContent));
  // Overflow: the page itself, and anything that sticks out of the article's column
  // or starts left of a scrolling box, where nobody can scroll to it.
  const vw = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth > vw + 1) {
    // Name the outermost visible elements that reach past the window.
    const wide = [...document.body.querySelectorAll('*')].filter(
      e => e.getBoundingClientRect().right > vw + 1 && visible(e) && !e.closest('pre'));
    const outer = wide.filter(e => !wide.includes(e.parentElement)).slice(0, 3);
    problems.overflow.push(`page is ${document.documentElement.scrollWidth} px wide in a `
      + `${vw} px window; widest: ` + outer.map(where).join('; '));
  }
  const article = document.querySelector('.bd-article') || document.body;
  const clipper = e => {
    for (let a = e.parentElement; a && a !== document.body; a = a.parentElement)
      if (getComputedStyle(a).overflowX !== 'visible') return a;
    return null;
  };
  const box = article.getBoundingClientRect();
  const [left, right] = [Math.max(0, box.left), Math.min(vw, box.right)];
  for (const e of article.querySelectorAll('*')) {
    const r = e.getBoundingClientRect();
    if (r.width * r.height === 0) continue;
    if (r.right <= right + 1 && r.left >= left - 1) {
      const c = e.closest('mjx-container[display="true"]');
      if (!c || c === e) continue;
      if (r.left < c.getBoundingClientRect().left - 1 && visible(e))
        problems.overflow.push('equation starts left of its box: ' + where(c));
      continue;
    }
    if (!visible(e)) continue;
    const c = clipper(e);
    if (c === null) problems.overflow.push(`sticks out (${Math.round(r.left)}..${Math.round(r.right)} px): ` + where(e));
    else if (r.left < c.getBoundingClientRect().left - 1)
      problems.overflow.push('starts left of its scrolling box: ' + where(e));
  }
  // No test markers shown to readers (nbval's are cell tags, not comments).
  for (const cell of article.querySelectorAll('.cell_input'))
    if (/#\s*NBVAL/i.test(cell.textContent)) problems.code.push('test marker: ' + where(cell));
  // On a wide page nothing is cut at a box's right edge: no code cell, printed output
  // or HTML output (a table) scrolls sideways.
  const boxes = '.cell_input pre, .cell_output pre, .cell_output .text_html';
  for (const box of wide ? article.querySelectorAll(boxes) : []) {
    if (!visible(box) || box.scrollWidth <= box.clientWidth + 1) continue;
    const kind = box.closest('.cell_input') ? 'code' : 'output';
    problems[kind].push(`${box.scrollWidth} px of content in a ${box.clientWidth} px box: `
      + where(box));
  }
  // Display equations no wider than their column (MathJax keeps each one's TeX).
  const typesetMaths = window.MathJax && MathJax.startup && MathJax.startup.document
    ? Array.from(MathJax.startup.document.math) : [];
  for (const m of typesetMaths) {
    const box = m.typesetRoot;
    if (!m.display || !box || !visible(box) || box.scrollWidth <= box.clientWidth + 1)
      continue;
    const tex = m.math.trim().replace(/\s+/g, ' ');
    if (!wide && ALLOWED.some(start => tex.startsWith(start))) continue;
    problems.equations.push(`${box.scrollWidth} px equation in a ${box.clientWidth} px `
      + 'column: ' + tex.slice(0, 70));
  }
  // Images: all loaded, output images with alt text; on a wide page, figures shown at
  // >= MIN_SCALE of their size.
  for (const img of document.querySelectorAll('img')) {
    if (!img.complete || img.naturalWidth === 0) {
      problems.images.push('not loaded: ' + img.getAttribute('src'));
      continue;
    }
    if (!img.closest('.cell_output')) continue;
    const alt = (img.getAttribute('alt') || '').trim();
    if (!alt || /\.(png|jpe?g|svg|gif)$/i.test(alt))
      problems.images.push('no alt text (cell metadata mystnb.image.alt): ' + where(img));
    if (wide && visible(img)) {
      const scale = img.getBoundingClientRect().width / img.naturalWidth;
      if (scale < MIN_SCALE)
        problems.figures.push(`${img.naturalWidth} px figure shown at ${Math.round(100 * scale)}%: ` + where(img));
    }
  }
  // Chrome: one search box.
  const searches = [...document.querySelectorAll('.search-button__button, form.bd-search')]
    .filter(e => !e.closest('dialog')).filter(visible);
  if (searches.length !== 1) problems.chrome = [`${searches.length} search boxes`];
  // Solutions: folded (nothing but the title visible) until clicked.
  for (const s of opened ? [] : document.querySelectorAll('.solution')) {
    const title = s.querySelector('.admonition-title');
    const shown = [...s.querySelectorAll('*')].filter(e => !title || !title.contains(e)).filter(visible);
    if (!s.classList.contains('toggle') || shown.length)
      problems.solutions.push(`${s.id}: ${shown.length} elements visible before a click`);
  }
  return problems;
}
""".replace("MIN_SCALE", str(MIN_FIGURE_SCALE))

# The checked exercises' hints and solutions: how many are open; open them all.
FOLDED_OPEN = "() => [...document.querySelectorAll('details.vx-exercise')].filter(d => d.open).length"
OPEN_FOLDED = (
    "() => document.querySelectorAll('details.vx-exercise').forEach(d => d.open = true)"
)

# Opens every folded solution by clicking its title; returns the ids that stayed folded.
OPEN_SOLUTIONS = """
async () => {
  const folded = [];
  for (const s of document.querySelectorAll('.solution.toggle')) {
    if (s.classList.contains('toggle-hidden')) s.querySelector('.admonition-title').click();
    await new Promise(r => setTimeout(r, 50));
    const content = s.querySelector('.admonition-title ~ *');
    if (!content || getComputedStyle(content).visibility !== 'visible') folded.push(s.id);
  }
  return folded;
}
"""


def _open(context, page_name: str, width: int):
    page = context.new_page()
    page.set_viewport_size({"width": width, "height": 1000})
    errors: list[str] = []
    page.on(
        "console",
        lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on(
        "requestfailed",
        lambda r: errors.append(f"request failed: {r.url[:100]} ({r.failure})"),
    )
    page.goto((HTML / f"{page_name}.html").as_uri(), wait_until="load")
    # MathJax typesets after load; wait for it where it loaded.
    page.evaluate(
        "() => window.MathJax && MathJax.startup && MathJax.startup.promise"
        " ? MathJax.startup.promise : null"
    )
    page.wait_for_timeout(100)
    return page, errors


@pytest.mark.parametrize("name", PAGES)
def test_page_in_the_browser(browser, name):
    if not any((ROOT / f"{name}{ext}").exists() for ext in (".ipynb", ".md")):
        pytest.skip(f"{name} is listed in _toc.yml but not written yet")
    assert (HTML / f"{name}.html").exists(), f"{name}.html was not built"
    short = Path(name).name
    page, errors = _open(browser, name, 1400)
    found: dict[str, list[str]] = {}
    allowed = list(WIDE_EQUATIONS_AT_400.get(name, ()))

    def check_widths(opened: bool) -> None:  # one page load, two window widths
        for width in (1400, 400):
            page.set_viewport_size({"width": width, "height": 1000})
            page.wait_for_timeout(150)
            problems = page.evaluate(PAGE_CHECKS, [width >= 1000, allowed, opened])
            if not opened:
                suffix = "" if width == 1400 else f"-{width}px"
                page.screenshot(path=str(SCREENSHOTS / f"{short}{suffix}.png"))
            where = f" @{width}px" + (", solutions open" if opened else "")
            for kind, items in problems.items():
                before = found.get(f"{kind} @{width}px", []) if opened else []
                new = [item for item in items if item not in before]  # not twice
                if new:
                    found[f"{kind}{where}"] = new

    check_widths(opened=False)
    page.set_viewport_size({"width": 1400, "height": 1000})
    problems = {"solutions": [], "launch": []}
    n_ex = page.locator(".exercise").count()
    n_sol = page.locator(".solution").count()
    # Checked exercises (vitbook.book.exercises): hints and solutions are <details>
    n_folded = page.locator("details.vx-exercise").count()
    if page.locator("section[id$='exercises']").count() and not (n_ex or n_folded):
        problems["solutions"].append("an Exercises section without exercises")
    if n_folded:
        shown = page.evaluate(FOLDED_OPEN)
        if shown:
            problems["solutions"].append(
                f"{shown} hints or solutions open before a click"
            )
        page.locator("details.vx-exercise summary").first.click()
        if not page.evaluate(FOLDED_OPEN):
            problems["solutions"].append(
                "a click on a solution's summary did not open it"
            )
        page.evaluate(OPEN_FOLDED)
        check_widths(opened=True)  # every hint and solution open
        page.set_viewport_size({"width": 1400, "height": 1000})
    if n_ex != n_sol:
        problems["solutions"].append(f"{n_ex} exercises, {n_sol} solutions")
    if n_sol:  # a reader's click anywhere on the title opens the first one
        first = page.locator(".solution").first
        first.locator(".admonition-title").click()
        page.wait_for_timeout(100)
        if "toggle-hidden" in (first.get_attribute("class") or ""):
            problems["solutions"].append("a click on the title did not open it")
    problems["solutions"] += [
        f"{s}: still folded after a click" for s in page.evaluate(OPEN_SOLUTIONS)
    ]
    if n_sol:  # the exercises, with every solution open
        page.locator(".exercise").first.scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / f"{short}-exercises.png"))
        check_widths(opened=True)  # the solutions' code, outputs and equations too
        page.set_viewport_size({"width": 1400, "height": 1000})
    if (ROOT / f"{name}.ipynb").exists():
        for launcher in ("colab.research.google.com", "mybinder.org"):
            if not page.locator(f'a[href*="{launcher}"]').count():
                problems["launch"].append(f"no {launcher} button")
    problems["console"] = errors
    found.update({k: v for k, v in problems.items() if v})
    page.close()
    report = "\n".join(
        f"{kind}: {len(items)}\n  " + "\n  ".join(items[:6])
        for kind, items in found.items()
    )
    assert not found, f"{name}:\n{report}"


# The interactive pieces of the rendered pages: page -> explorers on it. Every chapter of
# Parts I and II ends with self-check questions.
EXPLORERS = {
    "book/01_reading_the_paper": 1,  # the size calculator
    "book/02_patch_embedding": 1,  # patches and positions
    "book/03_multihead_self_attention": 1,  # attention, chapter 7's trained small ViT
    "book/06_training_from_scratch": 1,  # the schedule
    "book/07_transfer_learning": 1,  # attention, the pre-trained ViT
    "book/09_vit_lite_cvt_cct": 2,  # the calculator with tokenizers; CCT attention
}
SELF_CHECKED = [
    name for name in PAGES if Path(name).name[:2] in {f"{i:02d}" for i in range(1, 12)}
]
# What a reader sees of one explorer: its text and the pixels of its canvases.
SHOWN = (
    "root => [root.innerText,"
    " ...[...root.querySelectorAll('canvas')].map(c => c.toDataURL())].join('|')"
)


def _poke(root) -> str:
    """Change one control of an explorer as a reader would; say which."""
    slider = root.locator("input[type=range]")
    if slider.count():
        slider.first.evaluate(
            "s => { s.value = s.value === s.max ? s.min : s.max;"
            " s.dispatchEvent(new Event('input', {bubbles: true})); }"
        )
        return "slider"
    for i in range(root.locator("select").count()):
        select = root.locator("select").nth(i)
        if select.locator("option").count() > 1:
            current = select.evaluate("s => s.selectedIndex")
            select.select_option(index=1 if current == 0 else 0)
            return "select"
    return "nothing to change"


@pytest.mark.parametrize("name", sorted(EXPLORERS))
def test_each_page_carries_the_explorers_script_once(name):
    # make book keeps the first copy on a page (scripts/one_script_per_page.py).
    page = (HTML / f"{name}.html").read_text(encoding="utf-8")
    assert page.count("window.VitExplorers = ") == 1


@pytest.mark.parametrize("name", sorted(EXPLORERS))
def test_the_pages_explorers_respond(browser, name):
    assert (HTML / f"{name}.html").exists(), f"{name}.html was not built"
    page, errors = _open(browser, name, 1400)
    roots = page.locator(".vx")
    assert roots.count() == EXPLORERS[name], f"{roots.count()} explorers on {name}"
    for i in range(roots.count()):
        root = roots.nth(i)
        root.scroll_into_view_if_needed()
        before = root.evaluate(SHOWN)
        assert before.strip("|"), f"explorer {i + 1} of {name} shows nothing"
        how = _poke(root)
        page.wait_for_timeout(200)
        assert root.evaluate(SHOWN) != before, (
            f"explorer {i + 1}: {how} changed nothing"
        )
    page.close()
    assert not errors, errors


@pytest.mark.parametrize("name", SELF_CHECKED)
def test_self_check_answers_open_on_a_click(browser, name):
    page, errors = _open(browser, name, 1400)
    questions = page.locator(".vx-check details")
    assert questions.count() >= 3, f"{questions.count()} self-check questions"
    first = questions.first
    assert not first.evaluate("d => d.open")
    first.locator("summary").click()
    assert first.evaluate("d => d.open")
    page.close()
    assert not errors, errors


def test_one_script_per_page_keeps_the_first_copy():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from one_script_per_page import keep_first_script
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    js = "// The book's explorers: v1\nwindow.VitExplorers = 1;\n"
    page = f"<p>a</p><script>{js}VitExplorers.mount(1)</script><script>{js}VitExplorers.mount(2)</script>"
    kept, removed = keep_first_script(page)
    assert removed == 1 and kept.count("window.VitExplorers = ") == 1
    assert kept.endswith("<script>VitExplorers.mount(2)</script>")
    other = js.replace("v1", "v2")  # another version of the script is not a copy
    assert (
        keep_first_script(
            f"<script>{js}VitExplorers.mount(1)</script>"
            f"<script>{other}VitExplorers.mount(2)</script>"
        )[1]
        == 0
    )
    assert keep_first_script("<p>none</p>") == ("<p>none</p>", 0)
