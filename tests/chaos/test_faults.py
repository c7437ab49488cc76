"""The chaos fault plan (chaos/faults.py) and the oracle's allowances for it, without a stack: each wave's n8n
mode, the kinds dealt to it, the schedule's targets, and the bound a fault adds."""

from __future__ import annotations

import pytest

from chaos import faults, oracle
from chaos.history import CallFact, Expectation, ExpectedCall, FaultFact, History


def test_both_runs_the_first_half_of_the_waves_regular_and_the_rest_queue() -> None:
    assert faults.wave_modes(4, "both") == ["regular", "regular", "queue", "queue"]
    assert faults.wave_modes(3, "both") == ["regular", "regular", "queue"]
    assert faults.wave_modes(1, "both") == ["regular"]
    assert faults.wave_modes(2, "queue") == ["queue", "queue"]
    assert faults.wave_modes(2, "regular") == ["regular", "regular"]
    with pytest.raises(ValueError):
        faults.wave_modes(2, "cluster")


def test_a_wave_is_dealt_only_kinds_that_fit_its_mode() -> None:
    for seed in range(30):
        modes = faults.wave_modes(8, "both")
        for mode, kinds in zip(modes, faults.kinds_for_waves(seed, 8, 3, modes=modes), strict=True):
            assert len(kinds) == 3
            assert set(kinds) <= set(faults.kinds_fitting(mode)), (seed, mode, kinds)
    assert "n8n-kill" not in faults.kinds_fitting("queue")
    assert {"main-kill", "worker-kill", "worker-freeze"}.isdisjoint(faults.kinds_fitting("regular"))
    assert set(faults.kinds_fitting("queue")) >= set(faults.SHARED_KINDS)


def test_each_mode_s_waves_use_every_kind_that_fits_it_in_turn() -> None:
    """Round-robin per mode: every len(kinds) faults of a mode's waves use each of its kinds once."""
    modes = faults.wave_modes(4, "both")
    deck = faults.kinds_for_waves(41, 4, 3, modes=modes)
    assert sorted(deck[0] + deck[1][:1]) == sorted(faults.kinds_fitting("regular"))
    assert sorted(deck[2] + deck[3]) == sorted(faults.kinds_fitting("queue"))


def test_a_regular_run_deals_as_before_queue_mode_and_a_case_s_wave_keeps_its_kinds() -> None:
    regular = faults.kinds_for_waves(685321, 4, 3, faults.kinds_fitting("regular"))
    assert faults.kinds_for_waves(685321, 4, 3, modes=["regular"] * 4) == regular
    # `--case` computes fewer waves: the waves it runs get the same kinds as in the whole run.
    modes = faults.wave_modes(6, "both")
    assert faults.kinds_for_waves(7, 5, 3, modes=modes[:5]) == faults.kinds_for_waves(7, 6, 3, modes=modes)[:5]


def test_on_patroni_the_postgres_restart_gives_way_to_a_switchover_and_a_primary_kill() -> None:
    for mode in faults.MODES:
        fitting = set(faults.kinds_fitting(mode, database="patroni"))
        assert "postgres-restart" not in fitting
        assert {"patroni-switchover", "patroni-primary-kill"} <= fitting
        assert not {"patroni-switchover", "patroni-primary-kill"} & set(faults.kinds_fitting(mode))
    modes = faults.wave_modes(6, "both")
    for mode, kinds in zip(modes, faults.kinds_for_waves(9, 6, 3, modes=modes, database="patroni"), strict=True):
        assert set(kinds) <= set(faults.kinds_fitting(mode, database="patroni"))
    for f in faults.schedule(9, 0, ["patroni-switchover", "patroni-primary-kill"]):
        assert f.down_s <= 3.0 and f.target in ("to the synchronous standby", "primary")


def test_a_kind_filter_leaves_a_mode_with_no_kind_faultless() -> None:
    assert faults.kinds_for_waves(1, 2, 3, ("n8n-kill",), modes=["regular", "queue"]) == [["n8n-kill"] * 3, []]


