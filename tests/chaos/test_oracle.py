"""The chaos oracle (chaos/oracle.py) on made-up histories: for each rule, a history that keeps it passes and a
history with a planted defect fails it, so no generated case can pass the oracle vacuously."""

from __future__ import annotations

from dataclasses import replace

from chaos import oracle
from chaos.history import (
    CallFact,
    CheckpointFact,
    DeliveryFact,
    Expectation,
    ExpectedCall,
    FaultFact,
    History,
    InstanceFact,
    KeyFact,
    LimitedCall,
    SentFile,
)

WF, KEY, T0 = "chaos7x0", "s7c0k0", 1_000_000.0


def good_history() -> History:
    """One key through two side effects (payment plain, coupon on the card branch), delivered twice at once
    and once after it completed; n8n killed while its payment call was in flight, so the call came again with
    the same Idempotency-Key and the provider replayed it."""
    e = Expectation(0, 0, WF, KEY, ("s1", "s2"), (ExpectedCall("payment", "s1", "plain"), ExpectedCall("coupon", "s2", "card")),
                    suspension_allowed=False, retry_policy=False, base_bound_s=60.0)
    deliveries = [DeliveryFact(0, 0, KEY, 0, "first", T0, T0 + 0.3, 200, 1),
                  DeliveryFact(0, 0, KEY, 1, "concurrent", T0 + 0.1, T0 + 0.4, 200, 1),
                  DeliveryFact(0, 0, KEY, 2, "after-completion", T0 + 40, T0 + 40.2, 200, 1)]
    calls = [CallFact("payment", KEY, "dk-pay", T0 + 1, 200, True, "payment_1", "plain"),
             CallFact("payment", KEY, "dk-pay", T0 + 20, 200, False, "payment_1", "plain"),
             CallFact("coupon", KEY, "dk-coupon", T0 + 21, 200, True, "coupon_1", "card")]
    start = {"body": {"orderId": KEY, "method": "card"}}
    s1 = {**start, "s1": {"id": "payment_1", "service": "payment", "status": "ok"}}
    s2 = {**s1, "s2": {"id": "coupon_1", "service": "coupon", "status": "ok"}}
    return History(
        expectations=[e], deliveries=deliveries, calls=calls,
        instances=[InstanceFact(WF, KEY, "completed", False, T0 + 0.2, T0 + 22, 1, 1, 0, False)],
        checkpoints=[CheckpointFact(WF, KEY, 1, "s1", T0 + 20.5, s1), CheckpointFact(WF, KEY, 2, "s2", T0 + 22, s2)],
        keys=[KeyFact("s1", KEY, "completed", 2, "payment_1", T0 + 20.5), KeyFact("s2", KEY, "completed", 1, "coupon_1", T0 + 22)],
        faults=[FaultFact("n8n-kill", 0, "n8n main", T0 + 5, T0 + 15)], collected_at=T0 + 100)


def rules_broken(h: History) -> set[int]:
    return {v.rule for v in oracle.check(h)}


def test_a_history_that_keeps_every_rule_passes() -> None:
    assert oracle.check(good_history()) == []


# Rule 1: every acknowledged delivery's instance completes.

def test_rule_1_fails_when_an_acknowledged_delivery_has_no_instance() -> None:
    h = good_history()
    h.instances = []
    assert 1 in rules_broken(h)
    assert oracle.lost(h) == [KEY]


def test_rule_1_fails_when_an_acknowledged_instance_stays_running() -> None:
    h = good_history()
    h.instances = [replace(h.instances[0], status="running", finished_at=None)]
    assert 1 in rules_broken(h)


def test_rule_1_allows_a_suspension_only_where_the_schedule_exhausts_the_retry_policy() -> None:
    h = good_history()
    h.instances = [replace(h.instances[0], was_suspended=True, operator_retries=1)]
    assert 1 in rules_broken(h)
    h.expectations = [replace(h.expectations[0], suspension_allowed=True, retry_policy=True)]
    assert 1 not in rules_broken(h)


# Rule 2: exactly one effective call per side effect and key.

