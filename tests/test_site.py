"""The documentation site: strict builds, then a real browser on the built pages.

Two builds run side by side (each executes every page's code, about a minute):

- the local build, as ``make site`` makes it: no SITE_URL, no REPO_URL, so the
  site names ``make serve``'s address and has no repository links at all;
- the published build, as the Pages workflow makes it: SITE_URL and REPO_URL
  set, so canonical links and the sitemap name the host, each page has view
  and edit buttons, and each proof table links its test ids to their lines.

Both builds run with the test-only packages (pytest, hypothesis, playwright,
psycopg) and the ``tests`` package made unimportable, as in a clone where only
``make site`` has run: a page that imports one of them at build time fails here,
not only in ``.ci/run``'s build on a clean checkout.

The browser tests serve the built sites on 127.0.0.1 and open them in Debian's
headless Chromium (driven by Playwright, never its own browser download). They
fail on any console error, on any request that leaves this machine, on a
diagram that is not rendered to SVG, on a page without diagrams that downloads
mermaid, if instant navigation to a page with diagrams leaves them unrendered,
if the palette ignores the system's light/dark preference, and if search cannot
find "generation". The every-page check loads each page of the local build once
and, in both palettes, runs axe-core (pinned in tests/browser/package-lock.json;
the dark palette with the colour rules, save on the home page) and measures every
diagram (tests/test_diagrams.py); it fails on any serious or critical violation
and any unreadable diagram. The published build is served under ``/queue_core/``,
as a project's Pages site is. Screenshots land in ``test-artifacts/screenshots/``.

Where Chromium is missing the browser tests are skipped, except under CI
(``CI=true``), where a missing browser is a failure: ``.ci/run`` installs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.site_build import (
    ROOT,
    ARTIFACTS,
    AXE,
    RUN_AXE,
    TEST_ONLY,
    DOCS_ONLY_MKDOCS,
    Build,
    follow_link,
    HOOKS,
    site_pages,
    html_of,
    source_of,
    canonical,
    sitemap_urls,
    diagrams_in,
    figures_in,
    open_page,
    python_requests,
    SIDEWAYS,
    wait_for_diagrams,
    mermaid_loads,
    LOCAL_SITE_URL,
)
from tests.test_diagrams import NARROW, PALETTES, diagram_defects, diagram_verdict, narrow_window, set_palette

# Two strict builds and a real browser over every page: on a loaded machine this
# module's tests take minutes, not the suite's default limit of two.
pytestmark = pytest.mark.timeout(600)

# ----------------------------------------------------------- static checks

@pytest.mark.parametrize("module", TEST_ONLY)
def test_the_builds_cannot_import_a_test_only_package(module: str, tmp_path: Path) -> None:
    # A negative control for the builds' guard: under it, importing any of them fails.
    guard = DOCS_ONLY_MKDOCS.replace("from mkdocs.__main__ import cli", f"import {module}")
    proc = subprocess.run([sys.executable, "-c", guard], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "a page must not import it at build time" in proc.stderr, proc.stderr


def test_strict_build_produces_every_page(built_site: Path) -> None:
    pages = sorted(p.relative_to(built_site).as_posix() for p in built_site.rglob("index.html"))
    assert "index.html" in pages
    assert (built_site / "search" / "search_index.json").exists()
    # Nothing on any page points at a font or script CDN.
    for page in built_site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        for host in ("fonts.googleapis.com", "fonts.gstatic.com", "unpkg.com", "cdn.jsdelivr.net"):
            assert host not in html, f"{page} refers to {host}"


def test_every_included_program_can_be_downloaded_from_its_page(built_site: Path) -> None:
    import zipfile

    docs = ROOT / "docs"
    seen = set()
    for page in docs.rglob("*.md"):
        names = re.findall(r'--8<--\s+"snippets/([^"]+\.py)"', page.read_text(encoding="utf-8"))
        if not names:
            continue
        rel = page.relative_to(docs).with_suffix("")
        html_path = built_site / (rel.parent if rel.name == "index" else rel) / "index.html"
        html = html_path.read_text(encoding="utf-8")
        for name in names:
            link = re.search(rf'<a download="{re.escape(name)}" href="([^"]+)"', html)
            assert link is not None, f"{page.name}: no download link for {name}"
            served = (html_path.parent / link.group(1)).resolve()
            assert served.read_bytes() == HOOKS.published(ROOT / "snippets" / name), name
            seen.add(name)
    assert seen == {p.name for p in (ROOT / "snippets").glob("*.py")}  # every program is on some page
    with zipfile.ZipFile(built_site / "snippets" / "queue_core-examples.zip") as zf:
        packed = {Path(n).name: zf.read(n) for n in zf.namelist()}
    # beside the examples, its README (tests/test_examples_zip.py reads it)
    assert packed.pop("README.md") == HOOKS.examples_readme().encode("utf-8")
    examples = [p for p in (ROOT / "snippets").iterdir() if p.suffix in (".py", ".jsonl")]
    # the zip holds every example but those that import the repository's own code
    # (tests/test_examples_zip.py runs each one as a reader would, outside a clone)
    left_out = {p.name for p in examples if p.suffix == ".py" and re.search(
        r"^(?:from|import) (?:proof|docs_support|tests)\b", HOOKS.published(p).decode(), re.M)}
    assert left_out == {"evidence_check.py"}
    assert packed == {p.name: HOOKS.published(p) for p in examples if p.name not in left_out}
    # and the page of a program left out says why, instead of offering the zip as its home
    html = (built_site / "how-we-know" / "index.html").read_text(encoding="utf-8")
    link = html[html.index('<a download="evidence_check.py"'):]
    link = link[:link.index("</p>")]
    assert "runs in a clone of the repository only" in link and "not in" in link, link


def test_a_long_program_shows_its_lines_that_matter_and_folds_the_whole(built_site: Path) -> None:
    """A program over 60 lines marks a ``shown`` section; its page shows that, then the whole, then its output."""
    docs = ROOT / "docs"
    long_programs = [p for p in sorted((ROOT / "snippets").glob("*.py")) if HOOKS.published(p).count(b"\n") > 60]
    assert long_programs
    for program in long_programs:
        span = HOOKS.shown_lines(program)
        assert span is not None, f"{program.name} is long and marks no shown section"
        first, last, total = span
        assert last - first + 1 <= 45 < total, (program.name, span)
        assert b"8<--" not in HOOKS.published(program)
        pages = [p for p in docs.rglob("*.md") if f'--8<-- "snippets/{program.name}"' in p.read_text("utf-8")]
        for page in pages:
            rel = page.relative_to(docs).with_suffix("")
            html = (built_site / (rel.parent if rel.name == "index" else rel) / "index.html").read_text("utf-8")
            title = f"{program.name}, lines {first}-{last} of {total}"
            assert title in html, (page.name, title)
            after = html[html.index(title):]
            whole = after.index(f"The whole program: {program.name}, {total} lines")
            shown_code = after[:whole]
            # the lines keep the file's own numbers (padded to the widest number)
            assert re.search(rf'href="#__codelineno-[^"]*">\s*{first}</a>', shown_code), program.name
            assert "It prints:" in after[whole:]


def test_no_rendered_code_line_is_wider_than_88_columns(built_site: Path) -> None:
    """Code, recorded output and shell sessions fit their block: nothing scrolls sideways."""
    from docs_support.code_width import MAX_COLUMNS, code_lines, too_wide

    assert MAX_COLUMNS == 88
    assert too_wide(built_site) == {}
    # the check sees what it should: a line of a highlighted block, tags and entities undone
    page = '<pre><code><span class="n">x</span> = &quot;' + "y" * 85 + '&quot;\n</code></pre>'
    assert [len(line) for line in code_lines(page)] == [91, 0]
    # a session's one-line error and JSON are what the command prints; other output is not excused
    session = '<pre><code><span class="gp">$ </span>queue-core x\nqueue-core: bad: ' + "z" * 90
    session += "\n{" + "z" * 90 + "}\n" + "w" * 90 + "\n</code></pre>"
    assert [len(line) for line in code_lines(session)] == [len("$ queue-core x"), 90, 0]


def test_the_shown_section_is_found_and_left_out_of_what_is_published(tmp_path: Path) -> None:
    program = tmp_path / "long.py"
    program.write_text("a = 1\n# --8<-- [start:shown]\nb = 2\nc = 3\n# --8<-- [end:shown]\nd = 4\n", "utf-8")
    assert HOOKS.shown_lines(program) == (2, 3, 4)
    assert HOOKS.published(program) == b"a = 1\nb = 2\nc = 3\nd = 4\n"
    program.write_text("a = 1\n", "utf-8")
    assert HOOKS.shown_lines(program) is None


def test_local_build_names_make_serve_and_has_no_repository_links(built_site: Path) -> None:
    pages = site_pages(built_site)
    assert sitemap_urls(built_site) == {LOCAL_SITE_URL + path.lstrip("/") for path in pages}
    for path in pages:
        html = html_of(built_site, path)
        assert canonical(html) == LOCAL_SITE_URL + path.lstrip("/"), path
        # No repository: no header link, no view/edit buttons, no relative "edit/..." links.
        assert 'class="md-source"' not in html, path
        assert "md-content__button" not in html, path
        assert not re.search(r'href="(?:\.\./)*(?:edit|raw)/', html), path
        assert "/blob/main/tests/" not in html, f"{path}: a proof links to a repository"


def test_published_build_names_its_host_and_repository(published_build: Build) -> None:
    site, base, repo = published_build.out, published_build.site_url, published_build.repo_url
    pages = site_pages(site)
    assert sitemap_urls(site) == {base + path.lstrip("/") for path in pages}
    proof_links = 0
    for path in pages:
        html = html_of(site, path)
        assert canonical(html) == base + path.lstrip("/"), path
        source = source_of(path)
        assert f'href="{repo}/edit/main/docs/{source}"' in html, f"{path}: no edit button for {source}"
        assert f'href="{repo}/raw/main/docs/{source}"' in html, f"{path}: no view button for {source}"
        # The repository link, without Material's component that asks api.github.com for stars.
        assert f'<a href="{repo}" title="Go to repository" class="md-source">' in html, path
        assert 'data-md-component="source"' not in html, path
        # Each test id of a proof table links to the line that defines the test.
        for file, line in re.findall(rf'href="{re.escape(repo)}/blob/main/tests/([\w/]+\.py)#L(\d+)"', html):
            text = (ROOT / "tests" / file).read_text(encoding="utf-8").splitlines()[int(line) - 1]
            assert re.match(r"\s*(?:async\s+)?def test_", text), f"{path}: tests/{file}#L{line} is {text!r}"
            proof_links += 1
    assert proof_links > 0, "no proof table links a test id to its line"


# The pages are loaded in SHARES parts, so that pytest-xdist's workers share them.
SHARES = 6


@pytest.mark.parametrize("share", range(SHARES))
def test_every_page_loads_offline_without_errors_and_renders_diagrams(browser, served_site: str,
                                                                      built_site: Path, share: int) -> None:
    """Each page, loaded once for all these: offline, no error, its diagrams drawn, nothing scrolls
    sideways; then in each palette no serious or critical accessibility violation (axe-core) and
    every diagram readable (tests/test_diagrams.py measures it), and readable again at a phone's
    width; last, the copy buttons of its shortened programs copy the whole program."""
    pages = site_pages(built_site)[share::SHARES]
    assert len(pages) >= 1
    diagrams = drawn = 0
    inaccessible: dict[str, list[str]] = {}
    measured: dict[tuple[str, int, str], list[dict]] = {}
    copied = 0
    axe = axe_or_skip()
    for path in pages:
        context, page, problems, requested = open_page(browser, served_site + path, python_in_view=False)
        try:
            expected = page.locator("pre.mermaid, div.mermaid").count()
            assert expected == diagrams_in(html_of(built_site, path)), f"{path}: diagrams in the browser and the file"
            figures = page.locator("figure.qc-figure").count()
            assert figures == figures_in(html_of(built_site, path)), f"{path}: figures in the browser and the file"
            diagrams += figures
            if expected:
                wait_for_diagrams(page, expected)
                assert page.locator("pre.mermaid").count() == 0, f"{path}: a diagram stayed raw text"
                assert len(mermaid_loads(requested)) == 1, f"{path}: mermaid loaded {mermaid_loads(requested)}"
                page.evaluate("document.fonts.ready.then(() => true)")
                diagrams += expected
                drawn += 1
            else:
                assert mermaid_loads(requested) == [], f"{path} has no diagram but downloads mermaid"
            assert page.locator("h1").count() >= 1, f"{path}: no heading"
            assert problems == [], f"{path}: {problems}"
            # At 1280 px, beside both sidebars, no code block scrolls sideways: a session's
            # one line by contract (docs_support.code_width) wraps in its block
            sideways = page.evaluate(SIDEWAYS)
            assert sideways == [], f"{path}: code blocks scroll sideways: {sideways}"
            # ... and no table either (or the page itself)
            tables_sideways = page.evaluate(TABLES_SIDEWAYS)
            assert tables_sideways == [], f"{path}: tables scroll sideways: {tables_sideways}"
            page.add_script_tag(path=str(axe))
            for scheme, palette in PALETTES:
                set_palette(page, scheme, palette)
                violations = page.evaluate(RUN_AXE, COLOUR_RULES if scheme == "dark" and path != "/" else None)
                if violations:
                    inaccessible[f"{path} ({scheme})"] = violations
                if expected or figures:
                    measured.update(diagram_defects(page, path, expected + figures, scheme))
            if expected or figures:
                # and at a phone's width: each diagram fits again, or scrolls in a frame that says so
                set_palette(page, *PALETTES[0])
                narrow_window(page)
                measured.update(diagram_defects(page, path, expected + figures, "narrow"))
                page.set_viewport_size({"width": 1280, "height": 900})
            copied += copy_buttons_copy_whole_programs(page, path, html_of(built_site, path), served_site)
            assert problems == [], f"{path}: {problems}"
            # These checks are of the page: Python stayed unloaded (tests/test_run_box.py shows
            # that by default it starts loading when a Run block comes into view).
            assert python_requests(requested) == [], path
        finally:
            context.close()
    assert inaccessible == {}, f"accessibility violations: {inaccessible}"
    unreadable = diagram_verdict(measured, f"{share + 1}-of-{SHARES}")
    assert unreadable == [], "\n".join(unreadable)
    print(f"browser: {len(pages)} pages loaded, {diagrams} diagrams (Mermaid's on {drawn} pages) measured in "
          f"both palettes at 1280 px and at {NARROW} px, mermaid downloaded by those {drawn} pages only; axe found nothing serious; "
          f"{copied} shortened programs copied whole")


def test_the_shares_load_every_page_once_with_and_without_diagrams(built_site: Path) -> None:
    pages = site_pages(built_site)
    shares = [path for share in range(SHARES) for path in pages[share::SHARES]]
    assert sorted(shares) == pages and "/" in pages  # the home page gets every accessibility rule in both palettes
    drawn = [path for path in pages if diagrams_in(html_of(built_site, path))]
    assert 0 < len(drawn) < len(pages), "the site should have pages with and pages without diagrams"
    html = [html_of(built_site, path) for path in pages]
    assert sum(len(re.findall(r"<pre[^>]*>(?:<span></span>)?<code", text)) for text in html) > 300
    assert sum(text.count("<table>") for text in html) > 100  # Markdown's tables, not code's line numbers


def test_the_sideways_check_finds_a_block_that_scrolls(browser) -> None:
    """Negative control: a long line in a narrow block is found, a session's error line too."""
    context = browser.new_context(viewport={"width": 800, "height": 600})
    try:
        page = context.new_page()
        wide, error = "x" * 120, "queue-core: " + "e" * 130
        page.set_content(
            # as Material styles a code block: the code scrolls, not the page
            "<style>pre > code { display: block; overflow: auto }</style>"
            '<div style="width: 300px"><pre><code>' + wide + "</code></pre>"
            '<pre><code><span class="gp">$ </span>queue-core x\n' + error + "</code></pre></div>"
        )
        found = page.evaluate(SIDEWAYS)
        assert [longest for longest, _, _ in found] == [120, len(error)]
    finally:
        context.close()


