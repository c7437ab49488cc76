"""The oracle of issue 41: seven rules, each a pure function of a History, each returning its violations.

1. Every acknowledged delivery's instance completes; a suspension only where the schedule could exhaust the
   retry policy, and then `durable-sidecar instances retry` finishes it.
2. Each side effect has exactly one effective call per key; a repeated call only with the same
   Idempotency-Key, and only after its holder died (n8n or a worker killed, a worker frozen past the session
   grace, or its execution failed on an error answer).
3. No instance stays unfinished past a bound derived from its schedule and the faults of its wave.
4. Each completed instance's trail and final state equal the generator's expectation.
5. No checkpoint after its instance completed; no instance or key completed twice.
6. A side effect behind a Durable Limit its case's keys share stays within it at the provider: no more calls in
   flight at once than a section's places, unless a holder died meanwhile (its place is freed while the call it
   sent may still run); no more calls started within half a rate's period than its items (plus its burst less
   one), unless a fault of the wave came between (a sidecar or database outage holds calls back and lets them go together).
7. A side effect that sends the order's document (downloaded and saved with the step before it, restored on a
   resume) carries it in every call that reaches its provider: the same bytes (SHA-256 and size), file name and
   MIME type, in its form field; any other side effect's calls carry no file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby, pairwise

from chaos.history import CallFact, Expectation, FaultFact, History, InstanceFact, belongs_to

RULES = {
    1: "every acknowledged delivery's instance completes",
    2: "exactly one effective call per side effect and key",
    3: "no instance unfinished past its bound",
    4: "completed state equals the expected state",
    5: "nothing after completion, nothing completed twice",
    6: "a Durable Limit shared by a case's keys holds at the provider",
    7: "a file saved with a step reaches the next side effect's provider whole",
}

# The sidecar's session grace (DURABLE_SESSION_GRACE_SECONDS, its default): a silent n8n process's instances
# are freed this long after its last heartbeat.
SESSION_GRACE_S = 5.0
# A frozen worker's longest freeze (chaos.faults.FREEZE_S), and what a resume on the other worker then takes
# (the Resume Trigger on the main, the queue, the execution up to the call it was in).
FREEZE_MAX_S = 10.0
RESUME_S = 30.0
# The Patroni cluster's leader key TTL (tests/faults/patroni.py TTL_SECONDS) plus its loop and a retry.
PATRONI_TTL_S = 15.0
# Seconds a fault may add to an instance's time to complete (the part's restart plus a resume). A killed
# n8n process (regular n8n, the queue-mode main, a worker) is started again at once and its instances resume;
# a frozen worker's instances resume elsewhere once the grace has passed, whatever its freeze lasts beyond it.
FAULT_ALLOWANCE_S = {"n8n-kill": 75.0, "main-kill": 75.0, "worker-kill": 75.0,
                     "worker-freeze": FREEZE_MAX_S + SESSION_GRACE_S + RESUME_S,
                     "sidecar-kill": 20.0, "postgres-restart": 30.0, "redis-kill": 10.0,
                     # Patroni: a switchover is a planned few seconds without a primary; a killed primary's
                     # leader key lives TTL_SECONDS (10 s) before a standby is promoted, then a resume.
                     "patroni-switchover": 30.0, "patroni-primary-kill": PATRONI_TTL_S + RESUME_S}
# Faults after which an execution holding a key is gone (killed, or fenced by the end of its session), so its
# key's call may be made again and a retry policy's resume may have been spent on it. (A queue-mode main runs
# no execution: its kill ends none.)
HOLDER_DEATHS = ("n8n-kill", "worker-kill", "worker-freeze")
# How long before a provider records a call the process that sent it may already have been killed (the request
# was on the wire; the provider's handler thread stamps it when it runs, on a loaded two-core machine).
IN_FLIGHT_S = 1.0
# How soon after it wakes a frozen process may still send the provider call it was about to make (its Claim was
# granted before the freeze; no sidecar call comes between), or the next try of n8n's Retry On Fail (1 s apart),
# before its next sidecar call is refused.
WOKEN_S = 2.0
# An operator's retry of a suspended instance (chaos runs it as soon as it sees the suspension).
OPERATOR_RETRY_S = 40.0


@dataclass(frozen=True)
class Violation:
    rule: int
    key: str
    message: str

    def __str__(self) -> str:
        return f"rule {self.rule} ({RULES[self.rule]}): {self.key}: {self.message}"


def _wave_faults(h: History, wave: int) -> list[FaultFact]:
    return [f for f in h.faults if f.wave == wave]


def _first_sent(h: History, key: str) -> float | None:
    sent = [d.sent_at for d in h.deliveries_of(key) if d.when != "after-completion"]
    return min(sent) if sent else None


def _acknowledged(h: History, key: str) -> bool:
    return any(d.acknowledged for d in h.deliveries_of(key))


def _completed(inst: InstanceFact | None) -> bool:
    return inst is not None and inst.status == "completed"


def _effective(h: History, provider: str, key: str) -> list[CallFact]:
    return [c for c in h.calls_of(provider, key) if c.effective]


def rule_1_acknowledged_completes(h: History) -> list[Violation]:
    out = []
    for e in h.expectations:
        for d in h.deliveries_of(e.key):
            if not d.acknowledged:
                out.append(Violation(1, e.key, f"delivery {d.copy} ({d.when}) never acknowledged: last answer "
                                               f"{d.status or 'none'} after {d.attempts} attempts"))
        if not _acknowledged(h, e.key):
            continue
        inst = h.instance(e.workflow_id, e.key)
        if inst is None:
            out.append(Violation(1, e.key, "acknowledged, but no instance exists (lost)"))
            continue
        killed = any(f.kind in HOLDER_DEATHS for f in _wave_faults(h, e.wave))
        if inst.was_suspended and not (e.suspension_allowed or (e.retry_policy and killed)):
            out.append(Violation(1, e.key, "suspended, but its schedule could not exhaust the retry policy"))
        if not _completed(inst):
            how = " (suspended)" if inst.suspended else ""
            retried = f" after {inst.operator_retries} operator retries" if inst.operator_retries else ""
            out.append(Violation(1, e.key, f"acknowledged, but its instance is {inst.status}{how}{retried}"))
    return out


def _holder_died_between(h: History, e: Expectation, t0: float, t1: float) -> bool:
    """An n8n process killed (HOLDER_DEATHS) between t0 and t1, or frozen past the grace at any time from t0 to t1
    (a freeze that began before t0 counts: the process it stopped was declared dead meanwhile, and once woken it
    may finish a provider call n8n was retrying, with the same key, before its next call to the sidecar is
    refused; and one that ended up to WOKEN_S before t0: the woken process sent the answered call, and the
    execution resumed meanwhile called again), or an error answer to one of the key's calls (a 500, or a 409 for a key still being performed: its
    execution failed there), between t0 and t1, or up to IN_FLIGHT_S before t0 (a sibling line item's call of the
    same execution). A kill up to IN_FLIGHT_S before t0 counts too: a kill aimed at a
    call in flight can land as the process sends its next one, which the provider records a moment later."""
    for f in _wave_faults(h, e.wave):
        if f.kind in HOLDER_DEATHS and t0 - IN_FLIGHT_S <= f.at <= t1:
            return True
        if f.kind == "worker-freeze" and f.at <= t1 and t0 <= f.back_at + WOKEN_S:
            return True
    # An error answer ends its execution; one up to IN_FLIGHT_S before t0 counts as well: the calls of one
    # execution go out together (an order's line items), and a sibling's error can be stamped a moment before
    # the answered call it ends the execution of.
    return any(belongs_to(c.key, e.key) and c.status >= 400 and t0 - IN_FLIGHT_S <= c.at <= t1 for c in h.calls)


def rule_2_one_effective_call(h: History) -> list[Violation]:
    out = []
    for e in h.expectations:
        inst = h.instance(e.workflow_id, e.key)
        effects = {(x.provider, x.order(e.key)) for x in e.calls}
        for x in e.calls:
            calls = h.calls_of(x.provider, x.order(e.key))
            provider = f"{x.provider} (line {x.line})" if x.line else x.provider
            effective = [c for c in calls if c.effective]
            if len(effective) > 1 or (not effective and _completed(inst)):
                out.append(Violation(2, e.key, f"{provider}: {len(effective)} effective calls, must be exactly 1 "
                                               f"(of {len(calls)} calls)"))
            keys = {c.idempotency_key for c in calls}
            if "" in keys or len(keys) > 1:
                out.append(Violation(2, e.key, f"{provider}: its calls carried the Idempotency-Keys {sorted(keys)}, "
                                               "must be one and the same"))
            answered = [c for c in calls if c.status == 200]
            for prev, again in pairwise(answered):
                if not _holder_died_between(h, e, prev.at, again.at):
                    out.append(Violation(2, e.key, f"{provider}: called again {again.at - prev.at:.1f} s after an "
                                                   "answered call, and no holder died in between"))
        for c in h.calls:
            if belongs_to(c.key, e.key) and (c.provider, c.key) not in effects:
                out.append(Violation(2, e.key, f"{c.provider}: called for {c.key}, but the workflow has no such "
                                               "side effect"))
    return out


def bound_s(h: History, e: Expectation, inst: InstanceFact | None) -> float:
    """The key's time to complete: its own (schedule) plus what each fault of its wave and an operator retry add."""
    extra = sum(FAULT_ALLOWANCE_S.get(f.kind, 60.0) for f in _wave_faults(h, e.wave))
    if inst is not None and inst.operator_retries:
        extra += OPERATOR_RETRY_S
    return e.base_bound_s + extra


