"""VersionService: content-addressed snapshots, binding new instances, and explicit, logged moves."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace

from .. import definitions, validation
from ..definitions import DefinitionDiff
from ..domain import (
    ChangeLogEntry,
    Instance,
    InstanceMove,
    InstanceStatus,
    MoveCandidate,
    MoveSelector,
    NewVersion,
    Page,
    Registered,
    StartOutcome,
    StartResult,
    Version,
)
from ..errors import DomainError, FailedPrecondition, InvalidArgument, NotFound
from ..n8n_api import N8nClient, N8nWorkflow
from ..stores.base import Conn, Database
from ..stores.instances import InstanceStore
from ..stores.versions import VersionStore

log = logging.getLogger(__name__)


# Workflows remembered as 'no n8n check due' (the map is cleared when full), and for how long.
_NOT_DUE_ENTRIES = 10_000
_NOT_DUE_SECONDS = 5.0
# Workflow fingerprints remembered with the version they ran (the maps are cleared when full); the
# least time between two reads for one fingerprint, and before a workflow is read again after a failure.
_FINGERPRINT_ENTRIES = 10_000
_FINGERPRINT_READ_SECONDS = 0.5
_FINGERPRINT_RETRY_SECONDS = 5.0


@dataclass(frozen=True)
class Binding:
    """What StartOrResume binds: `current` is the version being run now, `for_new` what a new instance gets."""

    current: int
    for_new: int


def _check_workflow(workflow_id: str) -> None:
    validation.identifier("workflow_id", workflow_id)


def _step_missing(c: MoveCandidate, target: frozenset[str], source: frozenset[str] | None) -> bool:
    """Whether the target lacks where the instance stands.

    Gone when the node that saved the last checkpoint is absent from the
    target, or when the step names a node of the instance's own version (any
    step name, when it has no snapshot) that the target lacks. Step names
    that were never node names are labels the target cannot contradict.
    """
    if c.last_node and c.last_node not in target:
        return True
    return bool(c.last_step) and c.last_step not in target and (source is None or c.last_step in source)


class VersionService:
    def __init__(self, db: Database, versions: VersionStore, instances: InstanceStore, n8n: N8nClient, *,
                 sync_interval_seconds: int, max_batch_items: int) -> None:
        self.db = db
        self.versions = versions
        self.instances = instances
        self.n8n = n8n
        self.sync_interval_seconds = sync_interval_seconds
        self.max_batch_items = max_batch_items
        # (namespace, workflow_id) -> monotonic time before which this process does not ask the database
        # whether an n8n check is due: it was told 'not due' (at most one such query per workflow per 5 s).
        self._not_due_until: dict[tuple[str, str], float] = {}
        # Fingerprints of the workflows executions run (StartOrResume's workflow_fingerprint): the version
        # each ran when n8n was read for it, the fingerprint each version was so seen with, the current
        # version this process last bound with, the read in flight per workflow (one at a time), the time
        # before which a fingerprint is not read for again, each workflow's last read (with its time), and
        # the time before which a workflow is not read again after a failed read.
        self._fingerprints: dict[tuple[str, str, str], int] = {}
        self._printed: dict[tuple[str, str, int], str] = {}
        self._current_seen: dict[tuple[str, str], int] = {}
        self._reading: dict[tuple[str, str], asyncio.Future[N8nWorkflow | None]] = {}
        self._no_read_until: dict[tuple[str, str, str], float] = {}
        self._last_read: dict[tuple[str, str], tuple[float, N8nWorkflow]] = {}
        self._read_failed_until: dict[tuple[str, str], float] = {}

    # --- registering -------------------------------------------------------

    def new_version(self, namespace: str, workflow_id: str, definition_json: bytes, *, actor: str, reason: str,
                    n8n_version_id: str = "", label: str = "", note: str = "") -> NewVersion:
        """Checks and hashes a definition (CPU work, done outside any transaction)."""
        _check_workflow(workflow_id)
        validation.identifier("n8n_version_id", n8n_version_id, required=False)
        validation.identifier("label", label, required=False)
        definitions.semver_label("label", label)
        validation.text("note", note)
        validation.identifier("actor", actor, required=False)
        parsed = definitions.parse(definition_json)
        return NewVersion(namespace=namespace, workflow_id=workflow_id, content_hash=parsed.content_hash,
                          definition_json=parsed.raw, node_names=parsed.node_names, n8n_version_id=n8n_version_id,
                          label=label, note=note, actor=actor, reason=reason,
                          legacy_content_hash=parsed.legacy_content_hash)

    async def register_txn(self, conn: Conn, new: NewVersion) -> Registered:
        """Stores the snapshot unless its content exists; either way it becomes the current version.

        Race-safe across replicas: a read finds known content without a lock;
        otherwise the workflow's head row is locked, the content looked up
        again and the next number taken from the head, so concurrent callers
        get one version per content and numbers without duplicates.
        """
        found = await self._find_content_txn(conn, new)
        if found is not None and found[0].version == found[1]:
            return Registered(found[0], created=False)
        head = await self.versions.lock_head_txn(conn, new.namespace, new.workflow_id)
        found = await self._find_content_txn(conn, new)
        if found is not None:
            existing = found[0]
            if head.current_version != existing.version:
                # The workflow went back to an earlier content (a revert in n8n,
                # an operator's rollback): that snapshot is what runs now.
                await self.versions.set_head_txn(conn, new.namespace, new.workflow_id, latest=head.latest_version,
                                                 current=existing.version)
                await self.versions.log_registration_txn(
                    conn, new, from_version=head.current_version, to_version=existing.version,
                    reason=f"{new.reason}; same content as version {existing.version}, which is current again",
                )
                log.info("version current again", extra={"workflow_id": new.workflow_id,
                                                         "version": existing.version})
            return Registered(existing, created=False)
        number = head.latest_version + 1
        version = await self.versions.insert_txn(conn, new, number)
        await self.versions.set_head_txn(conn, new.namespace, new.workflow_id, latest=number, current=number)
        await self.versions.log_registration_txn(conn, new, from_version=head.current_version, to_version=number,
                                                 reason=new.reason)
        log.info("version registered", extra={"workflow_id": new.workflow_id, "version": number,
                                              "content_hash": new.content_hash})
        return Registered(version, created=True)

    async def _find_content_txn(self, conn: Conn, new: NewVersion) -> tuple[Version, int] | None:
        """The snapshot with this content, by its RFC 8785 hash or the hash from before it."""
        found = await self.versions.find_by_hash_txn(conn, new.namespace, new.workflow_id, new.content_hash)
        if found is None and new.legacy_content_hash and new.legacy_content_hash != new.content_hash:
            found = await self.versions.find_by_hash_txn(conn, new.namespace, new.workflow_id,
                                                         new.legacy_content_hash)
        return found

    async def register(self, namespace: str, workflow_id: str, definition_json: bytes, *, n8n_version_id: str = "",
                       label: str = "", note: str = "", actor: str = "") -> Registered:
        new = self.new_version(namespace, workflow_id, definition_json, actor=actor, reason=note or "registered",
                               n8n_version_id=n8n_version_id, label=label, note=note)

        async def txn(conn: Conn) -> Registered:
            return await self.register_txn(conn, new)

        return await self.db.transaction(txn)

    async def sync_from_n8n(self, namespace: str, workflow_id: str, *, actor: str = "") -> Registered:
        """Reads the workflow from n8n now and registers it."""
        _check_workflow(workflow_id)
        validation.identifier("actor", actor, required=False)
        fetched = await self.n8n.fetch_workflow(workflow_id)
        new = self._from_n8n(namespace, workflow_id, fetched.definition_json, fetched.version_id, actor=actor,
                             reason="synced from n8n")

        async def txn(conn: Conn) -> Registered:
            await self.versions.mark_n8n_checked_txn(conn, namespace, workflow_id)
            return await self.register_txn(conn, new)

        return await self.db.transaction(txn)

    def _from_n8n(self, namespace: str, workflow_id: str, definition_json: bytes, version_id: str, *, actor: str,
                  reason: str) -> NewVersion:
        reason = f"{reason} (n8n versionId {version_id})" if version_id else reason
        n8n_id = version_id if 0 < len(version_id) <= validation.MAX_ID_LENGTH else ""
        return self.new_version(namespace, workflow_id, definition_json, actor=actor, reason=reason,
                                n8n_version_id=n8n_id)

    # --- binding (used by InstanceService.start_or_resume) ------------------

    async def snapshot_for_start(self, namespace: str, workflow_id: str, definition_json: bytes, *,
                                 actor: str, fingerprint: str = "") -> NewVersion | None:
        """The definition a StartOrResume runs, when known; called outside any transaction.

        A sent definition is used as it is. Otherwise, with n8n API access,
        n8n is asked now when the caller's workflow fingerprint is unfamiliar
        (see _unfamiliar: a version published a moment ago), while the
        workflow has no version, and else by one caller per
        DURABLE_N8N_SYNC_INTERVAL_SECONDS; every other call makes no HTTP
        request. A failed read is logged and the registered version is used:
        n8n's API being down must not stop orders from starting.
        """
        if definition_json:
            return self.new_version(namespace, workflow_id, definition_json, actor=actor,
                                    reason="definition sent with StartOrResume")
        if not self.n8n.configured:
            return None
        workflow = (namespace, workflow_id)
        if fingerprint and self._unfamiliar(namespace, workflow_id, fingerprint):
            fetched = await self._fetch_for(workflow, fingerprint)
            if fetched is not None:
                async def checked(conn: Conn) -> None:  # a read like the interval's: the next is due after it
                    await self.versions.mark_n8n_checked_txn(conn, namespace, workflow_id)

                await self.db.transaction(checked)
                return self._from_n8n(namespace, workflow_id, fetched.definition_json, fetched.version_id,
                                      actor=actor, reason="synced from n8n: an execution ran a workflow "
                                                          "this sidecar had not seen")

        async def claim(conn: Conn) -> bool:
            return await self.versions.claim_n8n_check_txn(conn, namespace, workflow_id,
                                                           interval_seconds=self.sync_interval_seconds)

        if time.monotonic() < self._not_due_until.get(workflow, 0.0):
            return None
        if not await self.db.transaction(claim):
            if len(self._not_due_until) >= _NOT_DUE_ENTRIES:
                self._not_due_until.clear()
            self._not_due_until[workflow] = time.monotonic() + min(_NOT_DUE_SECONDS, self.sync_interval_seconds)
            return None
        try:
            fetched = await self.n8n.fetch_workflow(workflow_id)
            return self._from_n8n(namespace, workflow_id, fetched.definition_json, fetched.version_id, actor=actor,
                                  reason="synced from n8n at StartOrResume")
        except DomainError as exc:
            log.warning("could not read the workflow from n8n; binding to the registered version",
                        extra={"workflow_id": workflow_id, "error": str(exc)})
            return None

    def _unfamiliar(self, namespace: str, workflow_id: str, fingerprint: str) -> bool:
        """Whether an execution with this fingerprint may run a version the sidecar does not count as current.

        Familiar: n8n was read for this fingerprint before and it was then
        bound with the version this process last bound the workflow with. A
        new fingerprint (a publish, a new n8n, a sidecar restart) or one seen
        with another version (a revert, the workflow changed elsewhere) is
        unfamiliar until n8n is read for it once.
        """
        seen = self._fingerprints.get((namespace, workflow_id, fingerprint))
        return seen is None or seen != self._current_seen.get((namespace, workflow_id), seen)

    async def _fetch_for(self, workflow: tuple[str, str], fingerprint: str) -> N8nWorkflow | None:
        """The workflow as n8n answers it for an unfamiliar fingerprint; None when it cannot be read now.

        A read in flight is joined. Otherwise n8n is read at most once per
        fingerprint per _FINGERPRINT_READ_SECONDS (a start in between gets the
        workflow's last read of that age, if any) and not at all for
        _FINGERPRINT_RETRY_SECONDS after a failed read.
        """
        reading = self._reading.get(workflow)
        if reading is not None:
            return await asyncio.shield(reading)
        now = time.monotonic()
        if now < self._read_failed_until.get(workflow, 0.0):
            return None
        key = (*workflow, fingerprint)
        if now < self._no_read_until.get(key, 0.0):
            last = self._last_read.get(workflow)
            return last[1] if last is not None and now - last[0] < _FINGERPRINT_READ_SECONDS else None
        if len(self._no_read_until) >= _FINGERPRINT_ENTRIES:
            self._no_read_until.clear()
            self._last_read.clear()
        self._no_read_until[key] = now + _FINGERPRINT_READ_SECONDS
        fetched = await self._read_once(workflow)
        if fetched is not None:
            self._last_read[workflow] = (time.monotonic(), fetched)
        return fetched

    async def _read_once(self, workflow: tuple[str, str]) -> N8nWorkflow | None:
        """Reads the workflow from n8n, one read per workflow at a time: callers during a read share it."""
        reading = self._reading.get(workflow)
        if reading is not None:
            return await asyncio.shield(reading)
        future: asyncio.Future[N8nWorkflow | None] = asyncio.get_running_loop().create_future()
        self._reading[workflow] = future
        try:
            fetched: N8nWorkflow | None = await self.n8n.fetch_workflow(workflow[1])
        except DomainError as exc:
            log.warning("could not read the workflow from n8n; binding to the registered version",
                        extra={"workflow_id": workflow[1], "error": str(exc)})
            self._read_failed_until[workflow] = time.monotonic() + _FINGERPRINT_RETRY_SECONDS
            fetched = None
        except BaseException:
            future.set_result(None)
            raise
        finally:
            del self._reading[workflow]
        future.set_result(fetched)
        return fetched

    def ran(self, namespace: str, workflow_id: str, fingerprint: str, current: int, *, read: bool) -> None:
        """Notes a StartOrResume's outcome: the current version it bound with and, when n8n was read for it,
        that an execution with this fingerprint runs that version.

        Unless that version was seen with another fingerprint: then this
        execution runs something else than n8n's current version (n8n goes
        on running the previous version for a moment after a publish, and an
        execution begun before it may reach its Resume Point after), and
        the fingerprint stays unfamiliar, to be read for again.
        """
        if not fingerprint or not current:
            return
        if len(self._fingerprints) >= _FINGERPRINT_ENTRIES:
            self._fingerprints.clear()
            self._printed.clear()
            self._current_seen.clear()
        self._current_seen[(namespace, workflow_id)] = current
        if read and self._printed.get((namespace, workflow_id, current), fingerprint) == fingerprint:
            self._fingerprints[(namespace, workflow_id, fingerprint)] = current
            self._printed[(namespace, workflow_id, current)] = fingerprint

    async def binding_txn(self, conn: Conn, namespace: str, workflow_id: str, snapshot: NewVersion | None, *,
                          pinned_version: int) -> Binding:
        if snapshot is not None:
            current = (await self.register_txn(conn, snapshot)).version.version
        else:
            head = await self.versions.head_txn(conn, namespace, workflow_id)
            current = head.current_version if head else 0
        if pinned_version and pinned_version != current:
            if await self.versions.get_txn(conn, namespace, workflow_id, pinned_version, with_definition=False) is None:
                raise NotFound(f"pinned_version {pinned_version} of workflow {workflow_id} does not exist: "
                               "list the registered versions with ListVersions")
        return Binding(current=current, for_new=pinned_version or current)

    async def verdict_txn(self, conn: Conn, result: StartResult, *, current: int, version_label: str) -> StartResult:
        """Adds the version verdict, and the bound snapshot when the caller must run it instead.

        With a bound snapshot, the instance is on another version when that is
        not the one being run. Without one (it started before any version was
        registered), the author's label is its identity: a different label now
        is a mismatch, but there is no snapshot to hand back.
        """
        inst = result.instance
        if inst.bound_version:
            mismatch = current != 0 and inst.bound_version != current
        else:
            mismatch = bool(version_label and inst.version_label) and version_label != inst.version_label
        bound = None
        if mismatch and inst.bound_version and result.outcome in (StartOutcome.STARTED, StartOutcome.RESUMED):
            bound = await self.snapshot_txn(conn, inst.namespace, inst.workflow_id, inst.bound_version)
        return replace(result, current_version=current, version_mismatch=mismatch, bound=bound)

    async def snapshot_txn(self, conn: Conn, namespace: str, workflow_id: str, version: int) -> Version | None:
        return await self.versions.get_txn(conn, namespace, workflow_id, version, with_definition=True)

    # --- reading -----------------------------------------------------------

    async def get(self, namespace: str, workflow_id: str, version: int) -> Version:
        """One version with its definition; 0 means the current one."""
        _check_workflow(workflow_id)
        if version < 0:
            raise InvalidArgument("version must not be negative")

        async def txn(conn: Conn) -> Version | None:
            number = version
            if number == 0:
                head = await self.versions.head_txn(conn, namespace, workflow_id)
                number = head.current_version if head else 0
                if number == 0:
                    raise NotFound(f"workflow {workflow_id} has no registered version")
            return await self.versions.get_txn(conn, namespace, workflow_id, number, with_definition=True)

        found = await self.db.transaction(txn)
        if found is None:
            raise NotFound(f"version {version} of workflow {workflow_id} does not exist")
        return found

    async def current_version(self, namespace: str, workflow_id: str) -> int:
        _check_workflow(workflow_id)

        async def txn(conn: Conn) -> int:
            head = await self.versions.head_txn(conn, namespace, workflow_id)
            return head.current_version if head else 0

        return await self.db.transaction(txn)

    async def list_versions(self, namespace: str, workflow_id: str, page: Page) -> tuple[list[Version], str]:
        _check_workflow(workflow_id)

        async def txn(conn: Conn) -> tuple[list[Version], str]:
            return await self.versions.list_txn(conn, namespace, workflow_id, page)

        return await self.db.transaction(txn)

    async def diff(self, namespace: str, workflow_id: str, old: int, new: int) -> DefinitionDiff:
        """Nodes added, removed and changed from version `old` to version `new`."""
        a, b = await self.get(namespace, workflow_id, old), await self.get(namespace, workflow_id, new)
        assert a.definition_json is not None and b.definition_json is not None
        return definitions.diff(definitions.parse(a.definition_json), definitions.parse(b.definition_json))

    async def change_log(self, namespace: str, workflow_id: str, instance_key: str,
                         page: Page) -> tuple[list[ChangeLogEntry], str]:
        validation.identifier("workflow_id", workflow_id, required=False)
        validation.identifier("instance_key", instance_key, required=False)
        if instance_key and not workflow_id:
            raise InvalidArgument("instance_key needs workflow_id")

        async def txn(conn: Conn) -> tuple[list[ChangeLogEntry], str]:
            return await self.versions.changes_txn(conn, namespace, workflow_id, instance_key, page)

        return await self.db.transaction(txn)

    # --- moving ------------------------------------------------------------

    async def move_one_txn(self, conn: Conn, inst: Instance, *, to_version: int, actor: str, reason: str) -> bool:
        """Moves one instance (a bulk operation's, inside its batch) as MoveInstances does, with its change-log
        row; False when it is on that version already. FailedPrecondition, before anything is written, for a
        finished instance; NotFound for a version the instance's workflow does not have."""
        locked = await self.instances.get_txn(conn, inst.ref, for_update=True)
        if locked is None:
            raise NotFound(f"instance {inst.workflow_id}/{inst.instance_key} does not exist")
        if locked.status.final:
            raise FailedPrecondition(f"instance {inst.workflow_id}/{inst.instance_key} is {locked.status.value}: "
                                     "only running or suspended instances move")
        if locked.bound_version == to_version:
            return False
        if await self.versions.get_txn(conn, inst.namespace, inst.workflow_id, to_version,
                                       with_definition=False) is None:
            raise NotFound(f"to_version {to_version} of workflow {inst.workflow_id} does not exist")
        await self.instances.rebind_txn(conn, inst.namespace, inst.workflow_id, [inst.instance_key],
                                        to_version=to_version)
        move = InstanceMove(instance_key=inst.instance_key, from_version=locked.bound_version, to_version=to_version,
                            last_step=locked.last_step, last_step_missing_in_target=False)
        await self.versions.log_moves_txn(conn, inst.namespace, inst.workflow_id, [move], actor=actor, reason=reason)
        return True

    async def move_instances(self, namespace: str, selector: MoveSelector, *, to_version: int, dry_run: bool,
                             reason: str, actor: str) -> list[InstanceMove]:
        """Rebinds the selected instances; a real move logs one change per instance in the same transaction."""
        _check_workflow(selector.workflow_id)
        if len(selector.instance_keys) > self.max_batch_items:
            raise InvalidArgument(f"instance_keys has {len(selector.instance_keys)} keys; the limit is "
                                  f"{self.max_batch_items} (DURABLE_MAX_BATCH_ITEMS)")
        for key in selector.instance_keys:
            validation.identifier("instance_keys[]", key)
        if selector.from_version < 0:
            raise InvalidArgument("from_version must not be negative")
        if to_version < 1:
            raise InvalidArgument("to_version is required (a registered version number)")
        validation.text("reason", reason, required=not dry_run)
        validation.identifier("actor", actor, required=not dry_run)
        if not selector.statuses:
            selector = MoveSelector(selector.workflow_id, selector.instance_keys, (InstanceStatus.RUNNING,),
                                    selector.from_version)
        wf = selector.workflow_id

        async def txn(conn: Conn) -> list[InstanceMove]:
            target = await self.versions.get_txn(conn, namespace, wf, to_version, with_definition=False)
            if target is None:
                raise NotFound(f"to_version {to_version} of workflow {wf} does not exist")
            if selector.from_version and await self.versions.get_txn(
                    conn, namespace, wf, selector.from_version, with_definition=False) is None:
                raise NotFound(f"from_version {selector.from_version} of workflow {wf} does not exist")
            if selector.instance_keys:
                known = await self.instances.existing_keys_txn(conn, namespace, wf, list(selector.instance_keys))
                unknown = sorted(set(selector.instance_keys) - known)
                if unknown:
                    shown = ", ".join(unknown[:10]) + (" …" if len(unknown) > 10 else "")
                    raise NotFound(f"{len(unknown)} instance key(s) do not exist in workflow {wf}: {shown}")
            candidates = await self.instances.select_for_move_txn(conn, namespace, selector, lock=not dry_run)
            bound = sorted({c.bound_version for c in candidates if c.bound_version and c.bound_version != to_version})
            sources = await self.versions.node_names_txn(conn, namespace, wf, bound) if bound else {}
            names = frozenset(target.node_names)
            moves = [
                InstanceMove(instance_key=c.instance_key, from_version=c.bound_version, to_version=to_version,
                             last_step=c.last_step,
                             last_step_missing_in_target=_step_missing(c, names, sources.get(c.bound_version)))
                for c in candidates if c.bound_version != to_version
            ]
            if moves and not dry_run:
                keys = [m.instance_key for m in moves]
                await self.instances.rebind_txn(conn, namespace, wf, keys, to_version=to_version)
                await self.versions.log_moves_txn(conn, namespace, wf, moves, actor=actor, reason=reason)
            return moves

        moves = await self.db.transaction(txn)
        log.info("instances moved" if not dry_run else "instance move planned",
                 extra={"workflow_id": wf, "to_version": to_version, "count": len(moves), "dry_run": dry_run})
        return moves