# Where a session's long line is on the page: the lines it takes once wrapped, the left
# of the first and of the others, and the right of the block's code.
WRAPPED = """() => [...document.querySelectorAll('pre > code .qc-wrap')].map(span => {
  const range = document.createRange();
  range.selectNodeContents(span);
  const rects = [...range.getClientRects()].filter(r => r.width > 0);
  const tops = [...new Set(rects.map(r => Math.round(r.top)))].sort((a, b) => a - b);
  const lefts = tops.map(top => Math.min(...rects.filter(r => Math.round(r.top) === top).map(r => r.left)));
  const code = span.closest('code').getBoundingClientRect();
  return {text: span.textContent, lines: tops.length, first: lefts[0], rest: lefts.slice(1),
          right: Math.max(...rects.map(r => r.right)), codeRight: code.right,
          ch: parseFloat(getComputedStyle(span).fontSize) * 0.5};
})"""


def test_a_sessions_long_line_wraps_in_its_block_and_reads_as_one(browser, served_site: str) -> None:
    """A one-line error wider than its block is read to its end without scrolling: it wraps, and its
    continuations are indented under its start (as the command printed one line)."""
    context, page, problems, _ = open_page(browser, served_site + "/your-program/")
    try:
        wrapped = page.evaluate(WRAPPED)
        errors = [w for w in wrapped if w["text"].startswith("queue-core: ") and w["lines"] >= 2]
        assert errors, "no long error line on the page that wraps"
        for line in wrapped:
            assert line["right"] <= line["codeRight"] + 1, line  # nothing runs out of the block
            assert all(left >= line["first"] + line["ch"] for left in line["rest"]), line  # indented
        assert page.evaluate(SIDEWAYS) == []
        # Negative control: without the mark, the blocks of those lines scroll sideways again.
        page.evaluate("() => document.querySelectorAll('.qc-wrap').forEach(s => s.classList.remove('qc-wrap'))")
        assert page.evaluate(SIDEWAYS) != []
        assert problems == [], problems
    finally:
        context.close()


