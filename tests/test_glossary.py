"""Every term of the specification is defined once in the glossary and shown as a tooltip."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8")
TOOLTIPS = (ROOT / "docs" / "includes" / "glossary-terms.md").read_text(encoding="utf-8")
SPEC_TERMS = ["Queue", "Lease", "ACK", "Retry", "Backoff", "DLQ", "Fencing", "Effect", "Receipt", "Generation"]


def defined_terms() -> list[str]:
    # Definition lists: a term line followed by a line starting with ":   ".
    lines = GLOSSARY.splitlines()
    return [lines[i].strip() for i in range(len(lines) - 1) if lines[i + 1].startswith(":   ")]


def tooltip_terms() -> dict[str, str]:
    return dict(re.findall(r"^\*\[([^\]]+)\]: (.+)$", TOOLTIPS, re.M))


def test_every_spec_term_is_defined_once() -> None:
    terms = defined_terms()
    for term in SPEC_TERMS:
        assert terms.count(term) == 1, term
    assert len(terms) == len(set(terms)), "a term is defined twice"


def test_every_spec_term_has_a_tooltip_in_both_cases() -> None:
    tips = tooltip_terms()
    for term in SPEC_TERMS:
        assert term in tips or term.upper() == term and term in tips, term
        if term.upper() != term:
            assert term.lower() in tips, term.lower()


def test_no_page_other_than_the_glossary_redefines_a_term() -> None:
    for page in (ROOT / "docs").rglob("*.md"):
        if page.name in ("glossary.md", "glossary-terms.md"):
            continue
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"^\*\[", text, re.M), f"{page} defines its own tooltip"
