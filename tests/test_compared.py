"""The comparison chapter (docs/compared.md) keeps its citations and links honest.

* every footnote reference has exactly one definition, and that definition is
  a Markdown link with a title and an https URL;
* every footnote definition is referenced;
* every cell of a comparison table that speaks about another system carries a
  footnote, and every row that names another system in its first cell too;
* every cell of the queue_core column links to a chapter;
* each system the chapter compares with is named and cited to its own pages;
* every relative link points to a page that exists, and its anchor, if any,
  to a heading of that page.

Each check is a function returning the problems it found, so that the same
functions run on the real page and, as a negative control, on a small page
built to be wrong in every way.
"""

from __future__ import annotations

import re
from pathlib import Path

from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGE = DOCS / "compared.md"  # chapter 19: the stall side by side, the mechanisms table, where queue_core is weaker
SYSTEMS_PAGE = DOCS / "compared-systems.md"  # chapter 20: each system in its own words

# The systems the chapter compares with, each with a word that shows it is
# named, and the addresses of its own documentation or source.
SYSTEMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Amazon SQS": ("SQS", ("docs.aws.amazon.com/AWSSimpleQueueService/",)),
    "Apache Kafka": ("Kafka", ("kafka.apache.org/", "github.com/apache/kafka/",
                               "cwiki.apache.org/confluence/display/KAFKA/")),
    "RabbitMQ": ("RabbitMQ", ("www.rabbitmq.com/docs/",)),
    "PostgreSQL": ("PostgreSQL", ("www.postgresql.org/docs/",)),
    "pgmq": ("pgmq", ("github.com/pgmq/pgmq/",)),
    "River": ("River", ("github.com/riverqueue/river/", "pkg.go.dev/github.com/riverqueue/river")),
    "goqite": ("goqite", ("github.com/maragudk/goqite/",)),
    "litequeue": ("litequeue", ("github.com/litements/litequeue/",)),
    "huey": ("huey", ("github.com/coleifer/huey/",)),
    "persist-queue": ("persist-queue", ("github.com/peter-wangxu/persist-queue/",)),
}
# Words that make a table column or a row about another system.
OTHER_SYSTEM_WORDS = tuple(word for word, _ in SYSTEMS.values()) + ("SQLite queues", "PostgreSQL queues")
EMPTY_CELLS = {"", "—", "-"}

FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
FOOTNOTE_DEFINITION = re.compile(r"^\[\^([^\]\s]+)\]:[ \t]*(.*)$")
FOOTNOTE_REFERENCE = re.compile(r"\[\^([^\]\s]+)\](?!:)")
TITLED_HTTPS_LINK = re.compile(r"\[([^\]]*\S[^\]]*)\]\((https://[^)\s]+)\)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
EXPLICIT_ID = re.compile(r"\{[^}]*#([\w-]+)[^}]*\}\s*$")
BLOCK_ID = re.compile(r"^\{:?\s*#([\w-]+)[^}]*\}\s*$")  # attr_list on the block above
FORBIDDEN_WORDS = re.compile(r"\bseed\b|\bSPEC\b|the specification's wording", re.IGNORECASE)


# ------------------------------------------------------------------ parsing

def prose_lines(text: str, *, blank_code: bool = True) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code; inline code spans blanked unless told not to."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.split("\n"), start=1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * len(match.group(1))
            continue
        if fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) <= {fence[0]}:
                fence = None
            continue
        if blank_code:
            line = CODE_SPAN.sub(lambda m: "`" + " " * (len(m.group(0)) - 2) + "`", line)
        out.append((number, line))
    return out