# The tables that scroll sideways, as [the element that scrolls, its scroll width, its
# visible width, the table's first row]: the table or any box around it in the article
# (Material wraps a table in a scrolling div), or a table wider than the article.
TABLES_SIDEWAYS = """() => [...document.querySelectorAll('article table')].flatMap(table => {
  const article = table.closest('article');
  const found = [];
  for (let el = table; el !== article; el = el.parentElement) {
    if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible') {
      found.push([el.tagName.toLowerCase() + '.' + el.className, el.scrollWidth, el.clientWidth,
                  (table.rows[0] ? table.rows[0].textContent : '').trim().replace(/\\s+/g, ' ')]);
    }
  }
  if (found.length === 0 && table.getBoundingClientRect().right > article.getBoundingClientRect().right + 1) {
    found.push(['wider than the article', Math.round(table.getBoundingClientRect().width),
                article.clientWidth, (table.rows[0] ? table.rows[0].textContent : '').trim()]);
  }
  return found;
}).concat(document.documentElement.scrollWidth > document.documentElement.clientWidth + 1
  ? [['the page', document.documentElement.scrollWidth, document.documentElement.clientWidth, '']] : [])"""


def test_the_sideways_check_finds_a_table_that_scrolls(browser, served_site: str) -> None:
    """Negative control: on a real page, a table of eight wide columns is found; the page's own tables are not."""
    context, page, problems, _ = open_page(browser, served_site + "/limits/")
    try:
        assert page.evaluate(TABLES_SIDEWAYS) == []
        # Material's 5rem per header cell, as before the Tables section of extra.css: 8 x 100 px > 780 px
        page.add_style_tag(content=".md-typeset table:not([class]) th { min-width: 5rem !important;"
                                   " padding: .9375em 1.25em !important }")
        before = page.evaluate(TABLES_SIDEWAYS)
        assert [row[0] for row in before] == ["div.md-typeset__scrollwrap"], before
        assert before[0][3].startswith("subject cut cuts acknowledged lost"), before
        # outside Material's wrapper: a table that scrolls itself, and one (with a class, so
        # not styled by Material) that is wider than the article, are found too
        page.evaluate("""() => { for (const [kind, cls] of [['x', ''], ['y', 'plain']]) {
            const t = document.createElement('table');
            if (cls) t.className = cls;
            t.innerHTML = '<tr><td style="white-space: nowrap">' + kind.repeat(400) + '</td></tr>';
            document.querySelector('article').append(t); } }""")
        after = page.evaluate(TABLES_SIDEWAYS)[1:]
        assert [row[0] for row in after if row[3].startswith(("x", "y"))] == ["table.", "wider than the article"]
        assert problems == []
    finally:
        context.close()


