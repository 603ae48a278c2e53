"""The package as it is published: build the sdist and the wheel, and read what is inside.

The build runs the way ``python -m build`` runs it, without that tool: pip
installs the build backend that ``pyproject.toml`` declares (``[build-system]
requires``) into a folder of its own, the sdist is built from a copy of
every file git tracks (as from a clone), and the wheel from the unpacked
sdist, so a file missing from the sdist fails the wheel too. The sdist holds
the product and nothing of the test suite, which needs the whole repository
(``MANIFEST.in`` says why). Nothing is written into the
repository. Then the wheel is unpacked and run with no site-packages at all:
what a user installs works without the repository beside it.
"""

from __future__ import annotations

import email.message
import email.parser
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import queue_core
from docs_support.publication import tracked_files

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "queue_core"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# The reference application's tables, and each engine's numbered migrations (relative to the package).
LEDGER_FILES = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.glob("app/ledger_migrations/*/*.sql"))
MIGRATION_FILES = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.glob("engines/*_migrations/*.sql"))
# each engine's named statements (engines/queries.py loads them)
QUERY_FILES = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.glob("engines/*_queries.sql"))
SQL_FILES = [*LEDGER_FILES, *MIGRATION_FILES, *QUERY_FILES]
NAME_VERSION = f"queue_core-{queue_core.__version__}"


@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path
    sdist_names: frozenset[str]
    wheel_names: frozenset[str]
    metadata: email.message.Message
    installed: Path  # the wheel unpacked, as pip would install a pure-Python wheel


def _backend(folder: Path) -> dict[str, str]:
    """The declared build backend, installed into ``folder``; the environment that finds it first."""
    requires = PYPROJECT["build-system"]["requires"]
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--target", str(folder), *requires], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"pip could not install the build backend {requires}:\n{proc.stderr}"
    return {**os.environ, "PYTHONPATH": str(folder)}


