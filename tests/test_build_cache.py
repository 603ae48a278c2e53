"""The site build's cache of executed blocks never serves a stale output.

``docs_support/exec_cache.py`` keys a block's output by the block, the
repository outside docs/ and the environment, and checks again what the block
opened, listed or could read through another process. Each test here runs blocks
against a repository of its own (a temporary folder), changes one thing the block
depends on and sees the output recorded again; each has its negative control (the
same build with nothing changed reuses the output). The last tests run a block
through markdown-exec's real formatter with the hook ``overrides/build_cache.py``
installed, and check that without ``QUEUE_CORE_EXEC_CACHE`` every block runs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from docs_support.exec_cache import ExecCache

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small repository (no git: every file counts) with the build's working folder at its root."""
    root = tmp_path / "repo"
    for name, text in {
        "queue_core/values.py": "LEASE = 30\n",
        "snippets/program.py": "print('hello')\n",
        "requirements-docs.txt": "mkdocs==1\n",
        "docs/page.md": "# A page\n",
        "docs/other.md": "# Another page\n",
        "docs/assets/data.json": '{"rate": 1}\n',
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, "utf-8")
    monkeypatch.chdir(root)
    return root


def block(code: str) -> Callable[[], str]:
    """A block as markdown-exec runs it: its printed output, as a string."""

    def run() -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<block>", "exec"), {"__name__": "block"})
        return out.getvalue()

    return run


def build(root: Path, folder: Path, code: str) -> tuple[str, bool]:
    """One build of one block: a new cache object, as a new `make serve` makes."""
    return ExecCache(folder, root=root).output(code, {"returncode": 0}, block(code))


READS_PACKAGE = "print(open('queue_core/values.py').read().strip())"


