"""The reference demo reproduces every number of the specification."""

from __future__ import annotations

from pathlib import Path

from queue_core.app.demo import SNAPSHOT_KEYS, run_demo


def counts(ready: int, leased: int, done: int, dead: int) -> dict[str, int]:
    return {"ready": ready, "leased": leased, "done": done, "dead": dead}


def test_demo_numbers(tmp_path: Path) -> None:
    result = run_demo(tmp_path)
    data = result.to_dict()
    assert tuple(data) == SNAPSHOT_KEYS

    assert data["after_enqueue"]["messages"] == counts(4, 0, 0, 0)
    assert result.steps[0].text.endswith("4 accepted, 1 duplicate")

    intermediate = data["intermediate"]
    assert intermediate["messages"] == counts(1, 1, 1, 1)
    assert intermediate["effects"] == {"count": 1, "total_cents": 10000, "by_category": {"book": 10000}}

    final = data["final"]
    assert final["messages"] == counts(0, 0, 3, 1)
    assert final["effects"] == {"count": 3, "total_cents": 17000, "by_category": {"book": 15000, "pen": 2000}}

    assert data["after_reenqueue"] == final
    assert "0 accepted, 5 duplicates" in " ".join(step.text for step in result.steps)

    redriven = data["after_redrive"]
    assert redriven["messages"] == counts(0, 0, 4, 0)
    assert redriven["effects"]["total_cents"] == 20000
    assert redriven["effects"]["by_category"] == {"book": 15000, "pen": 2000, "toy": 3000}


def test_demo_timeline(tmp_path: Path) -> None:
    steps = run_demo(tmp_path).steps
    times = [step.now for step in steps]
    assert times[:5] == [1000] * 5  # enqueue and the four claims at 1000
    assert "os._exit(86)" in steps[3].text and "E0003" in steps[3].text
    assert steps[2].text.endswith("available at 1001")
    assert steps[5].now == 1001 and steps[6].now == 1002
    assert "generation 2" in steps[6].text
