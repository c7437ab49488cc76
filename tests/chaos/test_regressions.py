"""Kept regression cases (chaos/regressions/): stored whole, loaded back exactly, whatever the generator draws now."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from chaos import regressions
from chaos.generator import delivery_body, generate


@pytest.mark.parametrize("seed,index", [(7, 4), (169, 9), (139, 1), (42, 4), (169, 1)])
def test_a_case_stored_and_loaded_is_the_same_case_at_another_providers_address(seed: int, index: int) -> None:
    case = generate(seed, index, "http://127.0.0.1:8101")
    stored = json.loads(json.dumps(regressions.case_to_json(case, "http://127.0.0.1:8101")))
    assert "127.0.0.1:8101" not in json.dumps(stored)
    loaded = regressions.case_from_json(stored, "http://127.0.0.1:9202")
    assert json.dumps(loaded.workflows) == json.dumps(case.workflows).replace("127.0.0.1:8101", "127.0.0.1:9202")
    # Every field, the per-key ones (channels, line items, signal times) included, and so every delivery's body.
    assert replace(loaded, workflows=case.workflows) == case
    assert all(delivery_body(loaded, k) == delivery_body(case, k) for k in case.keys)


def test_the_round_trip_above_covers_line_items_and_a_document() -> None:
    lined = generate(169, 9, "http://x")
    assert max(lined.lines.values()) > 1 and any(s.shape == "lines" for s in lined.shape.segments)
    assert any(x.file for e in generate(169, 1, "http://x").expected.values() for x in e.calls)


def test_every_kept_regression_loads_with_its_faults_and_a_note() -> None:
    kept = regressions.kept()
    assert kept, "the chaos regression folder is empty"
    for path in kept:
        cases, plan, mode = regressions.load(path, "http://127.0.0.1:9202")
        assert cases and plan and mode in ("regular", "queue"), path.name
        assert json.loads(path.read_text())["note"], path.name
        for case in cases:
            assert set(case.expected) == set(case.keys), path.name
            assert "providers.chaos.invalid" not in json.dumps(case.workflows), path.name
