"""The examples zip works the way a reader uses it: outside a clone, with only the package.

A reader downloads ``snippets/queue_core-examples.zip`` (the build writes it
with ``overrides/hooks.py``'s ``archive()``; ``tests/test_site.py`` checks the
built site serves exactly that), installs queue_core, unzips, and runs a
program from a folder of its own. Here that happens for real: a fresh venv in a
temporary folder, ``pip install`` of a copy of the repository's tracked files
(not editable, and not the working tree itself, so no build output lands in
it), and each program of the zip run by that venv's Python in an empty folder,
with no PYTHONPATH: the repository is not on its path. Each prints what
``tests/snippets_expected/`` records and leaves nothing behind.

A program that imports the repository's own code (``proof``) cannot run that
way; the zip leaves it out and its page says so. The negative control runs
such a program in the same place and sees it fail on the import.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from docs_support.publication import tracked_files
from tests.site_build import HOOKS

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = ROOT / "tests" / "snippets_expected"
FOLDER = "queue_core-examples"

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Reader:
    python: Path  # the fresh venv's interpreter, queue_core installed
    unzipped: Path  # the zip's folder, as unzipping it makes it
    env: dict[str, str]


def _run(reader: Reader, program: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    folder.mkdir()
    shutil.copy(program, folder / program.name)
    return subprocess.run([str(reader.python), program.name], cwd=folder, env=reader.env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Reader:
    tmp = tmp_path_factory.mktemp("reader")
    clone = tmp / "queue_core"  # what a clone holds, so that pip builds nothing inside the working tree
    for name in tracked_files():
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                              str(clone)], cwd=tmp, env=env, capture_output=True, text=True, timeout=400)
    assert install.returncode == 0, install.stderr
    shutil.rmtree(clone)  # gone, as a reader's download folder has no clone beside it
    archive = tmp / "queue_core-examples.zip"
    archive.write_bytes(HOOKS.archive())
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(tmp / "download")
    return Reader(python, tmp / "download" / FOLDER, env)


@pytest.mark.timeout(900)
def test_every_program_of_the_zip_runs_alone_with_only_the_package_installed(reader: Reader,
                                                                             tmp_path: Path) -> None:
    # the venv imports the installed package, not the repository
    where = subprocess.run([str(reader.python), "-c", "import queue_core, sys; print(queue_core.__file__);"
                            "print(any(p.rstrip('/') == sys.argv[1] for p in sys.path))", str(ROOT)],
                           cwd=tmp_path, env=reader.env, capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    location, on_path = where.stdout.split()
    assert "site-packages" in location and not location.startswith(str(ROOT)), location
    assert on_path == "False"

    programs = sorted(reader.unzipped.glob("*.py"))
    assert {p.name for p in programs} == {p.name for p in HOOKS.in_archive() if p.suffix == ".py"}
    assert len(programs) >= 30
    failures: dict[str, str] = {}
    for program in programs:
        folder = tmp_path / program.stem
        result = _run(reader, program, folder)
        expected = (EXPECTED / f"{program.stem}.txt").read_text(encoding="utf-8")
        if result.returncode != 0 or "Traceback" in result.stderr:
            failures[program.name] = f"exit {result.returncode}: {result.stderr[-2000:]}"
        elif result.stdout != expected:
            failures[program.name] = "prints something else than tests/snippets_expected records"
        elif sorted(p.name for p in folder.iterdir()) != [program.name]:
            failures[program.name] = "leaves files behind"
    assert failures == {}


@pytest.mark.timeout(900)
def test_a_program_left_out_of_the_zip_fails_outside_a_clone(reader: Reader, tmp_path: Path) -> None:
    """Negative control: the reader's place really lacks the repository, so the zip must leave such a program out."""
    left_out = [p for p in HOOKS.examples() if HOOKS.needs_a_clone(p)]
    assert [p.name for p in left_out] == ["evidence_check.py"]
    assert not (reader.unzipped / "evidence_check.py").exists()
    published = tmp_path / "published" / "evidence_check.py"
    published.parent.mkdir()
    published.write_bytes(HOOKS.published(left_out[0]))
    result = _run(reader, published, tmp_path / "alone")
    assert result.returncode != 0
    assert "No module named 'proof'" in result.stderr


# ------------------------------------------------------------- the README

def readme_rows(readme: str) -> dict[str, tuple[str, str]]:
    """The README's table: file -> (its chapter's page in the site, what it shows)."""
    rows = {}
    for file, chapter, what in re.findall(r"^\| `([^`]+)` \| (.*?) \| (.*?) \|$", readme, re.M):
        page = re.search(r"\(`([a-z/-]+/)`\)$", chapter)
        rows[file] = (page.group(1) if page else "", what)
    return rows


def readme_problems(readme: str) -> list[str]:
    """What is wrong with a README of the zip: a file of the zip missing or listed twice, a file
    listed that the zip does not hold, a chapter whose page does not show the file."""
    problems = []
    rows = readme_rows(readme)
    names = [p.name for p in HOOKS.in_archive()]
    listed = re.findall(r"^\| `([^`]+)` \|", readme, re.M)
    problems += [f"{n} is listed {listed.count(n)} times" for n in set(listed) if listed.count(n) > 1]
    problems += [f"{n} is not in the README" for n in names if n not in rows]
    problems += [f"{n} is in the README, not in the zip" for n in rows if n not in names]
    for name, (page, what) in rows.items():
        source = ROOT / "docs" / (page.rstrip("/") + ".md")
        if not page or not source.is_file():
            problems.append(f"{name}: no chapter")
        elif name not in source.read_text(encoding="utf-8"):
            problems.append(f"{name}: {page} does not show it")
        if not what:
            problems.append(f"{name}: says nothing of what it shows")
    return problems


def test_the_zip_has_a_readme_that_maps_each_program_to_its_chapter() -> None:
    with zipfile.ZipFile(io.BytesIO(HOOKS.archive())) as zf:
        readme = zf.read(f"{FOLDER}/README.md").decode("utf-8")
        assert zf.namelist()[0] == f"{FOLDER}/README.md"  # the first file a reader sees
    assert "python NAME.py" in readme and "pip install" in readme
    assert readme_problems(readme) == []
    # the lowest numbered chapter: naive_counter.py is shown first by chapter 1
    assert readme_rows(readme)["naive_counter.py"][0] == "problem/"


def test_a_readme_that_misses_or_misplaces_a_program_is_found() -> None:
    # Negative control: a row taken out, a row sent to a page that does not show it.
    readme = HOOKS.examples_readme()
    missing = "\n".join(line for line in readme.splitlines() if "`naive_counter.py`" not in line)
    assert readme_problems(missing) == ["naive_counter.py is not in the README"]
    moved = readme.replace("(`problem/`) | Naive version (a)", "(`lease/`) | Naive version (a)")
    assert moved != readme and readme_problems(moved) == ["naive_counter.py: lease/ does not show it"]
