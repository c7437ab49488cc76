"""The save rules give the same outcome on both paths: the general one (the service's transaction, several
statements) and the one-statement PL/pgSQL one (stores/postgres/sql/).

Each scenario runs twice on the same database, in two namespaces: once as the
sidecar runs on PostgreSQL (the store's one_statement_* flags set, its
durable_save_* functions deciding), once with the flags cleared and no
one-statement batch (as on a backend without those statements: the
transaction of services/checkpoints.py decides). The answers, the refusals and
the rows left behind must be equal, and the first run must have been decided
by the functions the scenario names (so a scenario cannot pass by never
reaching the fast path).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from durable_sidecar.domain import InstanceRef, KeyRef, SavedCheckpoint
from durable_sidecar.errors import DomainError
from durable_sidecar.services.checkpoints import CompleteKey, SaveItem
from durable_sidecar.services.idempotency import ClaimItem
from durable_sidecar.stores.backend import Backend
from durable_sidecar.wiring import Services, build_services, make_cache, open_backend

from tests.conftest import make_settings
from tests.sidecar.storage import ago, fetch

pytestmark = pytest.mark.postgres_only(reason="the one-statement path is PL/pgSQL: the embedded database has "
                                              "the general path only, which every other test covers")

WF = "wf-conformance"
SCOPE = "conformance"
DEFAULT_LEASE = 300
PATHS = ("one_statement", "general")


@dataclass
class World:
    """One run of a scenario: the services on one path, a namespace of its own, the statements that decided."""

    path: str
    services: Services
    url: str
    namespace: str = field(default_factory=lambda: f"ns-conf-{uuid.uuid4().hex[:10]}")
    statements: list[tuple[str, str]] = field(default_factory=list)
    result: list[object] = field(default_factory=list)  # the scenario's answers, then the rows it left

    def ref(self, key: str) -> InstanceRef:
        return InstanceRef(self.namespace, WF, key)

    async def start(self, key: str, *, lease_seconds: int = 0, start_item: bytes = b"") -> None:
        await self.services.instances.start_or_resume(self.ref(key), execution_id="exec-1",
                                                      lease_seconds=lease_seconds, start_item_json=start_item)

    async def save(self, *items: SaveItem) -> object:
        """The answer (each item's outcome) or the refusal (its class and message), comparable across runs."""
        try:
            saved = await self.services.checkpoints.save(self.namespace, list(items))
        except DomainError as exc:
            return type(exc).__name__, str(exc)
        return [_saved(s) for s in saved]

    async def claim(self, key: str, holder: str) -> object:
        claimed = (await self.services.keys.claim(self.namespace, [claim_item(key, holder)]))[0]
        return claimed.outcome.name, claimed.key.status.name, claimed.key.attempt, claimed.key.holder

    async def expire_key_lease(self, key: str) -> None:
        await fetch(self.url, f"UPDATE durable_idempotency_keys SET lease_expires_at = {ago(self.url, 1)} "
                              "WHERE namespace = %s AND key = %s", self.namespace, key)

    async def rows(self) -> object:
        """What the runs leave in the database: instances (with the lease's length), checkpoints, keys, events."""
        ns = self.namespace
        instances = await fetch(self.url, "SELECT instance_key, status, last_sequence, last_step, checkpoint_count, "
                                          "lease_owner, extract(epoch FROM lease_expires_at - updated_at) "
                                          "FROM durable_instances WHERE namespace = %s ORDER BY 1", ns)
        checkpoints = await fetch(self.url, "SELECT instance_key, sequence, step_name, sha256, size_bytes, "
                                            "execution_id, node_name FROM durable_checkpoints WHERE namespace = %s "
                                            "ORDER BY 1, 2", ns)
        keys = await fetch(self.url, "SELECT key, status, attempt, holder, result_json FROM durable_idempotency_keys "
                                     "WHERE namespace = %s ORDER BY 1", ns)
        events = await fetch(self.url, "SELECT instance_key, kind, actor FROM durable_instance_events "
                                       "WHERE namespace = %s ORDER BY id", ns)
        # A renewed lease ends on a whole second (migration 0011): its length is the whole seconds.
        leased = [(*row[:-1], None if row[-1] is None else math.floor(row[-1])) for row in instances]
        return leased, checkpoints, [(*k[:-1], bytes(k[-1]) if k[-1] is not None else None) for k in keys], events


def claim_item(key: str, holder: str) -> ClaimItem:
    return ClaimItem(SCOPE, key, b'{"amount":42}', "", 60, 3600, holder)


def item(key: str, step: str, state: bytes, *, execution_id: str = "exec-1", expected: int | None = None,
         lease_seconds: int = 0, add: bool = False, complete_key: CompleteKey | None = None,
         complete_instance: bool = False, claim_next: ClaimItem | None = None) -> SaveItem:
    return SaveItem(WF, key, step, state, execution_id, "Node", expected, lease_seconds, add_step_result=add,
                    complete_key=complete_key, complete_instance=complete_instance, claim_next=claim_next)


def _saved(s: SavedCheckpoint) -> object:
    cp, key, inst, claim = s.checkpoint, s.completed_key, s.completed_instance, s.next_claim
    return (cp.sequence, cp.step_name, cp.sha256, cp.size_bytes, cp.execution_id, s.deduplicated, s.state,
            key and (key.status.name, key.attempt, key.holder, key.result_json),
            inst and (inst.status.name, inst.last_sequence, inst.last_step, inst.lease_owner),
            claim and (claim.outcome.name, claim.key.status.name, claim.key.attempt, claim.key.holder))


Scenario = Callable[[World], Awaitable[list[object]]]


@pytest.fixture
async def backend_pg(postgres_url: str) -> AsyncIterator[tuple[Backend, str]]:
    settings = make_settings(postgres_url, redis_url="", auth_tokens="conformance-token=ns", lease_seconds=DEFAULT_LEASE)
    backend = await open_backend(settings, owner=False, migrate=False)
    try:
        yield backend, postgres_url
    finally:
        await backend.db.close()


async def _run(backend: Backend, url: str, path: str, scenario: Scenario) -> World:
    """One run of the scenario on one path; the store is put back as it was afterwards."""
    store: Any = backend.checkpoints
    settings = make_settings(url, redis_url="", auth_tokens="conformance-token=ns", lease_seconds=DEFAULT_LEASE)
    world: World | None = None

    def spy(name: str, method: Callable[..., Awaitable[Any]], outcome: Callable[[Any], str]) -> None:
        async def spied(*args: Any, **kw: Any) -> Any:
            done = await method(*args, **kw)
            if world is not None:
                world.statements.append((name, "handed back" if done is None else outcome(done)))
            return done
        setattr(store, name, spied)

    if path == "general":
        store.one_statement_save = store.one_statement_step_save = False

        async def no_statement(*args: Any, **kw: Any) -> None:
            return None
        store.save_many_txn = no_statement
    else:
        spy("save_single_txn", store.save_single_txn, lambda d: str(d.outcome))
        spy("save_step_txn", store.save_step_txn, lambda d: "written")
        spy("save_many_txn", store.save_many_txn, lambda d: d.refusal or "written")
    try:
        world = World(path, build_services(settings, backend, make_cache(settings, shared_only=True)), url)
        world.result = [*await scenario(world), await world.rows()]
        return world
    finally:
        for name in ("one_statement_save", "one_statement_step_save", "save_single_txn", "save_step_txn",
                     "save_many_txn"):
            store.__dict__.pop(name, None)


async def conforms(backend_pg: tuple[Backend, str], scenario: Scenario, decided_by: set[str]) -> None:
    backend, url = backend_pg
    fast = await _run(backend, url, "one_statement", scenario)
    general = await _run(backend, url, "general", scenario)
    assert general.statements == []
    assert {name for name, _ in fast.statements} == decided_by, fast.statements
    assert fast.result == general.result


# --- fencing of a stale owner ------------------------------------------------------------------------------------


async def test_a_stale_expected_sequence_is_refused_and_writes_nothing(backend_pg: tuple[Backend, str]) -> None:
    async def scenario(w: World) -> list[object]:
        await w.start("k1")
        await w.start("k2")
        return [await w.save(item("k1", "A", b'{"a":1}', expected=0)),
                await w.save(item("k1", "B", b'{"b":1}', execution_id="exec-zombie", expected=0)),
                await w.save(item("k2", "A", b'{"a":1}'), item("k2", "B", b'{"b":1}', expected=0)),
                await w.save(item("k2", "C", b'{"c":1}', expected=0, add=True)),
                await w.save(item("k1", "C", b'{"c":1}', expected=1, add=True)),
                await w.save(item("nope", "A", b'{"a":1}')),
                await w.save(item("k1", "D", b'{"d":1}'), item("nope", "A", b"{}"))]

    await conforms(backend_pg, scenario, {"save_single_txn", "save_many_txn", "save_step_txn"})


# --- dedupe of the same step -------------------------------------------------------------------------------------


async def test_the_same_step_saved_again_is_the_checkpoint_already_there(backend_pg: tuple[Backend, str]) -> None:
    async def scenario(w: World) -> list[object]:
        await w.start("k1")
        await w.start("k2", start_item=b'{"order":"o-2"}')
        return [await w.save(item("k1", "A", b'{"a":1}')),
                await w.save(item("k1", "A", b'{"a":1}', execution_id="exec-retry")),  # a retry: deduplicated
                await w.save(item("k1", "A", b'{"a":2}')),  # the same step, another state: a new checkpoint
                await w.save(item("k1", "B", b'{"b":1}'), item("k1", "B", b'{"b":1}'), item("k1", "B", b'{"b":2}')),
                await w.save(item("k2", "Pay", b'{"paid":true}', add=True)),
                await w.save(item("k2", "Pay", b'{"paid":true}', add=True)),  # a retried step result
                await w.save(item("k2", "Pay", b'{"paid":false}', add=True))]

    await conforms(backend_pg, scenario, {"save_single_txn", "save_many_txn", "save_step_txn"})


# --- lease precedence ----------------------------------------------------------------------------------------------


async def test_the_saved_lease_is_the_items_then_the_instances_then_the_default(
        backend_pg: tuple[Backend, str]) -> None:
    async def scenario(w: World) -> list[object]:
        await w.start("own", lease_seconds=90)
        await w.start("default")
        await w.start("batch", lease_seconds=45)
        await w.start("step", lease_seconds=75)
        out = [await w.save(item("own", "A", b"{}")), await w.save(item("default", "A", b"{}")),
               await w.save(item("batch", "A", b"{}", lease_seconds=120), item("batch", "B", b"{}"))]
        leases = [(await w.rows())]
        out += [await w.save(item("own", "B", b"{}", lease_seconds=30, execution_id="exec-2")),
                await w.save(item("step", "A", b'{"a":1}', add=True)),
                await w.save(item("step", "B", b'{"b":1}', add=True, lease_seconds=600, execution_id="exec-3"))]
        return [*out, *leases]

    await conforms(backend_pg, scenario, {"save_single_txn", "save_many_txn", "save_step_txn"})


# --- key completion by attempt -------------------------------------------------------------------------------------


async def test_only_the_holders_attempt_completes_its_key(backend_pg: tuple[Backend, str]) -> None:
    async def scenario(w: World) -> list[object]:
        await w.start("k1", start_item=b'{"order":"o-1"}')
        out = [await w.claim("charge", "exec-1")]
        await w.expire_key_lease("charge")
        out.append(await w.claim("charge", "exec-2"))  # taken over: attempt 2
        out.append(await w.save(item("k1", "Charge", b'{"c":1}', add=True,
                                     complete_key=CompleteKey(SCOPE, "charge", 1, b""))))  # the zombie: refused
        out.append(await w.save(item("k1", "Charge", b'{"c":2}', add=True, execution_id="exec-2",
                                     complete_key=CompleteKey(SCOPE, "charge", 2, b'{"id":"ch_1"}'))))
        out.append(await w.save(item("k1", "Charge", b'{"c":2}', add=True, execution_id="exec-2",
                                     complete_key=CompleteKey(SCOPE, "charge", 2, b'{"id":"ch_1"}'))))  # a retry
        out.append(await w.claim("ship", "exec-2"))
        out.append(await w.save(item("k1", "Ship", b'{"s":1}', add=True, execution_id="exec-2",
                                     complete_key=CompleteKey(SCOPE, "ship", 1, b""))))
        out.append(await w.services.keys.get(KeyRef(w.namespace, SCOPE, "charge")) is not None)
        return out

    await conforms(backend_pg, scenario, {"save_step_txn"})


# --- complete on save ----------------------------------------------------------------------------------------------


async def test_the_last_save_completes_its_instance_and_a_retry_finds_it_completed(
        backend_pg: tuple[Backend, str]) -> None:
    async def scenario(w: World) -> list[object]:
        await w.start("k1", start_item=b'{"order":"o-1"}')
        await w.start("k2")
        out = [await w.save(item("k1", "Pay", b'{"paid":true}', add=True)),
               await w.save(item("k1", "Ship", b'{"shipped":true}', add=True, complete_instance=True)),
               await w.save(item("k1", "Ship", b'{"shipped":true}', add=True, complete_instance=True)),  # a retry
               await w.save(item("k1", "Late", b'{"late":true}', add=True)),  # finished: refused
               await w.save(item("k1", "Late", b'{"late":true}')),
               await w.save(item("k2", "A", b'{"a":1}', add=True, expected=3, complete_instance=True)),  # stale
               await w.save(item("k2", "A", b'{"a":1}', add=True, complete_instance=True))]
        return out

    await conforms(backend_pg, scenario, {"save_step_txn", "save_single_txn"})


# --- claim after save ----------------------------------------------------------------------------------------------


async def test_the_next_key_is_claimed_only_after_a_save_that_stands(backend_pg: tuple[Backend, str]) -> None:
    async def scenario(w: World) -> list[object]:
        await w.start("k1", start_item=b'{"order":"o-1"}')
        out = [await w.save(item("k1", "Pay", b'{"paid":true}', add=True, claim_next=claim_item("ship", "exec-1"))),
               # A refused save claims nothing.
               await w.save(item("k1", "Ship", b'{"s":1}', add=True, expected=0,
                                 claim_next=claim_item("mail", "exec-1"))),
               # A key held by another holder: in progress, not taken.
               await w.claim("notify", "exec-9"),
               await w.save(item("k1", "Ship", b'{"s":1}', add=True, claim_next=claim_item("notify", "exec-1"))),
               # A retried save with its claim: the same checkpoint, the claim answered as a retry by its holder.
               await w.save(item("k1", "Ship", b'{"s":1}', add=True, claim_next=claim_item("notify", "exec-1"))),
               await w.save(item("k1", "Mail", b'{"m":1}', add=True, claim_next=claim_item("mail", "exec-1")))]
        return out

    await conforms(backend_pg, scenario, {"save_step_txn"})
