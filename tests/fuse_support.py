"""The power-cut filesystem in tests: a fresh ``PowerFS`` per test, or a skip with the reason.

Without ``/dev/fuse``, ``fusermount3`` (Debian's fuse3) or mfusepy the tests
that use ``powerfs`` are skipped with the reason, except when
``QUEUE_CORE_REQUIRE_FUSE=1`` (``.ci/run`` sets it): then they fail with it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from proof.powerfs import PowerFS, fuse_available

ENV_REQUIRE = "QUEUE_CORE_REQUIRE_FUSE"


def require_fuse() -> None:
    """Skip (or, where FUSE is required, fail) when this machine cannot mount the filesystem."""
    why = fuse_available()
    if why is None:
        return
    if os.environ.get(ENV_REQUIRE) == "1":
        pytest.fail(f"{ENV_REQUIRE}=1 but the power-cut filesystem cannot mount: {why}")
    pytest.skip(f"the power-cut filesystem cannot mount here: {why}")


@pytest.fixture
def powerfs(tmp_path: Path) -> Iterator[PowerFS]:
    """A disk of its own, not mounted yet; unmounted after the test whatever happened."""
    require_fuse()
    fs = PowerFS(tmp_path / "fs")
    try:
        yield fs
    finally:
        fs.unmount()
