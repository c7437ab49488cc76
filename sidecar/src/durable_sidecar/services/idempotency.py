"""IdempotencyService: claim, complete and release keys (the Stripe / IETF Idempotency-Key contract), and the reaper.

Every decision is made inside one database transaction on a locked row and
judged by database time. The cache only answers the replay of a completed key
whose fingerprint matches; any other answer, and every miss or doubt, comes
from the database, so a cache problem can cost speed but never change an outcome
(services/key_replay.py holds those replays).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass
from datetime import datetime

from .. import canonical, failpoints, metrics, validation
from ..domain import (
    Claimed,
    ClaimOutcome,
    ForcedRelease,
    IdempotencyKey,
    InstanceRef,
    KeyCompleted,
    KeyFilter,
    KeyRef,
    KeyStatus,
    NewClaim,
    Page,
)
from ..errors import DomainError, FailedPrecondition, InstanceFinished, InvalidArgument, NotFound, StaleFencingToken, TooLarge, Unavailable
from ..logs import instance_key_var
from ..memory.completed_keys import CompletedKeys
from ..stores.base import Conn, Database, SingleClaim
from ..stores.cache import Cache
from ..stores.idempotency import IdempotencyStore
from ..stores.instances import InstanceStore
from .key_replay import CACHE_MARGIN, CompletedKeyReplay

log = logging.getLogger(__name__)

MIN_LEASE_SECONDS, MAX_LEASE_SECONDS = 1, 86_400
MIN_TTL_SECONDS, MAX_TTL_SECONDS = 60, 31_622_400

# Above this many payload bytes, canonicalising and hashing move off the event loop.
_OFFLOAD_BYTES = 256 * 1024
# How often a claim retries when the row it conflicted with vanished before it
# could lock it (deleted by the reaper in between).
_LOCK_TRIES = 5
_HEX_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ClaimItem:
    """One item of a Claim request, as the transport decoded it."""

    scope: str
    key: str
    payload_json: bytes
    fingerprint: str
    lease_seconds: int
    ttl_seconds: int
    holder: str
    # Optional, both or neither: the instance the claim works for.
    workflow_id: str = ""
    instance_key: str = ""


def canonical_json(payload: bytes) -> bytes:
    """RFC 8785 (JCS) form of the payload (see canonical.py): what the node package hashes too."""
    return canonical.canonical_json(payload, "payload_json")


def fingerprint_of(payload: bytes) -> str:
    """Lower-case hex SHA-256 of the payload's canonical JSON: key order and whitespace do not change it."""
    return canonical.fingerprint_of(payload, "payload_json")


def _show_fp(fingerprint: str) -> str:
    return fingerprint[:12] + "…" if fingerprint else "(none)"


def _name(ref: KeyRef) -> str:
    return f"{ref.scope}/{ref.key}"


def _check_ref(ref: KeyRef) -> None:
    validation.identifier("scope", ref.scope)
    validation.identifier("key", ref.key)
    instance_key_var.set(_name(ref))