def test_instant_navigation_renders_diagrams_offline(browser, served_published: str,
                                                     published_build: Build) -> None:
    """From a page without diagrams, follow links (without a reload) to two pages with diagrams."""
    site = published_build.out
    pages = site_pages(site)
    start = next(p for p in pages if diagrams_in(html_of(site, p)) == 0)
    targets = [p for p in pages if diagrams_in(html_of(site, p)) > 0][:2]
    assert len(targets) == 2, "two pages with diagrams are needed"
    context, page, problems, requested = open_page(browser, served_published + start)
    try:
        assert mermaid_loads(requested) == [], f"{start} has no diagram but downloads mermaid"
        page.evaluate("() => { window.__same_document = true }")
        for target in targets:
            url = served_published + target
            follow_link(page, url)  # Material intercepts the click
            wait_for_diagrams(page, diagrams_in(html_of(site, target)))
            assert page.locator("pre.mermaid").count() == 0, f"{target}: a diagram stayed raw text"
            assert page.evaluate("() => window.__same_document === true"), \
                f"{target} was reached by a full reload, not by instant navigation"
        assert len(mermaid_loads(requested)) == 1, f"mermaid loaded {mermaid_loads(requested)}"
        assert problems == [], problems
    finally:
        context.close()


@pytest.mark.parametrize(("preference", "scheme"), [("light", "default"), ("dark", "slate")])
def test_palette_follows_the_system_preference(browser, served_site: str, preference: str,
                                               scheme: str) -> None:
    context, page, problems, _ = open_page(browser, served_site + "/", color_scheme=preference)
    try:
        body = page.locator("body")
        assert body.get_attribute("data-md-color-media") == "(prefers-color-scheme)"
        assert body.get_attribute("data-md-color-scheme") == scheme
        assert body.get_attribute("data-md-color-accent") == "deep-orange"
        assert problems == []
    finally:
        context.close()