def test_rule_2_fails_when_the_provider_ignores_keys_and_performs_the_repeat() -> None:
    h = good_history()
    h.calls[1] = replace(h.calls[1], effective=True, reply_id="payment_2")
    assert 2 in rules_broken(h)
    assert oracle.duplicate_effects(h) == [f"{KEY}/payment"]


def test_rule_2_fails_on_a_repeat_with_another_idempotency_key() -> None:
    h = good_history()
    h.calls[1] = replace(h.calls[1], idempotency_key="dk-other")
    assert 2 in rules_broken(h)


def test_rule_2_fails_on_a_repeat_when_no_holder_died() -> None:
    h = good_history()
    h.faults = [replace(h.faults[0], kind="redis-kill")]
    assert 2 in rules_broken(h)


def test_rule_2_fails_on_a_side_effect_that_never_ran_in_a_completed_instance() -> None:
    h = good_history()
    h.calls = [c for c in h.calls if c.provider != "coupon"]
    assert 2 in rules_broken(h)


# Rule 3: no instance unfinished past its bound.

def test_rule_3_fails_when_an_instance_is_unfinished_at_collection() -> None:
    h = good_history()
    h.instances = [replace(h.instances[0], status="running", finished_at=None)]
    assert 3 in rules_broken(h)


def test_rule_3_fails_when_an_instance_completes_past_its_bound_and_faults_extend_the_bound() -> None:
    h = good_history()
    late = T0 + 60 + oracle.FAULT_ALLOWANCE_S["n8n-kill"] + 5
    h.instances = [replace(h.instances[0], finished_at=late)]
    h.checkpoints[-1] = replace(h.checkpoints[-1], created_at=late)
    h.keys[-1] = replace(h.keys[-1], updated_at=late)
    assert rules_broken(h) == {3}
    h.faults.append(FaultFact("postgres-restart", 0, "postgres", T0 + 30, T0 + 33))
    assert rules_broken(h) == set()


# Rule 4: the completed state equals the expected state.

def test_rule_4_fails_on_a_trail_other_than_expected() -> None:
    h = good_history()
    h.checkpoints.insert(1, CheckpointFact(WF, KEY, 2, "s1", T0 + 21, h.checkpoints[0].state))
    h.checkpoints[-1] = replace(h.checkpoints[-1], sequence=3)
    assert rules_broken(h) == {4}


def test_rule_4_fails_when_the_state_holds_another_answer_than_the_effective_one() -> None:
    h = good_history()
    state = {**h.checkpoints[-1].state, "s1": {"id": "payment_9", "service": "payment"}}
    h.checkpoints[-1] = replace(h.checkpoints[-1], state=state)
    assert rules_broken(h) == {4}


def test_rule_4_fails_on_the_wrong_branch() -> None:
    h = good_history()
    h.calls[2] = replace(h.calls[2], logic="account")
    assert rules_broken(h) == {4}


# Rule 5: nothing after completion, nothing completed twice.

def test_rule_5_fails_when_a_save_skips_the_keys_completion() -> None:
    h = good_history()
    h.keys[0] = replace(h.keys[0], status="in_progress")
    assert rules_broken(h) == {5}


def test_rule_5_fails_on_a_checkpoint_after_completion() -> None:
    h = good_history()
    h.checkpoints.append(CheckpointFact(WF, KEY, 3, "s2", T0 + 30, h.checkpoints[-1].state))
    assert 5 in rules_broken(h)


def test_rule_5_fails_when_an_instance_or_a_key_is_completed_twice() -> None:
    h = good_history()
    h.instances = [replace(h.instances[0], completed_events=2)]
    assert rules_broken(h) == {5}
    h = good_history()
    h.keys[1] = replace(h.keys[1], updated_at=T0 + 50)
    assert rules_broken(h) == {5}


def test_recovery_is_measured_from_the_fault_to_the_last_instance_it_caught_finishing() -> None:
    [(fault, seconds)] = oracle.recoveries(good_history())
    assert fault.kind == "n8n-kill" and seconds == 17.0


# Line items: one effective call per line, its key ["<key>","<line>"], its step saved once per line or more.

