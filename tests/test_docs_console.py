"""Shell sessions shown on the site are executed: each prints what the page says."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .console import run, sessions

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").rglob("*.md"))
BLOCKS = [
    (page, index, block)
    for page in PAGES
    for index, block in enumerate(sessions(page.read_text(encoding="utf-8")), start=1)
]


@pytest.mark.parametrize("page, index, block", BLOCKS,
                         ids=[f"{p.relative_to(ROOT / 'docs')}#{i}" for p, i, _ in BLOCKS])
def test_console_session_prints_what_the_page_shows(page: Path, index: int, block, tmp_path: Path) -> None:
    # Every session starts in an empty folder holding the batches of snippets/
    # (*.jsonl), and the reference demo's five lines once more as batch.jsonl.
    for batch_file in (ROOT / "snippets").glob("*.jsonl"):
        shutil.copy(batch_file, tmp_path / batch_file.name)
    shutil.copy(ROOT / "snippets" / "demo.jsonl", tmp_path / "batch.jsonl")
    assert block, f"{page}: console block {index} has no command"
    for command in block:
        output, status = run(command, tmp_path)
        assert (output, status) == (command.expected, command.expected_status), \
            f"{page.name} session {index}: {command.line}"


# The runner itself: what a session may contain, and what it refuses.

def _one_session(text: str) -> list:
    (block,) = sessions(f"```console\n{text}```\n")
    return block


def test_a_here_document_creates_the_file_and_prints_nothing(tmp_path: Path) -> None:
    block = _one_session(
        "$ cat > notes.txt <<'EOF'\n"
        "$ not a command: a line of the file\n"
        "[exit 3]\n"
        "  indented, kept as written\n"
        "EOF\n"
        "$ cat > batch.jsonl <<'EOF'\n"
        '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}\n'
        "EOF\n"
        "$ queue-core --now 1000 enqueue batch.jsonl\n"
        '{"accepted": 1, "duplicates": 0}\n'
    )
    assert [c.line for c in block] == ["cat > notes.txt <<'EOF'", "cat > batch.jsonl <<'EOF'",
                                       "queue-core --now 1000 enqueue batch.jsonl"]
    assert [(c.expected, c.expected_status) for c in block[:2]] == [("", 0), ("", 0)]
    for command in block:
        assert run(command, tmp_path) == (command.expected, command.expected_status)
    assert (tmp_path / "notes.txt").read_bytes() == \
        b"$ not a command: a line of the file\n[exit 3]\n  indented, kept as written\n"
    assert (tmp_path / "batch.jsonl").read_bytes() == \
        b'{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}\n'


def test_an_empty_here_document_writes_an_empty_file(tmp_path: Path) -> None:
    (command,) = _one_session("$ cat > empty.jsonl <<'EOF'\nEOF\n")
    assert run(command, tmp_path) == ("", 0)
    assert (tmp_path / "empty.jsonl").read_bytes() == b""


def test_output_shown_after_a_here_document_is_compared_like_any_other(tmp_path: Path) -> None:
    (command,) = _one_session("$ cat > a.jsonl <<'EOF'\nline\nEOF\nsomething cat never prints\n")
    assert command.expected == "something cat never prints"
    assert run(command, tmp_path) != (command.expected, command.expected_status)


@pytest.mark.parametrize("line", [
    "ls",
    "cat batch.jsonl",
    "echo '{}' > batch.jsonl",
    "python -m queue_core status",
    "queue-core status | head -1",
    "queue-core status > out.txt",
    "queue-core status && rm batch.jsonl",
    "queue-core status; ls",
    "queue-core enqueue $HOME/batch.jsonl",
    "queue-core enqueue `ls`",
    "queue-core enqueue - < batch.jsonl",
])
def test_other_shell_commands_are_refused(line: str, tmp_path: Path) -> None:
    (command,) = _one_session(f"$ {line}\n")
    with pytest.raises(AssertionError, match="only `queue-core ...` and `cat > NAME <<'EOF'`"):
        run(command, tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("line", [
    "cat > batch.jsonl <<EOF",
    'cat > batch.jsonl <<"EOF"',
    "cat > batch.jsonl << 'EOF'",
    "cat >batch.jsonl <<'EOF'",
    "cat > batch.jsonl <<'END'",
    "cat >> batch.jsonl <<'EOF'",
    "cat <<'EOF' > batch.jsonl",
    "cat > batch.jsonl <<'EOF' && ls",
])
def test_only_one_form_of_here_document_is_accepted(line: str, tmp_path: Path) -> None:
    (command,) = _one_session(f"$ {line}\ncontent\nEOF\n")
    with pytest.raises(AssertionError, match="exactly `cat > NAME <<'EOF'`"):
        run(command, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_here_document_without_its_eof_line_is_a_clear_error(tmp_path: Path) -> None:
    block = _one_session("$ cat > batch.jsonl <<'EOF'\ncontent\n$ queue-core status\n")
    assert len(block) == 1, "the rest of the block is the unclosed document, not commands"
    with pytest.raises(AssertionError, match="no closing line 'EOF'"):
        run(block[0], tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["../batch.jsonl", "sub/batch.jsonl", "/tmp/batch.jsonl", "..", ".",
                                  ".hidden", "~/batch.jsonl", "a\\b"])
def test_a_here_document_writes_only_a_plain_file_name(name: str, tmp_path: Path) -> None:
    folder = tmp_path / "session"
    folder.mkdir()
    (command,) = _one_session(f"$ cat > {name} <<'EOF'\ncontent\nEOF\n")
    with pytest.raises(AssertionError, match="plain file name"):
        run(command, folder)
    assert list(tmp_path.rglob("*")) == [folder]
