"""What may be published: the allowlist of tracked files and the typical secrets none may hold.

``tests/test_publication.py`` checks the files git tracks against these
rules; the map of the code prints them at build time.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
ALLOWLIST = ROOT / ".publication-allowlist"

# Typical secrets. The samples in the self-test are assembled at run time so
# that this file itself does not match.
SECRET_PATTERNS = {
    "private key": re.compile(r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----"),
    "AWS access key id": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),
    "Slack token": re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    "password in a URL": re.compile(
        r"\b[a-z][a-z0-9+.-]*://[^\s/:@]+:[^\s/@]+@[^\s/]+", re.I
    ),
    "assigned password": re.compile(
        r"(?i)\b(?:password|passwd|secret|api_key|token)\s*[:=]\s*['\"][^'\"\s]{8,}['\"]"
    ),
}


def tracked_files() -> list[str]:
    """The files git tracks (not the working folder)."""
    result = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            "the publication checks need a git checkout: " + result.stderr.decode()
        )
    return [name for name in result.stdout.decode().split("\0") if name]


def allowed_patterns() -> list[str]:
    """The fnmatch patterns of ``.publication-allowlist``, from the repository root."""
    lines = ALLOWLIST.read_text(encoding="utf-8").splitlines()
    return [
        entry.strip() for entry in lines if entry.strip() and not entry.startswith("#")
    ]


def find_secrets(text: str) -> list[str]:
    """The kinds of typical secret that ``text`` holds."""
    return [name for name, pattern in SECRET_PATTERNS.items() if pattern.search(text)]
