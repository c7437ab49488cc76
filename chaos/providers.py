"""The fake providers of a chaos run: e2e/fake_services.py with each case's seeded schedule, read back as facts.

A provider performs a call once per Idempotency-Key (a repeated key replays the stored answer, and a key
still being performed is answered 409, as Stripe does), so the effective call of a side effect is the
first call per (provider, Idempotency-Key). The planted defect
`provider-ignores-keys` makes every call effective, which the oracle's rule 2 must catch.
"""

from __future__ import annotations

from collections.abc import Iterable

from fake_services import SERVICES, FakeServices

from chaos.history import CallFact
from chaos.model import ProviderSchedule


class Providers:
    def __init__(self, *, ignore_keys: bool = False) -> None:
        self.services = FakeServices().start()
        self.services.refuse_keys_in_progress()
        if ignore_keys:
            self.services.ignore_keys()

    @property
    def url(self) -> str:
        return self.services.url

    def apply(self, schedules: Iterable[ProviderSchedule]) -> None:
        for s in schedules:
            self.services.schedule(s.provider, s.key, fail_first=s.fail_first, delay_s=s.delay_s)

    def in_flight(self) -> int:
        """Calls being performed right now (a kill then lands inside a side effect)."""
        return sum(self.services.in_flight(s) for s in SERVICES)

    def facts(self, keys: set[str]) -> list[CallFact]:
        out = []
        for c in self.services.call_records():
            if c["order"] not in keys:
                continue
            out.append(CallFact(c["service"], c["order"], c["key"], c["at"], c["status"], c["effective"],
                                c["reply_id"], str(c["body"].get("logic", "")), c.get("end", 0.0)))
        return out

    def stop(self) -> None:
        self.services.stop()
