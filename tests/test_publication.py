"""Publication checks: only expected files are tracked, and none holds a typical secret."""

from __future__ import annotations

import fnmatch

import pytest

from docs_support.publication import ROOT, allowed_patterns, find_secrets, tracked_files


def test_tracked_files_match_the_allowlist() -> None:
    patterns = allowed_patterns()
    files = tracked_files()
    assert files, "no tracked files found"
    strays = [f for f in files if not any(fnmatch.fnmatchcase(f, p) for p in patterns)]
    assert strays == [], f"tracked files outside .publication-allowlist: {strays}"


def test_tracked_files_hold_no_typical_secrets() -> None:
    found = {}
    for name in tracked_files():
        path = ROOT / name
        if not path.is_file() or path.stat().st_size > 5_000_000:
            continue
        hits = find_secrets(path.read_text(encoding="utf-8", errors="replace"))
        if hits:
            found[name] = hits
    assert found == {}


@pytest.mark.parametrize("sample, kind", [
    ("-----BEGIN " + "RSA PRIVATE KEY-----", "private key"),
    ("AKIA" + "ABCDEFGHIJKLMNOP", "AWS access key id"),
    ("gh" + "p_" + "a" * 36, "GitHub token"),
    ("xo" + "xb-1234567890-abcdef", "Slack token"),
    ("postgres://app:" + "hunter2@db.example/app", "password in a URL"),
    ("password = '" + "correct-horse'", "assigned password"),
])
def test_the_secret_scanner_finds_typical_secrets(sample: str, kind: str) -> None:
    assert kind in find_secrets(f"config line: {sample}\n")


def test_the_scanner_ignores_ordinary_text() -> None:
    assert find_secrets("http://127.0.0.1:8000/ and the lease token is a generation number") == []


def test_the_allowlist_rejects_a_database_file() -> None:
    assert not any(fnmatch.fnmatchcase("queue.sqlite3", p) for p in allowed_patterns())


def test_no_tracked_file_points_outside_the_repository() -> None:
    # The repository stands alone: nothing may send a reader or a contributor to a
    # folder beside the clone. (Assembled at run time, so this file does not match.)
    outside = ".." + "/shared/"
    pointing = [name for name in tracked_files()
                if (ROOT / name).is_file() and outside in (ROOT / name).read_text(encoding="utf-8", errors="replace")]
    assert pointing == []