def test_worker_faults_aim_at_one_of_the_two_workers_and_a_freeze_outlasts_the_session_grace() -> None:
    seen = set()
    for wave in range(40):
        for f in faults.schedule(5, wave, ["worker-kill", "worker-freeze", "main-kill"]):
            if f.kind == "main-kill":
                assert f.target in ("in-call", "any time") and f.down_s == 0
                continue
            assert f.target.split(" ")[0] in ("w0", "w1")
            seen.add((f.kind, f.target))
            if f.kind == "worker-freeze":
                assert oracle.SESSION_GRACE_S < faults.FREEZE_S[0] <= f.down_s <= faults.FREEZE_S[1]
                assert f.down_s <= oracle.FREEZE_MAX_S
    assert {t for k, t in seen if k == "worker-kill"} == {"w0", "w1", "w0 in-call", "w1 in-call"}


def _expectation(wave: int = 0) -> Expectation:
    return Expectation(0, wave, "wf", "k1", ("s1",), (ExpectedCall("payment", "pay", "plain"),), False, False, 20.0)


def test_every_fault_kind_has_an_allowance_and_a_freeze_allows_its_longest_stop_the_grace_and_a_resume() -> None:
    assert set(oracle.FAULT_ALLOWANCE_S) == set(faults.KINDS)
    freeze = oracle.FAULT_ALLOWANCE_S["worker-freeze"]
    assert freeze >= faults.FREEZE_S[1] + oracle.SESSION_GRACE_S + oracle.RESUME_S
    h = History(faults=[FaultFact("worker-freeze", 0, "worker 1", 0, 0), FaultFact("main-kill", 0, "main", 0, 0),
                        FaultFact("worker-kill", 1, "worker 0", 0, 0)])
    assert oracle.bound_s(h, _expectation(0), None) == 20.0 + freeze + oracle.FAULT_ALLOWANCE_S["main-kill"]
    assert oracle.bound_s(h, _expectation(1), None) == 20.0 + oracle.FAULT_ALLOWANCE_S["worker-kill"]
    # A killed Patroni primary: its leader key's TTL, then a resume.
    from tests.faults.patroni import TTL_SECONDS
    assert oracle.FAULT_ALLOWANCE_S["patroni-primary-kill"] >= TTL_SECONDS + oracle.RESUME_S


def test_a_repeated_call_after_a_worker_kill_or_freeze_is_allowed_but_not_after_a_main_kill() -> None:
    from chaos.history import CallFact, InstanceFact

    def history(kind: str) -> History:
        return History(
            expectations=[_expectation()],
            calls=[CallFact("payment", "k1", "idem-1", 10.0, 200, True, "r1", "plain"),
                   CallFact("payment", "k1", "idem-1", 30.0, 200, False, "r1", "plain")],
            instances=[InstanceFact("wf", "k1", "completed", False, 5.0, 40.0, 1, 1, 0, False)],
            faults=[FaultFact(kind, 0, "x", 15.0, 16.0)])

    for kind in ("worker-kill", "worker-freeze", "n8n-kill"):
        assert oracle.rule_2_one_effective_call(history(kind)) == [], kind
    [v] = oracle.rule_2_one_effective_call(history("main-kill"))
    assert "no holder died" in v.message


def _repeat_flagged(faults_: list[FaultFact], answered_at: float, again_at: float) -> bool:
    """Whether rule 2 flags a key's call answered at `answered_at` and made again (same key) at `again_at`."""
    calls = [CallFact("payment", "k1", "key-1", answered_at, 200, True, "pay_1", "plain"),
             CallFact("payment", "k1", "key-1", again_at, 200, False, "pay_1", "plain")]
    h = History(expectations=[_expectation(wave=0)], faults=faults_, calls=calls)
    return any("called again" in v.message for v in oracle.rule_2_one_effective_call(h))