def rule_3_nothing_stuck(h: History) -> list[Violation]:
    out = []
    for e in h.expectations:
        start = _first_sent(h, e.key)
        if start is None or not _acknowledged(h, e.key):
            continue
        inst = h.instance(e.workflow_id, e.key)
        bound = bound_s(h, e, inst)
        if inst is None or inst.finished_at is None:
            out.append(Violation(3, e.key, f"unfinished {h.collected_at - start:.0f} s after its first delivery "
                                           f"(bound {bound:.0f} s)"))
        elif inst.finished_at - start > bound:
            out.append(Violation(3, e.key, f"completed {inst.finished_at - start:.0f} s after its first delivery, "
                                           f"past its bound of {bound:.0f} s"))
    return out


def trail_matches(steps: tuple[str, ...], e: Expectation) -> bool:
    """The trail is the expected one, where a step saved per line item may run longer (its lines walked again)."""
    got = [(s, len(list(g))) for s, g in groupby(steps)]
    want = [(s, len(list(g))) for s, g in groupby(e.trail)]
    return [s for s, _ in got] == [s for s, _ in want] and all(
        n == m or (s in e.rewalked and n > m) for (s, n), (_, m) in zip(got, want, strict=True))


def rule_4_expected_state(h: History) -> list[Violation]:
    """(Answers are compared where the provider performed once: a duplicate is rule 2's.)"""
    out = []
    for e in h.expectations:
        inst = h.instance(e.workflow_id, e.key)
        if not _completed(inst):
            continue
        trail = h.trail(e.workflow_id, e.key)
        steps = tuple(c.step for c in trail)
        if not trail_matches(steps, e):
            out.append(Violation(4, e.key, f"trail {list(steps)}, expected {list(e.trail)}"))
        final = trail[-1].state if trail else {}
        body = final.get("body")
        if not isinstance(body, dict) or body.get("orderId") != e.key:
            out.append(Violation(4, e.key, f"final state's body.orderId is {body.get('orderId') if isinstance(body, dict) else None!r}"))
        # A step saved per line item keeps the last line's answer (the lines are saved in their order).
        last_of_scope = {x.scope: x for x in e.calls}
        for x in e.calls:
            provider, scope, logic = x.provider, x.scope, x.logic
            saved = final.get(scope)
            effective = _effective(h, provider, x.order(e.key))
            if not isinstance(saved, dict) or saved.get("service") != provider:
                out.append(Violation(4, e.key, f"final state's {scope} is {saved!r}, expected {provider}'s answer"))
            elif len(effective) == 1 and x is last_of_scope[scope] and saved.get("id") != effective[0].reply_id:
                out.append(Violation(4, e.key, f"final state's {scope} holds answer {saved.get('id')}, but {provider}'s "
                                               f"effective call answered {effective[0].reply_id}"))
            if effective and effective[0].logic != logic:
                out.append(Violation(4, e.key, f"{provider} was called on branch {effective[0].logic!r}, expected {logic!r}"))
    return out


