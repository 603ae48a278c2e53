"""Business rules: which payloads make an effect, and which effect.

The transport accepts any valid JSON object; only the handler knows the
business fields. A payload this handler version cannot understand is a
*permanent* failure (``invalid_payload``): retrying cannot help, so the message
goes to the dead letters at once and the worker carries on with the rest.
Supporting a new category is a deliberate change: ``Handler(extra={"toy"})``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import PermanentFailure

DEFAULT_CATEGORIES = frozenset({"book", "pen", "bag"})
MIN_AMOUNT_CENTS = 1
MAX_AMOUNT_CENTS = 9_999_999
INVALID_PAYLOAD = "invalid_payload"


@dataclass(frozen=True)
class Effect:
    """The business result of one event: a row of the ``effects`` table."""

    category: str
    amount_cents: int


@dataclass(frozen=True)
class Handler:
    """Turn a stored payload into an Effect, or raise PermanentFailure."""

    categories: frozenset[str] = DEFAULT_CATEGORIES

    @classmethod
    def with_categories(cls, extra: Iterable[str] = ()) -> "Handler":
        """The default categories plus ``extra`` (the "new handler version")."""
        return cls(categories=DEFAULT_CATEGORIES | frozenset(extra))

    def __call__(self, payload: Mapping[str, Any]) -> Effect:
        category = payload.get("category")
        # Check the type before the set lookup: a list is unhashable and would
        # raise TypeError instead of a clean permanent failure.
        if not isinstance(category, str):
            raise PermanentFailure(INVALID_PAYLOAD, f"category must be a string, got {_json_kind(category)}")
        if category not in self.categories:
            known = ", ".join(sorted(self.categories))
            raise PermanentFailure(INVALID_PAYLOAD, f"unsupported category {category!r} (known: {known})")
        amount = payload.get("amount_cents")
        # bool is a subclass of int in Python; true is not an amount of money.
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise PermanentFailure(INVALID_PAYLOAD, f"amount_cents must be an integer, got {_json_kind(amount)}")
        if not MIN_AMOUNT_CENTS <= amount <= MAX_AMOUNT_CENTS:
            raise PermanentFailure(
                INVALID_PAYLOAD,
                f"amount_cents must be {MIN_AMOUNT_CENTS}..{MAX_AMOUNT_CENTS}, got {amount}",
            )
        return Effect(category=category, amount_cents=amount)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null or nothing"
    return {
        bool: "a boolean", int: "an integer", float: "a float", str: "a string",
        list: "an array", dict: "an object",
    }.get(type(value), type(value).__name__)