# What the copy button put on the clipboard: clipboard.js selects a hidden
# textarea holding the text and runs the copy command.
RECORD_COPIES = """
document.addEventListener("copy", () => {
  const el = document.activeElement;
  window.__copied = el && "value" in el ? el.value.slice(el.selectionStart, el.selectionEnd)
                                        : document.getSelection().toString();
}, true);
"""


def test_the_copy_button_of_a_shell_session_copies_commands_that_run(browser, served_site: str,
                                                                    tmp_path: Path) -> None:
    context, page, problems, _ = open_page(browser, served_site + "/start/")
    try:
        page.evaluate(RECORD_COPIES)
        block = page.locator("div.highlight", has_text="cat > batch.jsonl").first
        block.hover()
        block.locator("button[data-md-type=copy]").click()  # Material's copy button
        page.wait_for_function("() => window.__copied !== undefined", timeout=10_000)
        copied = page.evaluate("window.__copied")
        assert problems == []
    finally:
        context.close()
    assert "$ " not in copied and '{"accepted"' not in copied  # no prompt, no output
    assert copied.startswith("cat > batch.jsonl <<'EOF'\n") and "\nqueue-core status" in copied
    # Pasted into a shell, it runs: every command exits 0 (bash -e), as a reader's paste would.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    shell = subprocess.run(["bash", "-e"], input=copied + "\n", cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    assert shell.returncode == 0, shell.stderr
    assert "total_cents" in shell.stdout and "command not found" not in shell.stderr