def rule_5_nothing_after_completion(h: History) -> list[Violation]:
    out = []
    for e in h.expectations:
        inst = h.instance(e.workflow_id, e.key)
        if inst is None:
            continue
        if inst.completed_events > 1:
            out.append(Violation(5, e.key, f"completed {inst.completed_events} times (audit trail)"))
        if inst.finished_at is None or not _completed(inst):
            continue
        late = [c for c in h.trail(e.workflow_id, e.key) if c.created_at > inst.finished_at]
        if late:
            out.append(Violation(5, e.key, f"checkpoints after completion: {[(c.sequence, c.step) for c in late]}"))
        for x in e.calls:
            scope = f"{x.scope} (line {x.line})" if x.line else x.scope
            row = h.key_row(x.scope, x.guard_key(e.key))
            effective = _effective(h, x.provider, x.order(e.key))
            if row is None:
                out.append(Violation(5, e.key, f"key {scope} missing although its instance completed"))
            elif row.status != "completed":
                out.append(Violation(5, e.key, f"key {scope} is {row.status} although its instance completed"))
            elif row.updated_at > inst.finished_at:
                out.append(Violation(5, e.key, f"key {scope} completed {row.updated_at - inst.finished_at:.2f} s after "
                                               "its instance (completed again)"))
            elif len(effective) == 1 and row.result_id != effective[0].reply_id:
                out.append(Violation(5, e.key, f"key {scope} holds result {row.result_id}, not the effective answer "
                                               f"{effective[0].reply_id} (completed by another attempt)"))
    return out


