"""Search fields: named texts and numbers an author sets per instance, which operators filter and sort by.

The rules (names, values, how many) live here; stores/search_fields.py holds the
SQL, once for both backends.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

from .. import validation
from ..domain import FieldCondition, Instance, InstanceFilter, InstanceRef, SearchOp
from ..errors import InvalidArgument
from ..stores.base import Conn, Database
from ..stores.instances import InstanceStore
from ..stores.search_fields import SearchFieldStore, Value
from .instance_rows import check_ref, locked_instance

# An instance, its changes, and the request field they came in (named in errors).
Change = tuple[InstanceRef, dict[str, "Value | None"], str]

MAX_FIELDS = 16  # per instance
MAX_NAME = 64
MAX_TEXT = 256  # characters of a text value
MAX_CONDITIONS = 8  # per filter
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*\Z")


def check_name(field: str, name: str) -> str:
    if not name:
        raise InvalidArgument(f"{field} is required (a search field's name)")
    if len(name) > MAX_NAME or not _NAME.match(name):
        raise InvalidArgument(f"{field} {name[:80]!r} is not a search field name: a letter, then letters, digits, "
                              f"'_', '.' or '-', at most {MAX_NAME} characters")
    return name


def check_value(field: str, value: object) -> Value:
    """A text of at most MAX_TEXT characters or a finite number; never a boolean, null, list or object."""
    if isinstance(value, str):
        validation.text(field, value, limit=MAX_TEXT)
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        if not math.isfinite(number) or (isinstance(value, int) and abs(value) > 2**53):
            raise InvalidArgument(f"{field} is a number out of range (a finite double; integers up to 2^53)")
        return number
    raise InvalidArgument(f"{field} must be a text or a number, got {type(value).__name__ if value is not None else 'null'}")


def parse_changes(fields_json: bytes, field: str = "fields_json") -> dict[str, Value | None]:
    """A JSON object of search-field name to value (null removes the field), named `field` in errors."""
    if not fields_json:
        raise InvalidArgument(f"{field} is required (a JSON object of search fields)")
    parsed = validation.parse_json(field, fields_json)
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidArgument(f"{field} must be a JSON object with at least one field")
    if len(parsed) > MAX_FIELDS:
        raise InvalidArgument(f"{field} sets {len(parsed)} fields; an instance has at most {MAX_FIELDS}")
    changes: dict[str, Value | None] = {}
    for name, value in parsed.items():
        check_name(f"{field} name", name)
        changes[name] = None if value is None else check_value(f"{field}.{name}", value)
    return changes


def merged(current: dict[str, Value], changes: dict[str, Value | None], field: str) -> dict[str, Value]:
    """The fields after the changes; InvalidArgument (naming `field`) above MAX_FIELDS."""
    after = dict(current)
    for name, value in changes.items():
        if value is None:
            after.pop(name, None)
        else:
            after[name] = value
    if len(after) > MAX_FIELDS:
        raise InvalidArgument(f"{field}: the instance would have {len(after)} search fields; the limit is "
                              f"{MAX_FIELDS} (remove some with null)")
    return dict(sorted(after.items()))


def parse_condition(index: int, name: str, op: SearchOp, value_json: bytes) -> FieldCondition:
    field = f"search_fields[{index}]"
    check_name(f"{field}.name", name)
    if not value_json:
        raise InvalidArgument(f"{field}.value_json is required (a JSON text or number)")
    value = check_value(f"{field}.value_json", validation.parse_json(f"{field}.value_json", value_json))
    return FieldCondition(name, op, value)


def check_search(flt: InstanceFilter) -> None:
    """The search-field part of a listing's filter."""
    if len(flt.fields) > MAX_CONDITIONS:
        raise InvalidArgument(f"search_fields has {len(flt.fields)} conditions; the limit is {MAX_CONDITIONS}")
    if flt.sort_field:
        check_name("sort_by_field", flt.sort_field)


def fields_json(fields: dict[str, Value] | tuple[tuple[str, Value], ...]) -> bytes:
    """The fields as a JSON object; whole numbers are written as integers."""
    items = fields.items() if isinstance(fields, dict) else fields
    return json.dumps({k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in items},
                      separators=(",", ":"), ensure_ascii=False).encode()


def with_fields(inst: Instance, fields: dict[str, Value]) -> Instance:
    return replace(inst, search_fields=tuple(sorted(fields.items())))


class SearchFieldService:
    def __init__(self, db: Database, instances: InstanceStore, fields: SearchFieldStore) -> None:
        self.db = db
        self.instances = instances
        self.fields = fields

    async def set(self, ref: InstanceRef, fields_json_: bytes) -> dict[str, Value]:
        check_ref(ref)
        changes = parse_changes(fields_json_)

        async def txn(conn: Conn) -> dict[str, Value]:
            await locked_instance(self.instances, conn, ref)
            after = merged(await self.fields.get_txn(conn, ref), changes, "fields_json")
            await self.fields.set_txn(conn, ref, changes)
            return after

        return await self.db.transaction(txn)

    async def check_room(self, changes: list[Change]) -> None:
        """Before a save or start writes anything: the changes fit each (existing) instance's fields."""
        async def txn(conn: Conn) -> None:
            for ref, fields, field in changes:
                merged(await self.fields.get_txn(conn, ref), fields, field)

        await self.db.transaction(txn)

    async def set_many(self, changes: list[Change]) -> None:
        """After a save or start: the changes, in one transaction (instances locked in key order)."""
        async def txn(conn: Conn) -> None:
            for ref, fields, field in sorted(changes, key=lambda c: (c[0].workflow_id, c[0].instance_key)):
                await locked_instance(self.instances, conn, ref)
                merged(await self.fields.get_txn(conn, ref), fields, field)
                await self.fields.set_txn(conn, ref, fields)

        await self.db.transaction(txn)
