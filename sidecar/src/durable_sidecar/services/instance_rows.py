"""An instance reference as the event, retry and recovery rules check it, name it in messages and lock its row."""

from __future__ import annotations

from .. import validation
from ..domain import Instance, InstanceRef
from ..errors import NotFound
from ..logs import instance_key_var
from ..stores.base import Conn
from ..stores.instances import InstanceStore


def check_ref(ref: InstanceRef) -> None:
    validation.identifier("workflow_id", ref.workflow_id)
    validation.identifier("instance_key", ref.instance_key)
    instance_key_var.set(ref.instance_key)


def instance_name(ref: InstanceRef) -> str:
    return f"{ref.workflow_id}/{ref.instance_key}"


async def locked_instance(instances: InstanceStore, conn: Conn, ref: InstanceRef, *, hint: str = "") -> Instance:
    """The instance, its row locked to the end of the transaction; NotFound when it does not exist."""
    inst = await instances.get_txn(conn, ref, for_update=True)
    if inst is None:
        raise NotFound(f"instance {instance_name(ref)} does not exist{hint}")
    return inst
