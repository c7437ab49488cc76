"""Start items: whether one sent again for an existing instance is the delivery it started with."""

from __future__ import annotations

from .. import canonical


def _delivered(item: object) -> object:
    """What a re-delivery must repeat: an n8n Webhook item's body (its headers change every time), else the item."""
    if isinstance(item, dict) and isinstance(item.get("headers"), dict) and "body" in item:
        return item["body"]
    return item


def same_delivery(stored: bytes, sent: bytes) -> bool:
    """Whether a start item sent for an existing instance is the delivery it started with (RFC 8785 equality)."""
    def form(payload: bytes) -> bytes:
        return canonical.canonical_value("start_item_json", _delivered(canonical.parse("start_item_json", payload)))
    return form(stored) == form(sent)
