"""RFC 8785 canonical JSON: the RFC's vectors, the refusals, and the transition from the old canonical form."""

from __future__ import annotations

import hashlib
import json
import struct
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
import rfc8785
from durable.v1 import idempotency_pb2, version_pb2
from durable_sidecar import canonical, definitions
from durable_sidecar.errors import InvalidArgument
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import Harness
from tests.sidecar.storage import fetch

VECTORS: dict[str, Any] = json.loads((Path(__file__).parents[1] / "fixtures" / "jcs_vectors.json").read_text("utf-8"))


@pytest.mark.parametrize("case", VECTORS["rfc"], ids=["3.2.2", "3.2.3"])
def test_the_rfc_examples_canonicalise_to_the_rfc_output(case: dict[str, str]) -> None:
    assert canonical.canonical_json(case["input"].encode()).decode() == case["expected"]


@pytest.mark.parametrize("case", VECTORS["numbers"], ids=[c["ieee754"] for c in VECTORS["numbers"]])
def test_the_rfc_number_vectors(case: dict[str, str]) -> None:
    (number,) = struct.unpack(">d", bytes.fromhex(case["ieee754"]))
    assert canonical.canonical_value("n", number).decode() == case["expected"]
    # Written as JSON text and read back the way JavaScript reads it, the same form.
    assert canonical.canonical_json(json.dumps(number).encode()).decode() == case["expected"]


@pytest.mark.parametrize("text", VECTORS["refused"])
def test_numbers_beyond_doubles_and_lone_surrogates_have_no_canonical_form(text: str) -> None:
    with pytest.raises(InvalidArgument):
        canonical.fingerprint_of(text.encode())


def test_fingerprints_ignore_key_order_whitespace_and_number_spelling() -> None:
    a = canonical.fingerprint_of(b'{"amount": 42, "x": 1e16}')
    assert a == canonical.fingerprint_of(b'{"x":10000000000000000, "amount":42.0}')
    assert a == hashlib.sha256(b'{"amount":42,"x":10000000000000000}').hexdigest()


@settings(max_examples=200, deadline=None, database=None)
@given(st.recursive(
    st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False),
              st.integers(-(2**53), 2**53), st.text()),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=25))
def test_any_document_reparses_to_its_own_canonical_form(value: Any) -> None:
    """Canonical output is JSON whose canonical form is itself (idempotent), whatever the spelling of the input."""
    try:
        text = json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return
    if b"\\ud" in text.lower():
        return  # a lone surrogate escape: refused, tested above
    once = canonical.canonical_json(text)
    assert canonical.canonical_json(once) == once
    assert canonical.canonical_json(json.dumps(value, indent=2, sort_keys=False).encode()) == once


# --- the transition from the canonical form before RFC 8785 ---------------------------


async def test_a_key_claimed_before_the_upgrade_still_matches_its_payload(harness: Harness) -> None:
    s = harness.alpha
    key = f"k-{uuid.uuid4().hex[:10]}"
    payload = b'{"amount": 1e16, "order": "o-1"}'
    item = idempotency_pb2.ClaimItem(scope="payment", key=key, payload_json=payload, holder="exec-1")
    first = (await s.idempotency.Claim(idempotency_pb2.ClaimRequest(items=[item]), metadata=s.metadata)).results[0]
    await s.idempotency.Complete(idempotency_pb2.CompleteRequest(scope="payment", key=key, attempt=first.key.attempt,
                                                                 result_json=b'{"ok": 1}'), metadata=s.metadata)
    legacy = canonical.legacy_fingerprint_of(payload)
    assert legacy and legacy != first.key.fingerprint  # 1e16 was written 1e+16 before
    await fetch(harness.sidecar.settings.database_url,
                "UPDATE durable_idempotency_keys SET fingerprint = %s WHERE namespace = %s AND key = %s",
                legacy, harness.sidecar.settings.tokens[s.token], key)
    # The same payload re-delivered after the upgrade: its new fingerprint differs from the stored one, its old one matches.
    other = idempotency_pb2.ClaimItem(scope="payment", key=key, payload_json=payload)
    await harness.sidecar.cache.forget_completed_keys([(harness.sidecar.settings.tokens[s.token], "payment", key)])
    again = (await s.idempotency.Claim(idempotency_pb2.ClaimRequest(items=[other]), metadata=s.metadata)).results[0]
    assert again.outcome == idempotency_pb2.CLAIM_OUTCOME_DUPLICATE and again.key.result_json == b'{"ok": 1}'
    different = idempotency_pb2.ClaimItem(scope="payment", key=key, payload_json=b'{"order": "o-2"}')
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.idempotency.Claim(idempotency_pb2.ClaimRequest(items=[different]), metadata=s.metadata)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_version_registered_before_the_upgrade_is_the_same_content(harness: Harness) -> None:
    s = harness.alpha
    wf = f"wf-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"nodes": [{"name": "Pay", "type": "t", "parameters": {"amount": 1e16, "rate": 1.0}}],
                       "connections": {}}).encode()
    first = await s.versions.RegisterVersion(version_pb2.RegisterVersionRequest(workflow_id=wf, definition_json=body),
                                             metadata=s.metadata)
    parsed = definitions.parse(body)
    assert parsed.legacy_content_hash and parsed.legacy_content_hash != parsed.content_hash
    await fetch(harness.sidecar.settings.database_url,
                "UPDATE durable_versions SET content_hash = %s WHERE namespace = %s AND workflow_id = %s",
                parsed.legacy_content_hash, harness.sidecar.settings.tokens[s.token], wf)
    again = await s.versions.RegisterVersion(version_pb2.RegisterVersionRequest(workflow_id=wf, definition_json=body),
                                             metadata=s.metadata)
    assert not again.created and again.version.version == first.version.version


def test_the_library_is_rfc8785() -> None:
    assert rfc8785.dumps({"b": 1, "a": [1.0, "€"]}) == '{"a":[1,"€"],"b":1}'.encode()
