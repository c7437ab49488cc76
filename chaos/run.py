"""One wave of cases against the running stack: publish, schedule the providers, deliver while the faults land,
retry what the schedule suspended, wait, and collect the facts the oracle reads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from harness import NAMESPACE, TOKEN, http

from chaos import oracle
from chaos.blocks import signal_body, signal_request
from chaos.faults import Injector, PlannedFault
from chaos.generator import delivery_body
from chaos.history import (
    CheckpointFact,
    DeliveryFact,
    Expectation,
    FaultFact,
    History,
    InstanceFact,
    KeyFact,
)
from chaos.model import Case
from chaos.stack import ChaosStack, decode

# A sender re-posts a delivery every second until n8n answers 2xx (or 4xx: it can never succeed), up to this.
GIVE_UP_S = 300.0
# The longest a sender waits for one answer (With When Last Node Finishes it waits for the whole order).
ANSWER_TIMEOUT_S = 150.0
# An operator retries a suspended instance as soon as it sees it (the provider's failures are over by then).
MAX_OPERATOR_RETRIES = 3


@dataclass
class WaveRecord:
    deliveries: list[DeliveryFact] = field(default_factory=list)
    suspended_seen: set[str] = field(default_factory=set)
    operator_retries: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def expectations(case: Case, wave: int) -> list[Expectation]:
    return [Expectation(case.index, wave, e.workflow_id, e.key, e.trail, e.calls, e.suspension_allowed,
                        e.retry_policy, e.base_bound_s, e.rewalked, e.limits) for e in case.expected.values()]


def _send(url: str, body: dict[str, object]) -> tuple[int, int]:
    """Posts until a 2xx, or a 4xx other than 404 (it can never succeed); the last status and the number of
    attempts. No answer, a 404 (n8n starting: the webhook is not registered yet) and a 5xx are retried."""
    deadline, attempts, status = time.monotonic() + GIVE_UP_S, 0, 0
    while time.monotonic() < deadline:
        status, _ = http("POST", url, body, timeout=ANSWER_TIMEOUT_S)
        attempts += 1
        if 200 <= status < 300 or (400 <= status < 500 and status != 404):
            break
        time.sleep(1)
    return status, attempts


def _signal_http(stack: ChaosStack, request: dict[str, object]) -> tuple[int, int]:
    """SignalInstance through the sidecars' HTTP/JSON face, one sidecar then the other, until a 200 or an answer
    other than 404 (the instance does not exist yet) and 5xx; the last status and the number of attempts."""
    deadline, attempts, status = time.monotonic() + GIVE_UP_S, 0, 0
    while time.monotonic() < deadline:
        sidecar = stack.sidecars[attempts % len(stack.sidecars)]
        status, _ = http("POST", f"{sidecar.http_url}/durable.v1.EventService/SignalInstance", request,
                         headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        attempts += 1
        if status == 200 or (400 <= status < 500 and status != 404):
            break
        time.sleep(1)
    return status, attempts


def _statuses(stack: ChaosStack, keys: list[str]) -> dict[str, tuple[str, bool]]:
    """Each key's instance status and whether it is suspended (keys without an instance are left out)."""
    with stack.db() as conn:
        rows = conn.execute("SELECT instance_key, status, suspended_at IS NOT NULL FROM durable_instances "
                            "WHERE namespace = %s AND instance_key = ANY(%s)", (NAMESPACE, keys)).fetchall()
    return {str(k): (str(status), bool(suspended)) for k, status, suspended in rows}


def run_wave(stack: ChaosStack, cases: list[Case], wave: int, plan: list[PlannedFault],
             log: Callable[[str], None]) -> tuple[WaveRecord, list[FaultFact]]:
    stack.publish(cases)
    for case in cases:
        stack.providers.apply(case.schedules)
    record = WaveRecord()
    completed: dict[str, threading.Event] = {k: threading.Event() for c in cases for k in c.keys}
    given_up = threading.Event()
    t0 = time.time()

    def deliver(case: Case, key: str, copy: int, when: str, offset_s: float) -> None:
        if when == "after-completion":
            while not completed[key].wait(timeout=0.5):
                if given_up.is_set():
                    return  # never completed: rules 1 and 3 say so; no late delivery to make
        else:
            time.sleep(max(0.0, t0 + offset_s - time.time()))
        sent = time.time()
        status, attempts = _send(stack.webhook_url(case), delivery_body(case, key))
        with record.lock:
            record.deliveries.append(DeliveryFact(case.index, wave, key, copy, when, sent, time.time(), status, attempts))

    def signal(case: Case, key: str, offset_s: float) -> None:
        """The carrier's "delivered" for the key, to the case's carrier workflow, re-posted until a 2xx (before
        the instance exists the Signal fails and n8n answers 500)."""
        time.sleep(max(0.0, t0 + offset_s - time.time()))
        if case.shape.signal_via == "http":
            status, attempts = _signal_http(stack, signal_request(case, key))
        else:
            status, attempts = _send(f"{stack.webhook_url(case)}-signal", signal_body(key))
        if not 200 <= status < 300:
            log(f"  {key}: signal never acknowledged (last answer {status} after {attempts} attempts)")

    threads = [threading.Thread(target=deliver, args=(c, d.key, d.copy, d.when, d.offset_s), daemon=True)
               for c in cases for d in c.deliveries]
    threads += [threading.Thread(target=signal, args=(c, d.key, d.offset_s + c.signal_after_s[d.key]), daemon=True)
                for c in cases for d in c.deliveries if d.when == "first" and d.key in c.signal_after_s]
    injector = Injector(stack, wave, plan, log)
    for t in threads:
        t.start()
    injector.start(t0)

    expected = [e for c in cases for e in expectations(c, wave)]
    planned = [FaultFact(f.kind, wave, f.target, 0, 0) for f in plan]
    deadline = t0 + max(oracle.bound_s(_with_faults(planned), e, None) for e in expected) + oracle.OPERATOR_RETRY_S
    workflow_of = {e.key: e.workflow_id for e in expected}
    pending = set(workflow_of)
    while pending and time.time() < deadline:
        time.sleep(1)
        try:
            statuses = _statuses(stack, sorted(pending))
        except psycopg.Error:
            continue  # PostgreSQL restarting under a fault: ask again next second
        for key, (status, suspended) in statuses.items():
            if status == "completed":
                pending.discard(key)
                completed[key].set()
            elif suspended and record.operator_retries.get(key, 0) < MAX_OPERATOR_RETRIES:
                record.suspended_seen.add(key)
                log(f"  {key} suspended: `durable-sidecar instances retry`")
                stack.operator_retry(workflow_of[key], key)
                record.operator_retries[key] = record.operator_retries.get(key, 0) + 1
    given_up.set()
    injector.join(timeout=max(60.0, deadline - time.time() + 60))
    for t in threads:
        t.join(timeout=max(1.0, deadline - time.time()) + GIVE_UP_S)
    if pending:
        log(f"  wave {wave}: {len(pending)} instances unfinished at the deadline: {sorted(pending)}")
        for line in trails(stack, sorted(pending)):
            log(line)
    return record, injector.facts