def lines_history() -> History:
    """The good history with a line-item segment first: inventory called once per line (orderId `<key>:<line>`,
    a Claim keyed by the line), step s1 saved per line; n8n killed after line sku-1 was saved, so the resumed
    instance walked its lines again and saved sku-1 (Done Before) once more."""
    h = good_history()
    line_calls = (ExpectedCall("inventory", "s1", "plain", "sku-1"), ExpectedCall("inventory", "s1", "plain", "sku-2"))
    h.expectations = [replace(h.expectations[0], trail=("s1", "s1", "s2"), rewalked=("s1",),
                              calls=(*line_calls, ExpectedCall("coupon", "s2", "card")))]
    h.calls = [CallFact("inventory", f"{KEY}:sku-1", "dk-l1", T0 + 1, 200, True, "inventory_1", "plain"),
               CallFact("inventory", f"{KEY}:sku-2", "dk-l2", T0 + 17, 200, True, "inventory_2", "plain"),
               h.calls[2]]
    start = h.checkpoints[0].state
    l1, l2 = ({**start, "s1": {"id": f"inventory_{n}", "service": "inventory"}} for n in (1, 2))
    h.checkpoints = [CheckpointFact(WF, KEY, 1, "s1", T0 + 2, l1), CheckpointFact(WF, KEY, 2, "s1", T0 + 16, l1),
                     CheckpointFact(WF, KEY, 3, "s1", T0 + 18, l2),
                     CheckpointFact(WF, KEY, 4, "s2", T0 + 22, {**l2, "s2": h.checkpoints[1].state["s2"]})]
    h.keys = [KeyFact("s1", f'["{KEY}","sku-1"]', "completed", 1, "inventory_1", T0 + 2),
              KeyFact("s1", f'["{KEY}","sku-2"]', "completed", 1, "inventory_2", T0 + 18), h.keys[1]]
    return h


def test_line_items_each_with_one_effective_call_and_a_walked_again_step_pass() -> None:
    assert oracle.check(lines_history()) == []


def test_a_line_item_performed_twice_or_never_fails_rule_2() -> None:
    h = lines_history()
    h.calls.append(CallFact("inventory", f"{KEY}:sku-2", "dk-l2", T0 + 19, 200, True, "inventory_3", "plain"))
    assert 2 in rules_broken(h)
    assert oracle.duplicate_effects(h) == [f"{KEY}:sku-2/inventory"]
    h = lines_history()
    h.calls = [c for c in h.calls if c.key != f"{KEY}:sku-2"]
    assert 2 in rules_broken(h)
    h = lines_history()
    h.calls.append(CallFact("inventory", f"{KEY}:sku-9", "dk-l9", T0 + 19, 200, True, "inventory_9", "plain"))
    assert 2 in rules_broken(h)


def test_a_line_step_saved_fewer_times_than_lines_or_another_step_repeated_fails_rule_4() -> None:
    h = lines_history()
    h.checkpoints = [c for c in h.checkpoints if c.sequence > 2]
    assert rules_broken(h) == {4}
    h = lines_history()
    h.expectations = [replace(h.expectations[0], rewalked=())]
    assert rules_broken(h) == {4}
    h = lines_history()
    h.checkpoints.insert(3, CheckpointFact(WF, KEY, 4, "s2", T0 + 21, h.checkpoints[-1].state))
    h.checkpoints[-1] = replace(h.checkpoints[-1], sequence=5)
    assert rules_broken(h) == {4}


def test_a_line_key_left_in_progress_fails_rule_5() -> None:
    h = lines_history()
    h.keys[1] = replace(h.keys[1], status="in_progress")
    assert rules_broken(h) == {5}


# Rule 6: a Durable Limit shared by a case's keys holds at the provider.

K2 = "s7c0k1"


def limited_history(kind: str) -> History:
    """Two keys of one case through payment behind a section (one at a time) or a rate (one per 2 s)."""
    h = good_history()
    limit = LimitedCall("payment", "section", 1) if kind == "section" else LimitedCall("payment", "rate", 1, 2.0)
    e1 = replace(h.expectations[0], calls=(ExpectedCall("payment", "s1", "plain"),), trail=("s1",), limits=(limit,))
    e2 = replace(e1, key=K2)
    h.expectations = [e1, e2]
    h.faults = []
    h.calls = [CallFact("payment", KEY, "dk-1", T0 + 1, 200, True, "payment_1", "plain", T0 + 3),
               CallFact("payment", K2, "dk-2", T0 + 3.1, 200, True, "payment_2", "plain", T0 + 3.2)]
    return h