# Open what hides an element: the folds (<details>) and the tabs around it.
REVEAL = """el => {
  for (let node = el; node; node = node.parentElement) {
    if (node.tagName === 'DETAILS') node.open = true;
    if (node.classList.contains('tabbed-block')) {
      const set = node.closest('.tabbed-set');
      const index = [...node.parentElement.children].indexOf(node);
      set.querySelectorAll(':scope > input')[index].checked = true;
    }
  }
}"""


# The programs over 60 lines that a page shows by their marked lines: {file name: the whole program}.
LONG_PROGRAMS = {p.name: HOOKS.published(p).decode("utf-8") for p in sorted((ROOT / "snippets").glob("*.py"))
                 if HOOKS.shown_lines(p) is not None}
SHORTENED = re.compile(r'<span class="filename">([\w.-]+\.py), lines \d+-\d+ of \d+ \(the copy button copies')


def copied_by(page, block) -> str:
    """What the copy button of ``block`` puts on the clipboard, pressed as a reader does."""
    block.hover()
    page.evaluate("navigator.clipboard.writeText('')")
    block.locator("button[data-md-type=copy]").first.click()  # Material's copy button
    page.wait_for_function("async () => (await navigator.clipboard.readText()) !== ''",
                           polling=100, timeout=10_000)
    return str(page.evaluate("navigator.clipboard.readText()"))


