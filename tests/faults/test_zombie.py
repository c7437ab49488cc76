"""A holder frozen (SIGSTOP) past its lease is taken over; thawed (SIGCONT), its completion is refused."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap

from durable.v1 import idempotency_pb2 as pb

from tests.conftest import Harness
from tests.faults.report import TALLY
from tests.sidecar.test_checkpoints import new_key

ZOMBIE = textwrap.dedent("""
    import json, sys, grpc
    from durable.v1 import idempotency_pb2 as pb, idempotency_pb2_grpc as rpc
    port, token, key = sys.argv[1], sys.argv[2], sys.argv[3]
    md = (("authorization", "Bearer " + token),)
    with grpc.insecure_channel("127.0.0.1:" + port) as ch:
        stub = rpc.IdempotencyServiceStub(ch)
        got = stub.Claim(pb.ClaimRequest(items=[pb.ClaimItem(scope="payment", key=key, payload_json=b'{"amount": 5}',
                                                              lease_seconds=1, holder="exec-zombie")]), metadata=md)
        attempt = got.results[0].key.attempt
        print(json.dumps({"outcome": got.results[0].outcome, "attempt": attempt}), flush=True)
        sys.stdin.readline()  # frozen here by SIGSTOP; continues after SIGCONT and "go"
        try:
            stub.Complete(pb.CompleteRequest(scope="payment", key=key, attempt=attempt,
                                             result_json=b'{"charge": "zombie"}'), metadata=md)
            print(json.dumps({"complete": "OK"}), flush=True)
        except grpc.RpcError as exc:
            print(json.dumps({"complete": exc.code().name}), flush=True)
""")


async def test_zombie_holder_thawed_after_takeover_cannot_complete(harness: Harness) -> None:
    s = harness.alpha
    key = new_key()
    zombie = subprocess.Popen([sys.executable, "-c", ZOMBIE, str(harness.sidecar.port), s.token, key],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert zombie.stdout is not None and zombie.stdin is not None
        out = zombie.stdout
        # Read off the event loop: the sidecar serving the zombie runs on this loop.
        first = json.loads(await asyncio.to_thread(out.readline))
        assert first == {"outcome": pb.CLAIM_OUTCOME_ACQUIRED, "attempt": 1}
        zombie.send_signal(signal.SIGSTOP)
        # Poll until the 1 s lease lapses and the key is taken over (never a fixed sleep).
        while True:
            taken = (await s.idempotency.Claim(pb.ClaimRequest(items=[pb.ClaimItem(
                scope="payment", key=key, payload_json=b'{"amount": 5}', holder="exec-new")]),
                metadata=s.metadata)).results[0]
            if taken.outcome == pb.CLAIM_OUTCOME_ACQUIRED:
                break
            assert taken.outcome == pb.CLAIM_OUTCOME_IN_PROGRESS
        assert taken.key.attempt == 2
        await s.idempotency.Complete(pb.CompleteRequest(scope="payment", key=key, attempt=2,
                                                        result_json=b'{"charge": "new"}'), metadata=s.metadata)
        zombie.send_signal(signal.SIGCONT)
        zombie.stdin.write("go\n")
        zombie.stdin.flush()
        assert json.loads(await asyncio.to_thread(out.readline)) == {"complete": "ABORTED"}
        final = await s.idempotency.GetKey(pb.GetKeyRequest(scope="payment", key=key), metadata=s.metadata)
        assert final.key.result_json == b'{"charge": "new"}' and final.key.attempt == 2
        TALLY.add("zombie holder SIGSTOP/SIGCONT", faults=1, operations=4)
    finally:
        zombie.kill()
        zombie.wait(timeout=10)