class IdempotencyService:
    def __init__(self, db: Database, store: IdempotencyStore, cache: Cache, *, default_lease_seconds: int,
                 default_ttl_seconds: int, max_batch_items: int, max_payload_bytes: int,
                 reaper_batch_size: int, instances: InstanceStore | None = None, local_keys: int = 0,
                 cache_min_bytes: int = 0) -> None:
        self.db = db
        self.store = store
        self.cache = cache
        # A shared cache (Redis) holds completed keys whose result is at least this large; a smaller one
        # is served by the database in the one round trip a cache read would cost. Above 0, a lone claim
        # goes straight to its one statement (a new key needs it anyway; a replay gets the result from it).
        self.cache_min_bytes = cache_min_bytes
        # Completed keys replayed from this process's memory, before the shared cache is asked.
        self.local = CompletedKeys(local_keys, margin=CACHE_MARGIN)
        # Completed keys answered from that memory or the shared cache, before the database is asked.
        self.replay = CompletedKeyReplay(cache, self.local, cache_min_bytes=cache_min_bytes)
        # Reads the instance an instance-aware claim names (ClaimItem.workflow_id/instance_key).
        self.instances = instances
        self.default_lease_seconds = default_lease_seconds
        self.default_ttl_seconds = default_ttl_seconds
        self.max_batch_items = max_batch_items
        self.max_payload_bytes = max_payload_bytes
        self.reaper_batch_size = reaper_batch_size

    # Claims.

    def _fingerprint(self, item: ClaimItem, known: str | None) -> str:
        """The claim's fingerprint; `known`: the one its raw payload had before (no canonical JSON work then)."""
        if item.payload_json and item.fingerprint:
            raise InvalidArgument("set payload_json or fingerprint, not both")
        if item.fingerprint:
            fp = item.fingerprint.lower()
            if not _HEX_SHA256.match(fp):
                raise InvalidArgument("fingerprint must be a hex SHA-256 (64 hex digits)")
            return fp
        if item.payload_json:
            if len(item.payload_json) > self.max_payload_bytes:
                raise TooLarge(f"payload_json is {len(item.payload_json)} bytes; the limit is "
                               f"{self.max_payload_bytes} bytes (DURABLE_MAX_STATE_BYTES): send a hash in fingerprint")
            return known if known is not None else fingerprint_of(item.payload_json)
        return ""

    def _validate(self, namespace: str, label: str, item: ClaimItem, known: str | None = None) -> NewClaim:
        try:
            validation.identifier("scope", item.scope)
            validation.identifier("key", item.key)
            validation.identifier("holder", item.holder, required=False)
            lease = validation.in_range("lease_seconds", item.lease_seconds, MIN_LEASE_SECONDS, MAX_LEASE_SECONDS,
                                        default=self.default_lease_seconds)
            ttl = validation.in_range("ttl_seconds", item.ttl_seconds, MIN_TTL_SECONDS, MAX_TTL_SECONDS,
                                      default=self.default_ttl_seconds)
            fingerprint = self._fingerprint(item, known)
            instance = self._instance_of(namespace, item)
        except (InvalidArgument, TooLarge) as exc:
            raise type(exc)(f"{label}: {exc}") from None
        raw = hashlib.sha256(item.payload_json).hexdigest() if item.payload_json else ""
        return NewClaim(KeyRef(namespace, item.scope, item.key), fingerprint, lease, ttl, item.holder,
                        instance=instance, payload_json=item.payload_json, raw_sha256=raw)

    def _instance_of(self, namespace: str, item: ClaimItem) -> InstanceRef | None:
        if not item.workflow_id and not item.instance_key:
            return None
        if not item.workflow_id or not item.instance_key:
            raise InvalidArgument("give both workflow_id and instance_key (the claim's instance), or neither")
        validation.identifier("workflow_id", item.workflow_id)
        validation.identifier("instance_key", item.instance_key)
        if self.instances is None:
            raise InvalidArgument("instance-aware claims are not served here (no instance store)")
        return InstanceRef(namespace, item.workflow_id, item.instance_key)

    def _prepare(self, namespace: str, items: list[ClaimItem], known: list[str] | None = None,
                 labels: list[str] | None = None) -> list[NewClaim]:
        """The items checked; an error names the item by its label (default: items[i])."""
        names = labels if labels is not None else [f"items[{i}]" for i in range(len(items))]
        claims = [self._validate(namespace, names[i], item, known[i] if known else None)
                  for i, item in enumerate(items)]
        seen: dict[KeyRef, int] = {}
        for i, claim in enumerate(claims):
            if claim.ref in seen:
                raise InvalidArgument(f"{names[i]}: key {_name(claim.ref)} is already {names[seen[claim.ref]]}: "
                                      "a key may appear only once in a batch")
            seen[claim.ref] = i
        return claims

    async def check_claims(self, namespace: str, items: list[ClaimItem], labels: list[str]) -> list[NewClaim]:
        """The checks claim() makes of its items, for claims another call makes after it wrote (a save's
        claim_next, a start's claim_on_start): InvalidArgument or TooLarge naming the item by its label.

        Returns the claims as checked, for a store statement that writes and claims at once."""
        if sum(len(i.payload_json) for i in items) > _OFFLOAD_BYTES:
            return await asyncio.to_thread(self._prepare, namespace, items, None, labels)
        return self._prepare(namespace, items, labels=labels)

    def acquired_with_write(self, key: IdempotencyKey) -> Claimed:
        """A key another call's statement inserted in progress with its write (a claim ahead): counted as acquired."""
        metrics.IDEMPOTENCY_CLAIMS.labels(ClaimOutcome.ACQUIRED.value).inc()
        return Claimed(ClaimOutcome.ACQUIRED, key)

    async def claim_after(self, namespace: str, items: list[ClaimItem], what: str) -> list[Claimed] | None:
        """claim() of keys that a save or start named for the next Guard, once its write stands.

        None when the claim cannot be made now (a DomainError: a fingerprint mismatch, the
        database gone): the write stands and the Guard claims for itself. The call's log
        lines go on naming what they named before.
        """
        logged_as = instance_key_var.get()
        try:
            return await self.claim(namespace, items)
        except DomainError as exc:
            log.info("%s not made; the write stands and the Guard claims itself", what,
                     extra={"items": len(items), "reason": str(exc)})
            return None
        finally:
            instance_key_var.set(logged_as)

    async def claim(self, namespace: str, items: list[ClaimItem]) -> list[Claimed]:
        """One answer per item, in request order; all items in one transaction, or none on a mismatch."""
        if not items:
            raise InvalidArgument("items is empty: send at least one key to claim")
        if len(items) > self.max_batch_items:
            raise InvalidArgument(f"{len(items)} items; the limit is {self.max_batch_items} (DURABLE_MAX_BATCH_ITEMS)")
        if len(items) == 1:
            instance_key_var.set(f"{items[0].scope}/{items[0].key}")
        local = self.replay.from_memory(namespace, items, self._prepare)
        if local is not None:
            for _ in local:
                metrics.IDEMPOTENCY_CLAIMS.labels(ClaimOutcome.DUPLICATE.value).inc()
            return local
        if sum(len(i.payload_json) for i in items) > _OFFLOAD_BYTES:
            claims = await asyncio.to_thread(self._prepare, namespace, items)
        else:
            claims = self._prepare(namespace, items)

        cached = await self.replay.from_cache(claims) if len(claims) > 1 or not self.cache_min_bytes else None
        if cached is not None:
            for claim, claimed in zip(claims, cached, strict=True):
                metrics.IDEMPOTENCY_CLAIMS.labels(ClaimOutcome.DUPLICATE.value).inc()
                self.local.put(self.cache.scope, claimed.key, claim.raw_sha256)
            log.debug("claims replayed from the cache", extra={"items": len(cached)})
            return cached
        if len(claims) == 1:
            single = await self._claim_single(claims[0])
            if single is not None:
                metrics.IDEMPOTENCY_CLAIMS.labels(single.outcome.value).inc()
                return [single]

        async def txn(conn: Conn) -> tuple[list[Claimed], list[KeyRef], datetime, list[tuple[int, str]]]:
            now = await self.store.now_txn(conn)
            results: dict[int, Claimed] = {}
            renewed: list[KeyRef] = []
            taken_over: list[tuple[int, str]] = []  # (item, the holder that lost its instance)
            # Lock rows in one fixed order so that concurrent batches cannot deadlock.
            for i in sorted(range(len(claims)), key=lambda i: (claims[i].ref.scope, claims[i].ref.key)):
                results[i], new_life = await self._claim_one(conn, now, i, claims[i], taken_over)
                if new_life:
                    renewed.append(claims[i].ref)
            return [results[i] for i in range(len(claims))], renewed, now, taken_over

        try:
            results, renewed, now, taken_over = await self.db.transaction(txn)
        except InstanceFinished:
            metrics.IDEMPOTENCY_CLAIMS.labels("instance_finished").inc()
            raise
        except FailedPrecondition:
            metrics.IDEMPOTENCY_CLAIMS.labels("mismatch").inc()
            raise
        for i, lost_holder in taken_over:
            instance = claims[i].instance
            assert instance is not None
            log.warning("idempotency key taken over from a holder that lost its instance", extra={
                "key": _name(claims[i].ref), "attempt": results[i].key.attempt, "holder": claims[i].holder,
                "previous_holder": lost_holder, "instance": f"{instance.workflow_id}/{instance.instance_key}"})
        for claimed in results:
            metrics.IDEMPOTENCY_CLAIMS.labels(claimed.outcome.value).inc()
            if claimed.outcome is ClaimOutcome.ACQUIRED and claimed.key.attempt > 1:
                log.info("idempotency key acquired again", extra={
                    "key": _name(claimed.key.ref), "attempt": claimed.key.attempt, "holder": claimed.key.holder})
        if renewed:
            # The previous life of these keys may still be cached (it is bounded by
            # that life's expiry, but forgetting it leaves no doubt).
            self.local.forget(self.cache.scope, renewed)
            await self.cache.forget_completed_keys([(r.namespace, r.scope, r.key) for r in renewed])
        for claim, claimed in zip(claims, results, strict=True):
            if claimed.outcome is ClaimOutcome.DUPLICATE:
                await self.replay.remember(claimed.key, now, claim.raw_sha256)
        return results

    async def _claim_single(self, claim: NewClaim) -> Claimed | None:
        """One key in one statement: a new key acquired, or a completed one replayed; None: the locked path decides."""
        async def one(conn: Conn) -> SingleClaim | None:
            return await self.store.claim_single_txn(conn, claim)

        got = await self.db.single(one)
        if got is None:
            return None
        if got.inserted:
            return Claimed(ClaimOutcome.ACQUIRED, got.key)
        key = got.key
        if (key.status is KeyStatus.COMPLETED and not key.expired(got.now)
                and (key.fingerprint == claim.fingerprint or self._legacy_match(key.fingerprint, claim))):
            await self.replay.remember(key, got.now, claim.raw_sha256)
            return Claimed(ClaimOutcome.DUPLICATE, key)
        return None

    async def _claim_one(self, conn: Conn, now: datetime, index: int, claim: NewClaim,
                         taken_over: list[tuple[int, str]]) -> tuple[Claimed, bool]:
        """(answer, whether the key began a new life after expiring)."""
        for _ in range(_LOCK_TRIES):
            row = await self.store.get_txn(conn, claim.ref, for_update=True)
            if row is None:
                await self._refuse_for_finished_instance(conn, index, claim)
                created = await self.store.insert_txn(conn, claim)
                if created is not None:
                    return Claimed(ClaimOutcome.ACQUIRED, created), False
                continue  # a concurrent claim inserted it first: lock that row
            if row.expired(now):
                # An expired key counts as unseen, but its attempt number carries on
                # (never back to 1) so a late call from the old life stays fenced out.
                await self._refuse_for_finished_instance(conn, index, claim)
                return Claimed(ClaimOutcome.ACQUIRED, await self.store.acquire_txn(conn, claim, new_life=True)), True
            if row.fingerprint != claim.fingerprint and not self._legacy_match(row.fingerprint, claim):
                raise FailedPrecondition(
                    f"items[{index}]: key {_name(claim.ref)} was already used with a different payload "
                    f"(fingerprint {_show_fp(row.fingerprint)}, this request {_show_fp(claim.fingerprint)}); "
                    "nothing in this batch was claimed: use a new key for a different request"
                )
            if row.status is KeyStatus.COMPLETED:
                return Claimed(ClaimOutcome.DUPLICATE, row), False
            if row.lease_alive(now):
                if claim.holder and row.holder == claim.holder:
                    # The holder itself claims again: a retry whose first answer was lost
                    # (or a commit the sidecar could not confirm). Same attempt, same answer.
                    return Claimed(ClaimOutcome.ACQUIRED, row), False
                if await self._holder_lost_instance(conn, now, claim, row):
                    # The key's holder ran the instance before it was resumed: its
                    # execution died, so waiting out its lease would only stall the
                    # instance. Its attempt is fenced off by the new one.
                    taken_over.append((index, row.holder))
                    return Claimed(ClaimOutcome.ACQUIRED,
                                   await self.store.acquire_txn(conn, claim, new_life=False)), False
                return Claimed(ClaimOutcome.IN_PROGRESS, row), False
            # Failed, or in progress with a lapsed lease: the next attempt takes over.
            await self._refuse_for_finished_instance(conn, index, claim)
            return Claimed(ClaimOutcome.ACQUIRED, await self.store.acquire_txn(conn, claim, new_life=False)), False
        raise Unavailable(f"items[{index}]: key {_name(claim.ref)} kept changing under the claim; retry")

    async def _refuse_for_finished_instance(self, conn: Conn, index: int, claim: NewClaim) -> None:
        """Refuses a claim that would start a side effect for an instance that is finished (completed, failed or
        cancelled): nothing resumes it, so a call made now would be lost to it (an execution that went on after
        its instance was failed, e.g. n8n's On Error "Continue" past a refused save). A completed key is still
        replayed (no call is made). Read, not locked, as _holder_lost_instance reads it."""
        if claim.instance is None or self.instances is None:
            return
        inst = await self.instances.get_txn(conn, claim.instance)
        if inst is not None and inst.status.final:
            raise InstanceFinished(
                f"items[{index}]: instance {claim.instance.workflow_id}/{claim.instance.instance_key} is "
                f"{inst.status.value}: a finished instance starts no more side effects, so key {_name(claim.ref)} "
                "was not claimed and nothing in this batch was; retry the instance to run it again")

    async def _holder_lost_instance(self, conn: Conn, now: datetime, claim: NewClaim, row: IdempotencyKey) -> bool:
        """Whether the claimant holds the claim's instance (live lease) and the key's holder held it once, not now.

        A key's holder that never ran this instance has lost nothing here (a key
        shared by two instances): its lease is waited out as usual. The instance
        row is read, not locked: a checkpoint save locks the instance before the
        keys it completes, so locking here (key, then instance) could deadlock
        with it; the lease as committed is what decides.
        """
        if claim.instance is None or not claim.holder or self.instances is None:
            return False
        inst = await self.instances.get_txn(conn, claim.instance)
        if (inst is None or inst.status.final or inst.lease_owner != claim.holder or inst.lease_expires_at is None
                or inst.lease_expires_at <= now or row.holder == inst.lease_owner):
            return False
        return await self.instances.ever_held_txn(conn, claim.instance, row.holder)

    @staticmethod
    def _legacy_match(stored: str, claim: NewClaim) -> bool:
        """A key claimed before RFC 8785 fingerprints holds the old form of the same payload."""
        if not claim.payload_json:
            return False
        legacy = canonical.legacy_fingerprint_of(claim.payload_json)
        return bool(legacy) and stored == legacy

    # Outcomes.

    def _check_attempt(self, ref: KeyRef, row: IdempotencyKey, attempt: int) -> None:
        if row.attempt != attempt:
            raise StaleFencingToken(
                f"attempt {attempt} no longer holds key {_name(ref)}: it is at attempt {row.attempt} "
                "(its lease lapsed and another holder took it over); the outcome is that holder's to record"
            )

    def check_completion(self, ref: KeyRef, *, attempt: int, result_json: bytes) -> None:
        """The checks of a completion's input (Complete, or a save's complete_key), before any transaction."""
        validation.identifier("scope", ref.scope)
        validation.identifier("key", ref.key)
        if attempt < 1:
            raise InvalidArgument("attempt must be 1 or more: pass the attempt the claim returned")
        if len(result_json) > self.max_payload_bytes:
            raise TooLarge(f"result_json is {len(result_json)} bytes; the limit is {self.max_payload_bytes} bytes "
                           "(DURABLE_MAX_STATE_BYTES)")
        validation.json_bytes("result_json", result_json, required=False)

    async def complete_txn(self, conn: Conn, ref: KeyRef, *, attempt: int, result_json: bytes) -> KeyCompleted:
        """Completes the key inside the caller's transaction (its row stays locked until it ends).

        Call `completed` once that transaction has committed.
        """
        # The holder's completion (the usual case: a save completing the key its claim took) is one
        # statement; anything else (a retry, another attempt, a released key, no key) is decided below.
        held = await self.store.complete_held_txn(conn, ref, attempt=attempt, result_json=result_json or None)
        if held is not None:
            return KeyCompleted(held[0], held[1], changed=True)
        now = await self.store.now_txn(conn)
        row = await self.store.get_txn(conn, ref, for_update=True)
        if row is None:
            raise NotFound(f"key {_name(ref)} does not exist (never claimed, or expired and reaped): claim it first")
        self._check_attempt(ref, row, attempt)
        if row.status is KeyStatus.COMPLETED:
            return KeyCompleted(row, now, changed=False)  # a retried Complete: the stored result stands
        if row.status is KeyStatus.FAILED:
            raise StaleFencingToken(f"attempt {attempt} of key {_name(ref)} was released as failed and holds "
                                    "it no more: claim the key again")
        return KeyCompleted(await self.store.complete_txn(conn, ref, result_json=result_json or None), now,
                            changed=True)

    async def completed(self, done: list[KeyCompleted]) -> None:
        """After the commit: caches the keys that became completed, and logs them."""
        for d in done:
            if d.changed:
                await self.replay.remember(d.key, d.now)
                log.debug("idempotency key completed", extra={"key": _name(d.key.ref), "attempt": d.key.attempt})

    async def complete(self, ref: KeyRef, *, attempt: int, result_json: bytes) -> IdempotencyKey:
        """Stores the holder's result; retry-safe for the same attempt, refused for any other."""
        _check_ref(ref)
        self.check_completion(ref, attempt=attempt, result_json=result_json)

        async def held(conn: Conn) -> tuple[IdempotencyKey, datetime] | None:
            return await self.store.complete_held_txn(conn, ref, attempt=attempt, result_json=result_json or None)

        async def txn(conn: Conn) -> KeyCompleted:
            return await self.complete_txn(conn, ref, attempt=attempt, result_json=result_json)

        # The holder's completion is one statement; anything else (a retry, another
        # attempt, a released key, no key) takes the locked path, which says why.
        completed = await self.db.single(held)
        done = KeyCompleted(*completed, changed=True) if completed else await self.db.transaction(txn)
        failpoints.hit("idempotency.after_commit")
        await self.completed([done])
        return done.key

    async def release(self, ref: KeyRef, *, attempt: int, error_message: str) -> IdempotencyKey:
        """Marks the holder's attempt failed so the next claim acquires the key; retry-safe."""
        _check_ref(ref)
        if attempt < 1:
            raise InvalidArgument("attempt must be 1 or more: pass the attempt the claim returned")
        validation.text("error_message", error_message)

        async def txn(conn: Conn) -> IdempotencyKey:
            row = await self.store.get_txn(conn, ref, for_update=True)
            if row is None:
                raise NotFound(f"key {_name(ref)} does not exist (never claimed, or expired and reaped)")
            self._check_attempt(ref, row, attempt)
            if row.status is KeyStatus.COMPLETED:
                raise FailedPrecondition(f"key {_name(ref)} is completed: its side effect ran, so it cannot be "
                                         "released")
            if row.status is KeyStatus.FAILED:
                return row  # a retried Release
            return await self.store.release_txn(conn, ref, error_message=error_message)

        key = await self.db.transaction(txn)
        log.debug("idempotency key released", extra={"attempt": attempt})
        return key

    async def force_release(self, ref: KeyRef, *, reason: str) -> ForcedRelease:
        """An operator's release of a stuck in-progress key: its attempt is marked failed whoever holds it."""
        _check_ref(ref)
        validation.text("reason", reason)

        async def txn(conn: Conn) -> ForcedRelease:
            now = await self.store.now_txn(conn)
            row = await self.store.get_txn(conn, ref, for_update=True)
            if row is None:
                raise NotFound(f"key {_name(ref)} does not exist (never claimed, or expired and reaped)")
            if row.status is KeyStatus.COMPLETED:
                raise FailedPrecondition(
                    f"key {_name(ref)} is completed (attempt {row.attempt}): its side effect ran and its result is "
                    "replayed to duplicates, so it is not released; it expires on its own"
                )
            if row.status is KeyStatus.FAILED:
                return ForcedRelease(row, row, released=False, lease_was_alive=False)
            message = "released by an operator" + (f": {reason}" if reason else "")
            after = await self.store.release_txn(conn, ref, error_message=message)
            return ForcedRelease(row, after, released=True, lease_was_alive=row.lease_alive(now))

        result = await self.db.transaction(txn)
        # Nothing in progress is ever cached; forgetting anyway costs one call and settles any doubt.
        self.local.forget(self.cache.scope, [ref])
        await self.cache.forget_completed_key(ref.namespace, ref.scope, ref.key)
        if result.released:
            log.warning("idempotency key force-released by an operator", extra={
                "key": _name(ref), "attempt": result.before.attempt, "holder": result.before.holder,
                "lease_was_alive": result.lease_was_alive})
        return result

    # Reads.

    async def get(self, ref: KeyRef, *, include_expired: bool = False) -> IdempotencyKey:
        _check_ref(ref)

        async def txn(conn: Conn) -> tuple[IdempotencyKey | None, datetime]:
            return await self.store.get_txn(conn, ref), await self.store.now_txn(conn)

        row, now = await self.db.transaction(txn)
        if row is None or (row.expired(now) and not include_expired):
            raise NotFound(f"key {_name(ref)} does not exist" + (" (it expired)" if row is not None else ""))
        return row

    async def list_keys(self, namespace: str, flt: KeyFilter, page: Page) -> tuple[list[IdempotencyKey], str]:
        validation.identifier("scope", flt.scope, required=False)

        async def txn(conn: Conn) -> tuple[list[IdempotencyKey], str]:
            return await self.store.list_txn(conn, namespace, flt, page)

        return await self.db.transaction(txn)

    async def now(self) -> datetime:
        """Database time, for views that say whether a lease is alive."""
        return await self.db.transaction(self.store.now_txn)

    # The reaper.

    async def reap_expired(self) -> int:
        """Deletes expired keys that are not in progress, one small transaction per batch; returns the count."""
        total = 0
        while True:
            async def txn(conn: Conn) -> list[KeyRef]:
                return await self.store.reap_expired_txn(conn, limit=self.reaper_batch_size)

            refs = await self.db.transaction(txn)
            if refs:
                total += len(refs)
                metrics.KEYS_REAPED.inc(len(refs))
                self.local.forget(self.cache.scope, refs)
                await self.cache.forget_completed_keys([(r.namespace, r.scope, r.key) for r in refs])
            if len(refs) < self.reaper_batch_size:
                return total
            await asyncio.sleep(0)  # let claims in between batches

    async def run_reaper(self, interval_seconds: float) -> None:
        """Reaps every interval until cancelled; a failed pass is logged and tried again next time."""
        log.info("idempotency key reaper started", extra={"interval_s": interval_seconds,
                                                          "batch": self.reaper_batch_size})
        while True:
            await asyncio.sleep(interval_seconds)
            try:
                reaped = await self.reap_expired()
            except Exception as exc:  # noqa: BLE001 - the reaper must outlive a database outage
                log.warning("idempotency key reaper pass failed; retrying next interval", extra={"error": repr(exc)})
                continue
            if reaped:
                log.info("expired idempotency keys reaped", extra={"count": reaped})