def copy_buttons_copy_whole_programs(page, path: str, html: str, origin: str) -> int:
    """On the open page, a shortened program's copy button copies the whole program, and an
    ordinary block's button what it shows; how many shortened programs were checked."""
    titles = SHORTENED.findall(html)
    if not titles:
        return 0
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=origin)
    for name in titles:
        block = page.locator("div.highlight", has=page.locator(
            "span.filename", has_text=re.compile(rf"^{re.escape(name)}, lines "))).first
        block.evaluate(REVEAL)  # a program in a folded solution or another tab
        shown = block.locator("td.code code").text_content() or ""
        copied = copied_by(page, block)
        # Material trims the end of what it copies
        assert copied == LONG_PROGRAMS[name].rstrip(), f"{path}: {name}: the copy is not the program"
        compile(copied, name, "exec")
        # Negative control: the lines shown are a fragment, and a fragment is what the button
        # copied before; the check above tells them apart.
        assert shown.strip() != copied and shown.strip() in copied, name
    # and the button of an ordinary code block still copies what that block shows
    plain = page.locator("div.highlight:not(:has(span.filename)):not(:has(.gp)):visible",
                         has=page.locator("pre > code")).first
    if plain.count():
        text = plain.locator("pre > code").first.inner_text()
        assert copied_by(page, plain) == text.rstrip(), path
    return len(titles)


def test_every_shortened_program_is_shown_on_a_page(built_site: Path) -> None:
    """The every-page check presses the copy button of each; here, that each is on some page."""
    shown = {name for path in site_pages(built_site) for name in SHORTENED.findall(html_of(built_site, path))}
    assert LONG_PROGRAMS and shown == set(LONG_PROGRAMS), (sorted(shown), sorted(LONG_PROGRAMS))


def test_a_fragment_of_a_shortened_program_would_not_run() -> None:
    """Why the button copies the whole: the marked lines of a program alone fail (evidence_check's do)."""
    program = HOOKS.published(ROOT / "snippets" / "evidence_check.py").decode("utf-8").split("\n")
    first, last, _ = HOOKS.shown_lines(ROOT / "snippets" / "evidence_check.py")
    with pytest.raises(IndentationError):
        compile("\n".join(program[first - 1:last]), "fragment", "exec")
    compile("\n".join(program), "whole", "exec")


def axe_or_skip() -> Path:
    if not AXE.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{AXE.relative_to(ROOT)} is missing: make test installs it (npm ci --prefix tests/browser)")
        pytest.skip("axe-core is not installed: make test installs it (npm ci --prefix tests/browser)")
    return AXE


# A palette changes colours and which palette toggle shows, nothing else: so the dark
# palette is checked with the rules that look at colours, except on the home page,
# where every rule runs in both (the toggle is the same on every page).
COLOUR_RULES = ["color-contrast", "link-in-text-block"]