def _fault_near(h: History, wave: int, t0: float, t1: float) -> bool:
    """A fault of the wave from IN_FLIGHT_S before t0 until t1, or one whose part came back up to WOKEN_S before
    t0 (calls it held back go out together once it is back)."""
    return any(f.at - IN_FLIGHT_S <= t1 and t0 <= f.back_at + WOKEN_S for f in _wave_faults(h, wave))


def rule_6_limits_hold(h: History) -> list[Violation]:
    out = []
    groups: dict[tuple[int, int], list[Expectation]] = {}
    for e in h.expectations:
        if e.limits:
            groups.setdefault((e.case, e.wave), []).append(e)
    for group in groups.values():
        owner = {e.key: e for e in group}
        for limit in group[0].limits:
            calls = sorted((c for c in h.calls if c.provider == limit.provider and c.key in owner),
                           key=lambda c: c.at)
            if limit.kind == "section":
                for i, c in enumerate(calls):
                    running = [p for p in calls[:i] if (p.end or h.collected_at) > c.at
                               and not _holder_died_between(h, owner[p.key], p.at, c.at)]
                    if len(running) >= limit.most:
                        out.append(Violation(6, c.key, f"{limit.provider}: called while {len(running)} call(s) of the "
                                                       f"section ({', '.join(p.key for p in running)}) still ran, "
                                                       f"{limit.most} at once allowed, and no holder died"))
                continue
            window = limit.period_s / 2
            most = limit.most + limit.burst - 1  # a burst's calls at once, then spaced
            for first, last in zip(calls, calls[most:], strict=False):
                if last.at - first.at < window and not _fault_near(h, owner[first.key].wave, first.at, last.at):
                    out.append(Violation(6, last.key, f"{limit.provider}: {most + 1} calls within "
                                                      f"{last.at - first.at:.2f} s ({first.key} first), at most "
                                                      f"{limit.most} per {limit.period_s:g} s allowed"
                                                      + (f", {limit.burst} at once" if limit.burst > 1 else "")))
    return out


def rule_7_files_arrive_whole(h: History) -> list[Violation]:
    """Every call of a side effect, effective or not (a replay, a retry, a refused call all carry the item's
    files as the execution had them), is checked; one without a call is rule 2's."""
    out = []
    for e in h.expectations:
        for x in e.calls:
            provider = f"{x.provider} (line {x.line})" if x.line else x.provider
            for c in h.calls_of(x.provider, x.order(e.key)):
                want = (x.file,) if x.file else ()
                if c.files == want:
                    continue
                which = "effective call" if c.effective else f"call answered {c.status or 'nothing yet'}"
                got = ", ".join(f"{f.field}={f.name} ({f.mime}, {f.size} bytes, sha256 {f.sha256[:12]})"
                                for f in c.files) or "no file"
                expected = (f"{x.file.field}={x.file.name} ({x.file.mime}, {x.file.size} bytes, sha256 "
                            f"{x.file.sha256[:12]})") if x.file else "no file"
                out.append(Violation(7, e.key, f"{provider}: its {which} at {c.at:.3f} carried {got}, expected "
                                               f"{expected}"))
    return out


RULE_CHECKS: tuple[Callable[[History], list[Violation]], ...] = (
    rule_1_acknowledged_completes, rule_2_one_effective_call, rule_3_nothing_stuck, rule_4_expected_state,
    rule_5_nothing_after_completion, rule_6_limits_hold, rule_7_files_arrive_whole)


def check(h: History) -> list[Violation]:
    """Every rule's violations, rule by rule."""
    return [v for rule in RULE_CHECKS for v in rule(h)]


# --- the figures of the run's table (pure as well) -------------------------------------------------------


def lost(h: History) -> list[str]:
    """Acknowledged keys whose instance did not complete."""
    return [e.key for e in h.expectations
            if _acknowledged(h, e.key) and not _completed(h.instance(e.workflow_id, e.key))]


def duplicate_effects(h: History) -> list[str]:
    """(key, provider) pairs the provider performed more than once."""
    return [f"{x.order(e.key)}/{x.provider}" for e in h.expectations for x in e.calls
            if len(_effective(h, x.provider, x.order(e.key))) > 1]


def recoveries(h: History) -> list[tuple[FaultFact, float]]:
    """For each fault: seconds until every instance of its wave that was unfinished at the fault had finished
    (0 when none was; None-finished instances count up to now as infinite and are left to rule 3)."""
    out = []
    for f in h.faults:
        waiting = []
        for e in h.expectations:
            if e.wave != f.wave:
                continue
            inst = h.instance(e.workflow_id, e.key)
            start = _first_sent(h, e.key)
            if inst is None or inst.finished_at is None or start is None:
                continue
            if start <= f.at < inst.finished_at:
                waiting.append(inst.finished_at - f.at)
        out.append((f, max(waiting, default=0.0)))
    return out