def _build(hook: str, source: Path, out: Path, env: dict[str, str]) -> Path:
    backend = PYPROJECT["build-system"]["build-backend"]
    code = (f"import importlib, sys; backend = importlib.import_module({backend!r}); "
            f"print(backend.{hook}(sys.argv[1]))")
    proc = subprocess.run([sys.executable, "-c", code, str(out)], cwd=source, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out / proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    tmp = tmp_path_factory.mktemp("packaging")
    env = _backend(tmp / "backend")
    source = tmp / "source"
    for name in tracked_files():  # what a clone holds: the sdist is built from it
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    dist = tmp / "dist"
    dist.mkdir()
    sdist = _build("build_sdist", source, dist, env)
    with tarfile.open(sdist) as tar:
        sdist_names = frozenset(tar.getnames())
        tar.extractall(tmp / "unpacked", filter="data")
    wheel = _build("build_wheel", tmp / "unpacked" / NAME_VERSION, dist, env)
    installed = tmp / "installed"
    with zipfile.ZipFile(wheel) as zf:
        wheel_names = frozenset(zf.namelist())
        metadata = email.parser.Parser().parsestr(zf.read(f"{NAME_VERSION}.dist-info/METADATA").decode("utf-8"))
        zf.extractall(installed)
    return Built(sdist, wheel, sdist_names, wheel_names, metadata, installed)


def test_the_files_are_named_by_the_one_version(built: Built) -> None:
    assert built.sdist.name == f"{NAME_VERSION}.tar.gz"
    assert built.wheel.name == f"{NAME_VERSION}-py3-none-any.whl"
    assert built.metadata["Name"] == "queue_core"
    assert built.metadata["Version"] == queue_core.__version__
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert "version" not in PYPROJECT["project"]  # queue_core.__version__ is the only place it is written


def test_the_license_is_an_spdx_expression_and_its_text_ships(built: Built) -> None:
    metadata = built.metadata
    assert float(metadata["Metadata-Version"]) >= 2.4  # the first version with License-Expression (PEP 639)
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["License"] is None  # the classic free-text field is replaced, not repeated
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License\n")
    with zipfile.ZipFile(built.wheel) as zf:
        assert zf.read(f"{NAME_VERSION}.dist-info/licenses/LICENSE").decode("utf-8") == license_text
    assert f"{NAME_VERSION}/LICENSE" in built.sdist_names


def test_the_classifiers_say_only_what_is_true(built: Built) -> None:
    classifiers = built.metadata.get_all("Classifier") or []
    assert len(classifiers) == len(set(classifiers))
    for expected in ("Intended Audience :: Developers", "Typing :: Typed", "Operating System :: POSIX",
                     "Programming Language :: Python :: 3 :: Only"):
        assert expected in classifiers
    assert sum(c.startswith("Development Status :: ") for c in classifiers) == 1
    assert any(c.startswith("Topic :: ") for c in classifiers)
    assert not any(c.startswith("License :: ") for c in classifiers)  # License-Expression says it
    # The SQLite engine's writers' turn takes fcntl.flock: POSIX only, and tested only there
    # (without fcntl, SQLite is refused with no_file_locks; see test_connections.py).
    assert "import fcntl" in (PACKAGE / "engines" / "sqlite_turn.py").read_text(encoding="utf-8")
    assert not any("Windows" in c or "OS Independent" in c for c in classifiers)
    # The oldest Python named is the one Requires-Python asks for.
    versions = sorted((int(c.rsplit(".", 1)[1]), c) for c in classifiers
                      if c.startswith("Programming Language :: Python :: 3.") and c.count(".") == 1)
    assert built.metadata["Requires-Python"] == f">=3.{versions[0][0]}"
    assert sys.version_info >= (3, versions[0][0])


def test_no_runtime_dependency_and_no_invented_address(built: Built) -> None:
    # PostgreSQL support is an optional extra; the SQLite default needs nothing.
    assert built.metadata.get_all("Requires-Dist") == ['psycopg[binary]>=3.2; extra == "postgres"']
    assert built.metadata.get_all("Provides-Extra") == ["postgres"]
    assert PYPROJECT["project"]["dependencies"] == []
    for url in built.metadata.get_all("Project-URL") or []:  # none until the project has a public address
        label, _, address = url.partition(", ")
        assert address.startswith("https://") and "example" not in address, url


def test_the_long_description_is_the_readme(built: Built) -> None:
    assert built.metadata["Description-Content-Type"] == "text/markdown"
    assert built.metadata.get_payload().strip() == (ROOT / "README.md").read_text(encoding="utf-8").strip()


def test_the_schema_files_the_marker_and_every_module_are_inside(built: Built) -> None:
    # the reference application's migration line: version 1 on each engine, and its steps
    assert {"app/ledger_migrations/sqlite/0001_effects.sql",
            "app/ledger_migrations/postgresql/0001_effects.sql"} <= set(LEDGER_FILES), LEDGER_FILES
    assert QUERY_FILES == ["engines/postgres_queries.sql", "engines/sqlite_queries.sql"]
    # SQLite's migrations from version 1, PostgreSQL's from 2 (its support began there), with no gap
    for folder, first in (("sqlite_migrations", 1), ("postgres_migrations", 2)):
        numbers = [int(name.split("/")[-1].split("_")[0]) for name in MIGRATION_FILES
                   if name.startswith(f"engines/{folder}/")]
        assert numbers == list(range(first, first + len(numbers))) and len(numbers) >= 2, (folder, numbers)
    # no SQL file anywhere else in the package
    assert sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.sql")) == sorted(SQL_FILES)
    modules = sorted(p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
    for name in [*modules, *(f"queue_core/{sql}" for sql in SQL_FILES), "queue_core/py.typed"]:
        assert name in built.wheel_names, name
        assert f"{NAME_VERSION}/{name}" in built.sdist_names, name
    for sql in SQL_FILES:
        assert (built.installed / "queue_core" / sql).read_bytes() == (PACKAGE / sql).read_bytes()
    packaged = {n for n in built.wheel_names if n.startswith("queue_core/")}
    assert packaged == {*modules, *(f"queue_core/{sql}" for sql in SQL_FILES), "queue_core/py.typed"}


def test_the_sdist_holds_the_product_and_no_part_of_the_test_suite(built: Built) -> None:
    inside = {name.removeprefix(f"{NAME_VERSION}/") for name in built.sdist_names if name != NAME_VERSION}
    top = {name.split("/")[0] for name in inside}
    assert top == {"PKG-INFO", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "setup.cfg",
                   "queue_core", "queue_core.egg-info"}, top
    assert not any(name.endswith((".pyc", "conftest.py")) or "/tests/" in f"/{name}" for name in inside)


def test_the_command_is_declared(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as zf:
        entry_points = zf.read(f"{NAME_VERSION}.dist-info/entry_points.txt").decode("utf-8")
    assert "[console_scripts]\nqueue-core = queue_core.cli:main\n" in entry_points


def test_the_unpacked_wheel_runs_without_the_repository(built: Built, tmp_path: Path) -> None:
    # -S: no site-packages, so neither the editable install nor anything else can stand in for the wheel.
    env = {**os.environ, "PYTHONPATH": str(built.installed)}

    def python(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-S", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert Path(python("-c", "import queue_core; print(queue_core.__file__)").strip()).is_relative_to(built.installed)
    assert python("-m", "queue_core", "--version") == f"queue-core {queue_core.__version__}\n"
    assert "effects: 4, total=20000" in python("-m", "queue_core", "demo")  # the schema files load from the wheel
    assert list(tmp_path.iterdir()) == []
