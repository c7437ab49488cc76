"""Test-only failpoints: make the process die (os._exit) at a named point to prove crash safety.

Enabled only by DURABLE_FAILPOINTS (comma-separated names); empty in production.
Known points:
  checkpoint.before_insert   inside the save transaction, before the first INSERT
  checkpoint.after_insert    after the INSERTs, before COMMIT
  checkpoint.after_commit    after COMMIT, before the reply is sent
  checkpoint.before_cache    after the reply, before the cache write
  idempotency.after_commit   after a Complete commits, before the reply
  operation.mid_batch        a bulk operation's second or later batch, after its actions, before COMMIT
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)

KNOWN = frozenset({
    "checkpoint.before_insert",
    "checkpoint.after_insert",
    "checkpoint.after_commit",
    "checkpoint.before_cache",
    "idempotency.after_commit",
    "operation.mid_batch",
})

_enabled: frozenset[str] = frozenset()


def parse(raw: str) -> frozenset[str]:
    names = frozenset(n.strip() for n in raw.split(",") if n.strip())
    unknown = names - KNOWN
    if unknown:
        raise ValueError(f"unknown failpoints {sorted(unknown)}; known: {sorted(KNOWN)}")
    return names


def enable(names: frozenset[str]) -> None:
    global _enabled
    _enabled = names
    if names:
        log.warning("failpoints enabled: this process will die on purpose", extra={"failpoints": sorted(names)})


def enabled(name: str) -> bool:
    return name in _enabled


def hit(name: str) -> None:
    """Dies at once, like kill -9, when the failpoint is enabled: no cleanup, no flush but the log."""
    if name in _enabled:
        log.error("failpoint hit: exiting", extra={"failpoint": name})
        sys.stderr.flush()
        os._exit(86)