def footnote_definitions(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for _, line in prose_lines(text):
        match = FOOTNOTE_DEFINITION.match(line)
        if match:
            found.setdefault(match.group(1), []).append(match.group(2))
    return found


def footnote_references(text: str) -> list[str]:
    refs: list[str] = []
    for _, line in prose_lines(text):
        if FOOTNOTE_DEFINITION.match(line):
            continue
        refs.extend(FOOTNOTE_REFERENCE.findall(line))
    return refs


def tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table outside code: a list of rows, each a list of cells (header first)."""
    found: list[list[list[str]]] = []
    current: list[list[str]] = []
    for _, line in prose_lines(text) + [(0, "")]:
        stripped = line.strip()
        if stripped.startswith("|"):
            cells = [cell.strip() for cell in stripped.strip("|").split("|")]
            if not all(re.fullmatch(r":?-{3,}:?", cell) for cell in cells):
                current.append(cells)
            continue
        if current:
            found.append(current)
            current = []
    return found


def names_other_system(cell: str) -> bool:
    return any(re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", cell) for word in OTHER_SYSTEM_WORDS)


def anchors_of(page_text: str) -> set[str]:
    """The ids of a page: its headings' (toc, default slugify), and a block's own.

    attr_list gives a paragraph an id with ``{#name}`` at the end of its last
    line; a page that renamed a heading keeps the old anchor that way.
    """
    ids: set[str] = set()
    for _, line in prose_lines(page_text, blank_code=False):
        match = HEADING.match(line)
        if not match:
            block_id = BLOCK_ID.search(line)
            if block_id:
                ids.add(block_id.group(1))
            continue
        title = match.group(2)
        explicit = EXPLICIT_ID.search(title)
        if explicit:
            ids.add(explicit.group(1))
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link keeps its text
        title = re.sub(r"[`*]", "", title)  # code and emphasis marks; `_` stays (it is in ids)
        slug = slugify(title, "-")
        candidate, n = slug, 1
        while candidate in ids:
            candidate = f"{slug}_{n}"
            n += 1
        ids.add(candidate)
    return ids


# ------------------------------------------------------------------- checks

def footnote_problems(text: str) -> list[str]:
    problems: list[str] = []
    definitions = footnote_definitions(text)
    references = footnote_references(text)
    for label in sorted(set(references)):
        count = len(definitions.get(label, []))
        if count != 1:
            problems.append(f"[^{label}] is referenced but has {count} definitions")
    for label, bodies in sorted(definitions.items()):
        if label not in references:
            problems.append(f"[^{label}] is defined but never referenced")
        for body in bodies:
            if not TITLED_HTTPS_LINK.search(body):
                problems.append(f"[^{label}] is not a titled https link: {body!r}")
    return problems


def table_problems(text: str) -> list[str]:
    problems: list[str] = []
    for table in tables(text):
        header, body = table[0], table[1:]
        other_columns = [j for j, cell in enumerate(header) if j > 0 and names_other_system(cell)]
        ours = [j for j, cell in enumerate(header) if cell == "queue_core"]
        for row in body:
            label = row[0] if row else "?"
            if names_other_system(label) and not FOOTNOTE_REFERENCE.search(" ".join(row)):
                problems.append(f"row {label!r} names another system without a footnote")
            for j in other_columns:
                cell = row[j] if j < len(row) else ""
                if cell not in EMPTY_CELLS and not FOOTNOTE_REFERENCE.search(cell):
                    problems.append(f"row {label!r}, column {header[j]!r}: a claim without a footnote")
            for j in ours:
                cell = row[j] if j < len(row) else ""
                if not re.search(r"\]\((?!https?:)[^)#\s]*\.md(?:#[^)\s]*)?\)", cell):
                    problems.append(f"row {label!r}: the queue_core cell links no chapter")
    return problems


def system_problems(text: str) -> list[str]:
    problems: list[str] = []
    definitions = footnote_definitions(text)
    referenced = set(footnote_references(text))
    body = " ".join(line for _, line in prose_lines(text) if not FOOTNOTE_DEFINITION.match(line))
    for system, (word, addresses) in SYSTEMS.items():
        if not re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", body):
            problems.append(f"{system} is not named")
        cited = [label for label, bodies in definitions.items()
                 if label in referenced and any(a in b for b in bodies for a in addresses)]
        if not cited:
            problems.append(f"{system} is not cited to its own documentation or source")
    return problems


def link_problems(text: str, docs: Path = DOCS, page: str = "compared.md") -> list[str]:
    problems: list[str] = []
    own = anchors_of(text)
    for number, line in prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            if path:
                file = (docs / page).parent / path
                if not file.is_file():
                    problems.append(f"line {number}: {target} points to a missing page")
                    continue
                ids = anchors_of(file.read_text(encoding="utf-8"))
            else:
                ids = own
            if anchor and anchor not in ids:
                problems.append(f"line {number}: {target} points to a missing anchor")
    return problems


def wording_problems(text: str) -> list[str]:
    return [f"line {n}: internal word {m.group(0)!r}" for n, line in prose_lines(text)
            for m in FORBIDDEN_WORDS.finditer(line)]


# -------------------------------------------------------------------- tests

def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def systems_page() -> str:
    return SYSTEMS_PAGE.read_text(encoding="utf-8")


def test_every_footnote_is_defined_once_referenced_and_a_titled_https_link() -> None:
    assert footnote_problems(page()) == []
    assert footnote_problems(systems_page()) == []


def test_every_comparison_cell_about_another_system_is_cited() -> None:
    found = tables(page())
    assert found, "the chapter has no comparison table"
    assert any("queue_core" in t[0] and sum(names_other_system(c) for c in t[0]) >= 3 for t in found), \
        "no table compares queue_core with the other systems"
    in_tables = " ".join(" ".join(" ".join(row) for row in t) for t in found)
    for system, (word, _) in SYSTEMS.items():
        assert re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", in_tables), f"{system} is in no table"
    assert table_problems(page()) == []


def test_every_system_is_named_and_cited_to_its_own_pages() -> None:
    assert system_problems(page()) == []
    assert system_problems(systems_page()) == []


def test_every_relative_link_and_anchor_exists() -> None:
    assert link_problems(page()) == []
    assert link_problems(systems_page(), page="compared-systems.md") == []


def test_no_internal_words_reach_readers() -> None:
    assert wording_problems(page()) == []
    assert wording_problems(systems_page()) == []


BAD_PAGE = """\
# A bad comparison

SQS is mentioned[^missing] and so is huey[^twice].
An unused note follows, [a missing page](nowhere.md) and
[a missing anchor](lease.md#no-such-heading) and [here](#no-such-section).
`[^in-code]` is not a reference.

| mechanism | queue_core | Amazon SQS | Apache Kafka |
| --- | --- | --- | --- |
| lease | a lease | visibility timeout | — |
| fencing | [generation](fencing.md) | receipt handle[^twice] | generation id |

| system | what it does |
| --- | --- |
| RabbitMQ | acknowledgements |

This would be the seed design.

[^twice]: [huey](https://github.com/coleifer/huey/)
[^twice]: [again](https://github.com/coleifer/huey/)
[^unused]: [unused](https://example.org/)
[^plain]: http://example.org/ without a title
"""


def test_the_checks_catch_a_page_that_is_wrong_in_every_way() -> None:
    footnotes = footnote_problems(BAD_PAGE)
    assert "[^missing] is referenced but has 0 definitions" in footnotes
    assert "[^twice] is referenced but has 2 definitions" in footnotes
    assert "[^unused] is defined but never referenced" in footnotes
    assert "[^plain] is defined but never referenced" in footnotes
    assert any(p.startswith("[^plain] is not a titled https link") for p in footnotes)
    assert not any("in-code" in p for p in footnotes)  # a code span is no reference

    tables_found = table_problems(BAD_PAGE)
    assert "row 'lease', column 'Amazon SQS': a claim without a footnote" in tables_found
    assert "row 'fencing', column 'Apache Kafka': a claim without a footnote" in tables_found
    assert "row 'lease': the queue_core cell links no chapter" in tables_found
    assert "row 'RabbitMQ' names another system without a footnote" in tables_found
    assert not any("'fencing', column 'Amazon SQS'" in p for p in tables_found)  # it is cited
    assert not any("'lease', column 'Apache Kafka'" in p for p in tables_found)  # "—" claims nothing

    systems = system_problems(BAD_PAGE)
    assert "River is not named" in systems
    assert "Amazon SQS is not cited to its own documentation or source" in systems
    assert "huey is not cited to its own documentation or source" not in systems

    links = link_problems(BAD_PAGE)
    assert any("nowhere.md points to a missing page" in p for p in links)
    assert any("lease.md#no-such-heading points to a missing anchor" in p for p in links)
    assert any("#no-such-section points to a missing anchor" in p for p in links)
    assert not any("fencing.md" in p for p in links)

    assert any("'seed'" in p for p in wording_problems(BAD_PAGE))


def test_anchors_follow_the_site_slugs() -> None:
    ids = anchors_of("# Top\n\n## Claim order: `available_at`, then `event_id`\n\n"
                     "## synchronous=FULL is not a backup\n\n## The proof\n\n## The proof\n\n"
                     "```python\n# not a heading\n```\n\n## Custom {#my-id}\n")
    assert "claim-order-available_at-then-event_id" in ids
    assert "synchronousfull-is-not-a-backup" in ids
    assert {"the-proof", "the-proof_1", "my-id"} <= ids
    assert "not-a-heading" not in ids
