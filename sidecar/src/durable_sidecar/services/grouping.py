"""Group commit: concurrent one-item writes of one namespace go to the database as one statement.

A write that finds fewer than `flushers` statements of its namespace in flight runs at once, alone, in
its caller's task: one call at a time costs what it did. Writes that arrive while that many are in
flight wait, and the next statement takes all of them (up to `max_items`): under concurrency the
database sees one statement and one commit for many calls instead of one each. Each caller gets its
own item's answer, or its own item's error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass
class _Namespace(Generic[Item, Result]):
    running: int = 0
    waiting: list[tuple[Item, asyncio.Future[Result]]] = field(default_factory=list)


class StatementGroups(Generic[Item, Result]):
    """`write_one(namespace, item)` alone; `write_many(namespace, items)` for two or more, one outcome an item."""

    def __init__(self, write_one: Callable[[str, Item], Awaitable[Result]],
                 write_many: Callable[[str, list[Item]], Awaitable[list[Result | BaseException]]], *,
                 flushers: int = 2, max_items: int = 100) -> None:
        self._write_one = write_one
        self._write_many = write_many
        self.flushers = flushers
        self.max_items = max_items
        self._spaces: dict[str, _Namespace[Item, Result]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def write(self, namespace: str, item: Item) -> Result:
        space = self._spaces.setdefault(namespace, _Namespace())
        if space.running < self.flushers and not space.waiting:
            space.running += 1
            try:
                return await self._write_one(namespace, item)
            finally:
                space.running -= 1
                self._flush_waiting(namespace, space)
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        space.waiting.append((item, future))
        self._flush_waiting(namespace, space)
        return await future

    def _flush_waiting(self, namespace: str, space: _Namespace[Item, Result]) -> None:
        while space.waiting and space.running < self.flushers:
            space.running += 1
            task = asyncio.create_task(self._flusher(namespace, space))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if not space.waiting and not space.running:
            self._spaces.pop(namespace, None)

    async def _flusher(self, namespace: str, space: _Namespace[Item, Result]) -> None:
        try:
            while space.waiting:
                group, space.waiting = space.waiting[:self.max_items], space.waiting[self.max_items:]
                # A caller that went away (its deadline, a cancelled RPC) is left out of the write.
                group = [(item, future) for item, future in group if not future.done()]
                if not group:
                    continue
                outcomes: list[Result | BaseException]
                try:
                    if len(group) == 1:
                        outcomes = [await self._write_one(namespace, group[0][0])]
                    else:
                        outcomes = await self._write_many(namespace, [item for item, _ in group])
                except Exception as exc:  # noqa: BLE001 - the group's callers raise it, each its own
                    outcomes = [exc] * len(group)
                except BaseException:
                    for _, future in group:  # the sidecar stopping: the waiting calls end with it
                        future.cancel()
                    raise
                for (_, future), outcome in zip(group, outcomes, strict=True):
                    if future.done():
                        continue
                    if isinstance(outcome, BaseException):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)
        finally:
            space.running -= 1
            self._flush_waiting(namespace, space)
