"""AuditService: the read-only operator views (an instance's audit trail, instance counts by status, the
namespace's workflows)."""

from __future__ import annotations

from .. import validation
from ..domain import InstanceEvent, InstanceFilter, InstanceRef, Page, StatusCounts, WorkflowSummary
from ..errors import InvalidArgument, NotFound
from ..logs import instance_key_var
from ..stores.base import Conn, Database
from ..stores.instances import InstanceStore
from ..stores.versions import VersionStore
from .search_fields import check_search

# The longest error text a filter looks for.
MAX_ERROR_TEXT = 256


def check_filter(flt: InstanceFilter) -> None:
    """The filters ListInstances and CountInstances share."""
    validation.identifier("workflow_id", flt.workflow_id, required=False)
    validation.identifier("last_step", flt.last_step, required=False)
    if flt.bound_version < 0:
        raise InvalidArgument("bound_version must not be negative")
    validation.identifier("instance_key_prefix", flt.key_prefix, required=False)
    validation.text("error_contains", flt.error_contains, limit=MAX_ERROR_TEXT)
    check_search(flt)


class AuditService:
    def __init__(self, db: Database, instances: InstanceStore, versions: VersionStore) -> None:
        self.db = db
        self.instances = instances
        self.versions = versions

    async def list_events(self, ref: InstanceRef, page: Page) -> tuple[list[InstanceEvent], str]:
        validation.identifier("workflow_id", ref.workflow_id)
        validation.identifier("instance_key", ref.instance_key)
        instance_key_var.set(ref.instance_key)

        async def txn(conn: Conn) -> tuple[list[InstanceEvent], str]:
            # An unknown instance is NOT_FOUND, not an empty trail (every instance has its STARTED event).
            if await self.instances.get_txn(conn, ref) is None:
                raise NotFound(f"instance {ref.workflow_id}/{ref.instance_key} does not exist")
            return await self.instances.events_txn(conn, ref, page)

        return await self.db.transaction(txn)

    async def count_instances(self, namespace: str, flt: InstanceFilter) -> StatusCounts:
        check_filter(flt)

        async def txn(conn: Conn) -> StatusCounts:
            return await self.instances.count_txn(conn, namespace, flt)

        return await self.db.transaction(txn)

    async def list_workflows(self, namespace: str, page: Page) -> tuple[list[WorkflowSummary], str]:
        async def txn(conn: Conn) -> tuple[list[WorkflowSummary], str]:
            return await self.versions.workflows_txn(conn, namespace, page)

        return await self.db.transaction(txn)