def test_rule_6_passes_calls_one_at_a_time_through_a_section_and_spaced_by_a_rate() -> None:
    assert oracle.rule_6_limits_hold(limited_history("section")) == []
    assert oracle.rule_6_limits_hold(limited_history("rate")) == []


def test_rule_6_fails_when_a_section_lets_a_second_call_in_while_one_runs() -> None:
    h = limited_history("section")
    h.calls[1] = replace(h.calls[1], at=T0 + 2.0)
    assert [v.rule for v in oracle.rule_6_limits_hold(h)] == [6]
    h.calls[0] = replace(h.calls[0], end=0.0)   # still performing when collected
    h.calls[1] = replace(h.calls[1], at=T0 + 30.0)
    assert [v.rule for v in oracle.rule_6_limits_hold(h)] == [6]


def test_rule_6_allows_a_section_overlap_only_after_the_holder_died() -> None:
    h = limited_history("section")
    h.calls[1] = replace(h.calls[1], at=T0 + 2.0)
    h.faults = [FaultFact("n8n-kill", 0, "n8n main", T0 + 1.5, T0 + 10)]
    assert oracle.rule_6_limits_hold(h) == []
    h.faults = [FaultFact("redis-kill", 0, "redis", T0 + 1.5, T0 + 10)]   # no holder died
    assert [v.rule for v in oracle.rule_6_limits_hold(h)] == [6]


def test_rule_6_fails_when_a_rate_lets_calls_out_closer_than_half_its_period_without_a_fault() -> None:
    h = limited_history("rate")
    h.calls[1] = replace(h.calls[1], at=T0 + 1.4)
    assert [v.rule for v in oracle.rule_6_limits_hold(h)] == [6]
    assert 6 in rules_broken(h)
    h.faults = [FaultFact("sidecar-kill", 0, "sidecar", T0 - 3, T0 + 0.5)]  # it held both calls back
    assert oracle.rule_6_limits_hold(h) == []


def test_rule_6_lets_a_rates_burst_out_at_once_and_no_more() -> None:
    """After a lines segment a rate has a burst (an order's lines take their slots at once): up to Most Items +
    Burst − 1 calls (the documented bound over a whole period) within half its period pass, one more does not."""
    h = limited_history("rate")
    limit = LimitedCall("payment", "rate", 3, 6.0, 3)
    h.expectations = [replace(e, limits=(limit,)) for e in h.expectations]
    k3, k4 = "s7c0k2", "s7c0k3"
    h.expectations += [replace(h.expectations[0], key=k) for k in (k3, k4)]
    h.calls = [CallFact("payment", k, f"dk-{n}", T0 + 1 + n * 0.01, 200, True, f"payment_{n}", "plain", T0 + 2)
               for n, k in enumerate((KEY, K2, k3, k4))]
    h.calls.append(CallFact("payment", KEY, "dk-8", T0 + 2.4, 200, False, "payment_0", "plain", T0 + 2.6))
    assert oracle.rule_6_limits_hold(h) == []  # 5 within 3 s
    h.calls.append(CallFact("payment", K2, "dk-9", T0 + 2.5, 200, False, "payment_1", "plain", T0 + 2.6))
    assert [v.rule for v in oracle.rule_6_limits_hold(h)] == [6]


