"""The fake providers of a chaos run: e2e/fake_services.py with each case's seeded schedule, read back as facts.

A provider performs a call once per Idempotency-Key (a repeated key replays the stored answer, and a key
still being performed is answered 409, as Stripe does), so the effective call of a side effect is the
first call per (provider, Idempotency-Key). The planted defect
`provider-ignores-keys` makes every call effective, which the oracle's rule 2 must catch.

They also serve each order's document (`GET /documents/<order>`, `sent_document` says what it is), and record
the files a call's multipart form carries, which the oracle's rule 7 compares with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from fake_services import DOCUMENT_MIME, SERVICES, FakeServices, document

from chaos.history import CallFact, SentFile
from chaos.model import ProviderSchedule

# The form field a side effect sends the order's document in (chaos/blocks.py block_upload_call).
DOCUMENT_FIELD = "document"


def sent_document(order: str) -> SentFile:
    """The order's document as a call must carry it: the bytes, file name and type GET /documents/<order> serves."""
    name, data = document(order)
    return SentFile(DOCUMENT_FIELD, name, DOCUMENT_MIME, hashlib.sha256(data).hexdigest(), len(data))


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
            files = tuple(SentFile(f["field"], f["file_name"], f["mime"], f["sha256"], f["size"]) for f in c["files"])
            out.append(CallFact(c["service"], c["order"], c["key"], c["at"], c["status"], c["effective"],
                                c["reply_id"], str(c["body"].get("logic", "")), c.get("end", 0.0), files))
        return out

    def stop(self) -> None:
        self.services.stop()
