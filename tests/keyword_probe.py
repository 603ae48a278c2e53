"""A pytest plugin for tests/test_proof_commands.py: what each file's ``-k`` keyword selects.

``QUEUE_CORE_KEYWORDS`` holds ``{"tests/<file>": "<expression>", ...}`` as JSON;
after collection, each item of a named file is matched against its own file's
expression exactly as ``pytest -k`` matches (pytest's own ``Expression`` and
``KeywordMatcher``), and the ids selected are written, one a line, to the file
``QUEUE_CORE_KEYWORDS_OUT`` names. One collection answers for every file, where
``pytest tests/<file> -k ...`` would collect the suite once a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _pytest.mark import KeywordMatcher
from _pytest.mark.expression import Expression


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    expressions = {
        file: Expression.compile(text)
        for file, text in json.loads(os.environ["QUEUE_CORE_KEYWORDS"]).items()
    }
    selected = []
    for item in items:
        file = item.nodeid.split("::")[0]
        if file in expressions and expressions[file].evaluate(KeywordMatcher.from_item(item)):
            selected.append(item.nodeid)
    Path(os.environ["QUEUE_CORE_KEYWORDS_OUT"]).write_text("\n".join(selected), encoding="utf-8")