def trails(stack: ChaosStack, keys: list[str]) -> list[str]:
    """Each unfinished instance's lease and audit trail (what a shrink or a replay is read against)."""
    out = []
    try:
        with stack.db() as conn:
            for key, status, owner, expires, wake_at, wake, attempt, resumes in conn.execute(
                    """SELECT instance_key, status, lease_owner, lease_expires_at, wake_at, wake_reason, attempt,
                              resume_count
                       FROM durable_instances WHERE namespace = %s AND instance_key = ANY(%s)
                       ORDER BY instance_key""", (NAMESPACE, keys)):
                out.append(f"    {key}: {status}, lease {owner or '-'} until {expires}, wake {wake_at} "
                           f"({wake or '-'}), attempt {attempt}, resumes {resumes}")
                for at, kind, actor, detail in conn.execute(
                        """SELECT created_at, kind, actor, detail FROM durable_instance_events
                           WHERE namespace = %s AND instance_key = %s ORDER BY id""", (NAMESPACE, key)):
                    out.append(f"      {at:%H:%M:%S.%f} {kind} by {actor}: {detail}")
    except psycopg.Error as e:
        out.append(f"    (no trail: {e})")
    return out


def _with_faults(faults: list[FaultFact]) -> History:
    return History(faults=faults)


def collect(stack: ChaosStack, cases: list[Case], wave: int, record: WaveRecord, faults: list[FaultFact],
            history: History) -> None:
    """Adds the wave's facts to `history`: the generator's expectations, the deliveries and faults as made, the
    providers' calls, and the sidecars' instances, checkpoints and keys."""
    keys = [k for c in cases for k in c.keys]
    wave_expectations = [e for c in cases for e in expectations(c, wave)]
    # A line item's call names `<key>:<sku>`, and its Guard key is `["<key>","<sku>"]`.
    orders = {x.order(e.key) for e in wave_expectations for x in e.calls} | set(keys)
    guard_keys = sorted({x.guard_key(e.key) for e in wave_expectations for x in e.calls} | set(keys))
    history.expectations += wave_expectations
    history.deliveries += record.deliveries
    history.faults += faults
    history.calls += stack.providers.facts(orders)
    history.collected_at = time.time()
    with stack.db() as conn:
        for wf, key, status, suspended, created, finished, resumes, completed_events in conn.execute(
                """SELECT workflow_id, instance_key, status, suspended_at IS NOT NULL,
                          extract(epoch FROM created_at)::float8, extract(epoch FROM finished_at)::float8, resume_count,
                          (SELECT count(*) FROM durable_instance_events e
                           WHERE e.namespace = i.namespace AND e.workflow_id = i.workflow_id
                             AND e.instance_key = i.instance_key AND e.kind = 'completed')
                   FROM durable_instances i WHERE namespace = %s AND instance_key = ANY(%s)""", (NAMESPACE, keys)):
            history.instances.append(InstanceFact(wf, key, status, suspended, created, finished, int(resumes),
                                                  int(completed_events), record.operator_retries.get(key, 0),
                                                  key in record.suspended_seen))
        for wf, key, seq, step, created, encoding, state in conn.execute(
                """SELECT workflow_id, instance_key, sequence, step_name, extract(epoch FROM created_at)::float8,
                          encoding, state
                   FROM durable_checkpoints WHERE namespace = %s AND instance_key = ANY(%s)""", (NAMESPACE, keys)):
            history.checkpoints.append(CheckpointFact(wf, key, int(seq), step, created, decode(state, encoding)))
        for scope, key, status, attempt, result, updated in conn.execute(
                """SELECT scope, key, status, attempt, result_json, extract(epoch FROM updated_at)::float8
                   FROM durable_idempotency_keys WHERE namespace = %s AND key = ANY(%s)""", (NAMESPACE, guard_keys)):
            history.keys.append(KeyFact(scope, key, status, int(attempt), str(decode(result).get("id", "")), updated))
