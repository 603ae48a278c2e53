"""Helpers for writing batches in tests."""

from __future__ import annotations

import json


def line(event_id: str, category: str = "book", amount_cents: int = 100, **extra: object) -> str:
    """One JSONL line of the batch format."""
    return json.dumps({"event_id": event_id, "payload": {"category": category, "amount_cents": amount_cents, **extra}})


def batch(*lines: str) -> str:
    return "\n".join(lines) + "\n"