def test_a_sibling_lines_error_stamped_just_before_an_answered_call_is_its_executions_death() -> None:
    """Seen in CI (seed 819873, case 7): the lines' calls of one execution went out together; sku-1's got a 409
    (its key still being performed) stamped 1 ms before sku-2's answered replay, the execution failed on it, and
    the execution resumed after it called sku-2 again 10 s later (answered from the record). The 409 up to
    IN_FLIGHT_S before the answered call is that execution's death; one well before it is not."""
    h = lines_history()
    h.faults = []
    h.calls = [c for c in h.calls if c.provider != "inventory"] + [
        CallFact("inventory", f"{KEY}:sku-1", "dk-l1", T0 + 1, 200, True, "inventory_1", "plain"),
        CallFact("inventory", f"{KEY}:sku-2", "dk-l2", T0 + 1, 200, True, "inventory_2", "plain"),
        CallFact("inventory", f"{KEY}:sku-1", "dk-l1", T0 + 8.000, 409, False, "", "plain"),
        CallFact("inventory", f"{KEY}:sku-2", "dk-l2", T0 + 8.001, 200, False, "inventory_2", "plain"),
        CallFact("inventory", f"{KEY}:sku-2", "dk-l2", T0 + 18.3, 200, False, "inventory_2", "plain"),
        CallFact("inventory", f"{KEY}:sku-1", "dk-l1", T0 + 18.3, 200, False, "inventory_1", "plain")]
    h.faults = [FaultFact("n8n-kill", 0, "n8n main", T0 + 5, T0 + 7)]  # what made the calls of T0 + 8
    assert [v for v in oracle.rule_2_one_effective_call(h)] == []
    h.calls[-4] = replace(h.calls[-4], at=T0 + 6.0)  # the 409 two seconds before: not this execution's
    assert 2 in {v.rule for v in oracle.rule_2_one_effective_call(h)}


# Rule 7: a file saved with a step reaches the next side effect's provider whole.

DOC = SentFile("document", f"order-{KEY}.pdf", "application/pdf", "ab" * 32, 41_234)


def files_history() -> History:
    """The good history where payment's step downloaded the order's document and saved it, and the coupon call
    uploads it: n8n killed after payment's Save, the resumed instance's coupon call (the effective one, with the
    restored file) and a replay of it after another kill both carry it."""
    h = good_history()
    pay, coupon = h.expectations[0].calls
    h.expectations = [replace(h.expectations[0], calls=(pay, coupon._replace(file=DOC)))]
    h.calls[2] = replace(h.calls[2], files=(DOC,))
    h.calls.append(replace(h.calls[2], at=T0 + 21.5, effective=False, files=(DOC,)))
    h.faults.append(FaultFact("n8n-kill", 0, "n8n main", T0 + 21.2, T0 + 21.4))
    return h


def test_rule_7_passes_every_call_carrying_the_saved_document() -> None:
    assert oracle.check(files_history()) == []


def test_rule_7_fails_when_a_call_carries_no_file_or_other_bytes() -> None:
    h = files_history()
    h.calls[2] = replace(h.calls[2], files=())
    [v] = oracle.check(h)
    assert v.rule == 7 and "effective call" in v.message and "no file" in v.message
    h = files_history()
    h.calls[3] = replace(h.calls[3], files=(DOC._replace(sha256="cd" * 32),))   # the replay: other bytes
    assert rules_broken(h) == {7}
    h = files_history()
    h.calls[2] = replace(h.calls[2], files=(DOC._replace(size=DOC.size - 1),))
    assert rules_broken(h) == {7}


def test_rule_7_fails_on_another_file_name_type_field_or_a_second_file() -> None:
    for wrong in (DOC._replace(name="data.pdf"), DOC._replace(mime="application/octet-stream"),
                  DOC._replace(field="data")):
        h = files_history()
        h.calls[2] = replace(h.calls[2], files=(wrong,))
        assert rules_broken(h) == {7}, wrong
    h = files_history()
    h.calls[2] = replace(h.calls[2], files=(DOC, DOC))
    assert rules_broken(h) == {7}


def test_rule_7_fails_when_a_side_effect_without_a_document_sends_one() -> None:
    h = files_history()
    h.calls[0] = replace(h.calls[0], files=(DOC,))
    assert rules_broken(h) == {7}


def test_the_tables_files_row_counts_the_calls_that_carried_the_document() -> None:
    from chaos.report import files_row

    assert files_row(files_history()) == ("2 calls carried the order's document (1 effective), 1 of them after an "
                                          "n8n process died or an execution failed since the Save that kept it")
    assert files_row(good_history()) == "-"