def test_the_accessibility_check_finds_what_it_should(browser) -> None:
    # A negative control: grey text on grey and a button without a name are found.
    axe = axe_or_skip()
    context = browser.new_context()
    page = context.new_page()
    try:
        page.set_content('<html lang="en"><head><title>t</title></head><body><main>'
                         '<p style="color:#777;background:#888">grey on grey</p><button></button></main></body></html>')
        page.add_script_tag(path=str(axe))
        violations = " ".join(page.evaluate(RUN_AXE))
        colours = " ".join(page.evaluate(RUN_AXE, COLOUR_RULES))
    finally:
        context.close()
    assert "color-contrast (serious)" in violations and "button-name (critical)" in violations
    assert "color-contrast (serious)" in colours and "button-name" not in colours


def test_search_finds_generation(browser, served_site: str) -> None:
    context, page, problems, _ = open_page(browser, served_site + "/")
    try:
        # Type like a person: Material searches on keyboard input, not on a programmatic fill.
        page.click("input.md-search__input")
        page.keyboard.type("generatio", delay=30)
        page.wait_for_selector(".md-search-result__item", timeout=15_000)
        assert page.locator(".md-search-result__item").count() >= 1
        # search.suggest completes the word being typed.
        page.wait_for_function(
            "() => document.querySelector('.md-search__suggest').textContent.trim() === 'generation'",
            timeout=15_000)
        assert problems == []
    finally:
        context.close()


SCREENSHOT_PAGES = ["/", "/fencing/", "/crash/", "/reference/api/"]


def test_screenshots_of_four_pages(browser, served_site: str, built_site: Path) -> None:
    available = site_pages(built_site)
    chosen = [p for p in SCREENSHOT_PAGES if p in available] or available[:4]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for path in chosen:
        context, page, problems, _ = open_page(browser, served_site + path)
        try:
            name = (path.strip("/") or "home").replace("/", "-") + ".png"
            # The API reference is some 30 screens tall: a full-page capture of it took over 30 s
            # with the machine loaded, so it is taken as a reader first sees it.
            page.screenshot(path=str(ARTIFACTS / name), full_page=path != "/reference/api/")
            assert (ARTIFACTS / name).stat().st_size > 10_000
            assert problems == []
        finally:
            context.close()


@pytest.mark.parametrize("source, why", [
    ("from queue_core.app.demo import run_demo\nrun_demo()", "it starts other processes"),
    ("from queue_core.demo import DEMO_BATCH", "it starts other processes"),
    ("from queue_core.app.crash_child import run_crashing", "it starts other processes"),
    ("import threading", "it starts threads"),
    ("work(store, handler, concurrency=4)", "it starts threads"),
    ("Store('postgresql://app@db/queue')", "it needs a PostgreSQL server"),
    ("from proof.powerfs_image import Images", "it reads this repository"),
    ("# the proof of it\nfrom queue_core import Store", None),
    ("from queue_core import Store, ledger\nstore = Store('q.sqlite3')", None),
])
def test_a_block_that_needs_a_machine_gets_no_run_button(source: str, why: str | None) -> None:
    from docs_support.run_here import needs_a_machine

    assert needs_a_machine(source) == why


# How a glossary term and the text around it are drawn.
TERM_LOOK = """() => { const term = document.querySelector('article p abbr[title]');
  const style = getComputedStyle(term), text = getComputedStyle(term.parentElement);
  const link = document.querySelector('article p a[href]:not(.headerlink)');
  return {term: term.textContent, style: style.borderBottomStyle, width: parseFloat(style.borderBottomWidth),
          color: style.borderBottomColor, linkColor: link ? getComputedStyle(link).color : null,
          textUnderline: text.borderBottomStyle} }"""


@pytest.mark.parametrize(("scheme", "palette"), PALETTES)
def test_glossary_terms_stand_out(browser, served_site: str, scheme: str, palette: str) -> None:
    """A word with a definition is marked: a dotted line, 2 px at least, in the link colour."""
    context, page, problems, _ = open_page(browser, served_site + "/lease/", color_scheme=scheme)
    try:
        look = page.evaluate(TERM_LOOK)
        assert look["style"] == "dotted" and look["width"] >= 2, look
        assert look["color"] == look["linkColor"], look
        assert look["textUnderline"] == "none", look  # negative control: the text around it is not marked
        assert problems == [], problems
    finally:
        context.close()