def test_a_frozen_worker_woken_after_its_instance_resumed_may_repeat_its_call_once_with_the_same_key() -> None:
    """CI, seed 776672: a worker frozen 7.9 s inside n8n's Retry On Fail wait; its instance resumed elsewhere and
    the call succeeded; woken, the worker finished the retry (same key, answered from the provider's record)
    before its next sidecar call was refused. Its freeze began before the answered call: still its death."""
    freeze = FaultFact("worker-freeze", 0, "worker 1 frozen 7.9 s", 202.3, 210.2)
    assert not _repeat_flagged([freeze], 207.9, 210.3)
    # Without the freeze (or with one that ended before the answered call) the repeat is a violation.
    for faults_ in ([], [FaultFact("worker-freeze", 0, "worker 1 frozen 2 s", 190.0, 192.0)]):
        assert _repeat_flagged(faults_, 207.9, 210.3)


def test_a_call_the_provider_records_just_after_the_kill_of_its_sender_counts_as_the_dead_holders() -> None:
    """CI, seed 819552 case 6: a worker killed as its three line-item calls went out; the provider stamped the
    answered one a few milliseconds after the kill, and the resumed execution called that line again (same key,
    answered from the record) 7.8 s later. The kill came before the answered call's stamp, but within
    IN_FLIGHT_S: still its holder's death."""
    kill = FaultFact("worker-kill", 0, "worker 0 (3 calls in flight)", 100.0, 100.1)
    assert not _repeat_flagged([kill], 100.004, 107.8)
    # A kill well before the answered call is not its sender's death: the repeat is a violation.
    early = FaultFact("worker-kill", 0, "worker 0", 100.004 - oracle.IN_FLIGHT_S - 0.5, 99.0)
    assert _repeat_flagged([early], 100.004, 107.8)


def test_a_call_a_frozen_worker_sends_as_it_wakes_counts_as_the_dead_holders() -> None:
    """Long run, seed 20261205 case 119: a worker frozen 7.9 s after its Claim was granted; its session ended and
    the instance resumed elsewhere. Woken, the worker sent the shipping call it was about to make 0.15 s later
    (answered), and the resumed execution, holding the freed key, called again with the same key 3 s after."""
    freeze = FaultFact("worker-freeze", 0, "worker 1 frozen 7.9 s", 53.4, 61.3)
    assert not _repeat_flagged([freeze], 61.45, 64.45)
    # A freeze that ended well before the answered call is no excuse for the repeat.
    old = FaultFact("worker-freeze", 0, "worker 1 frozen 6 s", 50.0 - oracle.WOKEN_S - 6, 61.45 - oracle.WOKEN_S - 0.5)
    assert _repeat_flagged([old], 61.45, 64.45)


def test_a_failure_prints_the_keys_calls_then_its_waves_faults_each_in_time_order() -> None:
    from chaos import report

    calls = [CallFact("payment", "k1", "key-1", 20.5, 200, False, "pay_1", "plain"),
             CallFact("payment", "k1:sku-1", "key-2", 10.25, 500, False, "", "plain"),
             CallFact("payment", "k2", "key-3", 15.0, 200, True, "pay_2", "plain")]
    faults_ = [FaultFact("redis-kill", 0, "redis", 12.0, 13.0), FaultFact("n8n-kill", 1, "n8n main", 11.0, 12.0)]
    lines = report.evidence(History(expectations=[_expectation(wave=0)], faults=faults_, calls=calls), "k1")
    # Each line: its time to the millisecond, then what happened; the other key and the other wave are left out.
    assert [line.split(maxsplit=1)[1] for line in lines] == [
        "call payment k1:sku-1: 500", "call payment k1: 200", f"fault redis-kill on redis, back at {lines[2].split()[-1]}"]
    assert all(len(line.split()[0]) == len("00:00:00.000") for line in lines)