def test_an_unchanged_block_is_not_run_again(repo: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    assert build(repo, folder, READS_PACKAGE) == ("LEASE = 30\n", True)
    assert build(repo, folder, READS_PACKAGE) == ("LEASE = 30\n", False)
    # negative control: another block (its source is in the key) runs
    assert build(repo, folder, READS_PACKAGE + "\nprint(1)")[1] is True


@pytest.mark.parametrize(
    "dependency",
    ["queue_core/values.py", "snippets/program.py", "requirements-docs.txt"],
)
def test_a_changed_repository_file_records_the_output_again(
    repo: Path, tmp_path: Path, dependency: str
) -> None:
    folder = tmp_path / "cache"
    first, ran = build(repo, folder, READS_PACKAGE)
    assert ran and first == "LEASE = 30\n"
    assert build(repo, folder, READS_PACKAGE) == (first, False)  # negative control
    path = repo / dependency
    path.write_text(
        path.read_text("utf-8").replace("30", "31") + "# changed\n", "utf-8"
    )
    output, ran = build(repo, folder, READS_PACKAGE)
    assert ran, f"a change of {dependency} must run the block again"
    if dependency == "queue_core/values.py":
        assert output.startswith("LEASE = 31\n")
    recorded = [
        json.loads(p.read_text("utf-8")) for p in (folder / "blocks").glob("*.json")
    ]
    assert output in [entry["output"] for entry in recorded]


def test_a_new_file_outside_docs_records_the_output_again(
    repo: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "cache"
    build(repo, folder, READS_PACKAGE)
    assert build(repo, folder, READS_PACKAGE)[1] is False  # negative control
    (repo / "queue_core" / "new.py").write_text("X = 1\n", "utf-8")
    assert build(repo, folder, READS_PACKAGE)[1] is True


READS_PAGE_DATA = "import json; print(json.load(open('docs/assets/data.json'))['rate'])"


def test_a_file_under_docs_counts_only_if_the_block_read_it(
    repo: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "cache"
    assert build(repo, folder, READS_PAGE_DATA) == ("1\n", True)
    # negative control: a page the block did not read changes; the output is reused
    (repo / "docs" / "other.md").write_text("# Another page, edited\n", "utf-8")
    assert build(repo, folder, READS_PAGE_DATA) == ("1\n", False)
    (repo / "docs" / "assets" / "data.json").write_text('{"rate": 2}\n', "utf-8")
    assert build(repo, folder, READS_PAGE_DATA) == ("2\n", True)


LISTS_PAGES = "import os; print(sorted(os.listdir('docs')))"


def test_a_listed_folder_counts_its_new_files(repo: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    first, _ = build(repo, folder, LISTS_PAGES)
    (repo / "docs" / "other.md").write_text("# edited\n", "utf-8")
    assert build(repo, folder, LISTS_PAGES) == (first, False)  # negative control
    (repo / "docs" / "new.md").write_text("# new\n", "utf-8")
    output, ran = build(repo, folder, LISTS_PAGES)
    assert ran and "new.md" in output


SPAWNS = (
    "import subprocess, sys\n"
    "print(subprocess.run([sys.executable, '-c', 'print(open(\"docs/page.md\").read())'],"
    " capture_output=True, text=True, check=True).stdout.strip())"
)


def test_a_block_that_starts_a_process_depends_on_every_page(
    repo: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "cache"
    assert build(repo, folder, SPAWNS) == ("# A page\n", True)
    assert build(repo, folder, SPAWNS) == ("# A page\n", False)  # negative control
    (repo / "docs" / "page.md").write_text("# A page, edited\n", "utf-8")
    assert build(repo, folder, SPAWNS) == ("# A page, edited\n", True)


RUNS_THE_PACKAGE = (
    "import subprocess, sys\n"
    "print(subprocess.run([sys.executable, '-m', 'queue_core', '--version'], cwd='/',"
    " capture_output=True, text=True, check=True).stdout.strip() != '')"
)


def test_the_package_run_as_a_program_reads_no_page(repo: Path, tmp_path: Path) -> None:
    """`python -m queue_core` is repository code (in every key): a page edit keeps the output."""
    folder = tmp_path / "cache"
    assert build(repo, folder, RUNS_THE_PACKAGE) == ("True\n", True)
    (repo / "docs" / "page.md").write_text("# A page, edited\n", "utf-8")
    assert build(repo, folder, RUNS_THE_PACKAGE) == ("True\n", False)
    # control: the same edit reruns a block whose process could read the page (SPAWNS)
    build(repo, folder, SPAWNS)
    (repo / "docs" / "page.md").write_text("# A page, edited again\n", "utf-8")
    assert build(repo, folder, SPAWNS) == ("# A page, edited again\n", True)
    assert build(repo, folder, RUNS_THE_PACKAGE)[1] is False


def test_the_environment_a_page_prints_is_in_the_key(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = "import os; print(os.environ.get('REPO_URL', 'none'))"
    folder = tmp_path / "cache"
    monkeypatch.delenv("REPO_URL", raising=False)
    assert build(repo, folder, code) == ("none\n", True)
    assert build(repo, folder, code) == ("none\n", False)  # negative control
    monkeypatch.setenv("REPO_URL", "https://example.org/q")
    assert build(repo, folder, code) == ("https://example.org/q\n", True)


def test_a_block_that_prints_the_time_of_day_runs_every_time(
    repo: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "cache"
    now = "import datetime; print(datetime.datetime.now(datetime.timezone.utc).year > 2000)"
    assert build(repo, folder, now) == ("True\n", True)
    assert build(repo, folder, now) == ("True\n", True)
    # control: a model clock's now() is the block's own, deterministic: reused
    model = "class C:\n    def now(self): return 1000\nclock = C(); print(clock.now())"
    assert build(repo, folder, model) == ("1000\n", True)
    assert build(repo, folder, model) == ("1000\n", False)


def test_a_failed_block_is_never_stored(repo: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    failing = "assert 'LEASE = 99' in open('queue_core/values.py').read()"
    for _ in range(2):  # run each time: a failure is not an output
        with pytest.raises(AssertionError):
            build(repo, folder, failing)
    assert not list(folder.rglob("*.json"))
    passing = failing.replace("99", "30") + "; print('ok')"
    assert build(repo, folder, passing) == ("ok\n", True)  # control: stored...
    assert build(repo, folder, passing) == ("ok\n", False)  # ...and reused


def test_in_a_git_clone_untracked_files_count_and_ignored_ones_do_not(
    repo: Path, tmp_path: Path
) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "-q")
    (repo / ".gitignore").write_text("ignored/\n.cache/\n", "utf-8")
    git("add", ".")
    folder = repo / ".cache" / "exec"  # inside the repository, as make serve keeps it
    build(repo, folder, READS_PACKAGE)
    (repo / "ignored").mkdir()
    (repo / "ignored" / "x.txt").write_text("x", "utf-8")
    assert build(repo, folder, READS_PACKAGE)[1] is False  # negative control
    (repo / "queue_core" / "untracked.py").write_text("Y = 2\n", "utf-8")
    assert build(repo, folder, READS_PACKAGE)[1] is True


# -- the hook, with markdown-exec's own formatter ---------------------------------


def load_hook(monkeypatch: pytest.MonkeyPatch, folder: Path | None) -> ModuleType:
    if folder is None:
        monkeypatch.delenv("QUEUE_CORE_EXEC_CACHE", raising=False)
    else:
        monkeypatch.setenv("QUEUE_CORE_EXEC_CACHE", str(folder))
    monkeypatch.delenv("QUEUE_CORE_EXEC_HELPER", raising=False)
    spec = importlib.util.spec_from_file_location(
        "queue_core_build_cache", ROOT / "overrides" / "build_cache.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def formatters_restored() -> Iterator[None]:
    from markdown_exec._internal import main as exec_main

    saved = dict(exec_main.formatters)
    try:
        yield
    finally:
        exec_main.formatters.clear()
        exec_main.formatters.update(saved)


def render(hook: ModuleType, text: str) -> str:
    import markdown
    from markdown_exec import formatter, validator

    hook.BUILD.page = "page.md"
    fences = [
        {
            "name": "python",
            "class": "python",
            "validator": validator,
            "format": formatter,
        }
    ]
    md = markdown.Markdown(
        extensions=["pymdownx.superfences"],
        extension_configs={"pymdownx.superfences": {"custom_fences": fences}},
    )
    return md.convert(text)


def page_block(counter: Path) -> str:
    return (
        '```python exec="on" result="text"\n'
        f"with open({str(counter)!r}, 'a') as f:\n"
        "    f.write('ran\\n')\n"
        "print(open('queue_core/values.py').read().strip())\n"
        "```\n"
    )


def test_the_hook_runs_a_page_block_once_and_again_after_a_change(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = tmp_path / "runs.txt"
    with formatters_restored():
        hook = load_hook(monkeypatch, tmp_path / "cache")
        hook.on_config({})
        outputs = []
        for change in (None, None, "LEASE = 45\n"):
            if change:
                (repo / "queue_core" / "values.py").write_text(change, "utf-8")
            hook.BUILD.cache = ExecCache(tmp_path / "cache", root=repo)  # a new build
            outputs.append(render(hook, page_block(counter)))
    runs = counter.read_text("utf-8").count("ran")
    assert (
        runs == 2
    ), "once for the first build, once after the change; the second reused"
    assert outputs[0] == outputs[1] and "LEASE = 30" in outputs[0]
    assert "LEASE = 45" in outputs[2]


def test_without_the_variable_every_block_runs(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = tmp_path / "runs.txt"
    with formatters_restored():
        hook = load_hook(monkeypatch, None)
        hook.on_config({})
        assert hook.BUILD.cache is None
        for _ in range(3):
            render(hook, page_block(counter))
    assert counter.read_text("utf-8").count("ran") == 3


def test_only_serve_and_live_set_the_cache() -> None:
    """`make site` (the CI's and Pages' build) and the tests never use the cache."""
    rules: dict[str, list[str]] = {}
    target = ""
    for line in (ROOT / "Makefile").read_text("utf-8").splitlines():
        if line and not line[0].isspace() and ":" in line and not line.startswith("#"):
            target = line.split(":")[0].strip()
        elif line.startswith("\t"):
            rules.setdefault(target, []).append(line)
    using = {
        t
        for t, lines in rules.items()
        if any("QUEUE_CORE_EXEC_CACHE" in x for x in lines)
    }
    assert using == {"serve", "live"}
    assert rules["site"] and rules["test"]  # control: the rules were read
    assert "QUEUE_CORE_EXEC_CACHE" not in (ROOT / "pyproject.toml").read_text("utf-8")


def test_a_build_under_pytest_never_uses_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test's build runs every block even if QUEUE_CORE_EXEC_CACHE leaked into its environment."""
    with formatters_restored():
        hook = load_hook(monkeypatch, tmp_path / "cache")
        hook.on_config({})
        assert hook.BUILD.cache is None
        monkeypatch.delenv("PYTEST_CURRENT_TEST")  # control: outside pytest it is used
        hook.on_config({})
        assert hook.BUILD.cache is not None
        assert hook.BUILD.cache.folder == (tmp_path / "cache").resolve()
