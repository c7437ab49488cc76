"""`python -m bench.files`: a 10 MB file saved with a checkpoint and restored (issue 45), against a raw INSERT
of the same bytes into PostgreSQL in the same run, and the sidecar's peak memory at 16 concurrent 10 MB saves.

The sidecar runs as e2e/harness.py starts it (PostgreSQL, Redis, defaults) on a throwaway database. In
`--rounds` interleaved rounds, each of `--reps` calls:

- the floor: one autocommit INSERT of the file's bytes into a bytea column (psycopg, binary), p50;
- save: what a Save node does for a new file: StatFiles, UploadFile (1 MiB chunks), SaveCheckpoints naming it;
- restore: what a resume does: ListCheckpointFiles, then DownloadFile of the whole content.

Each save uploads a content never seen (random bytes), so it is written, not deduplicated. Reported: the
median over the rounds of each round's p50, and save and restore as ratios to the floor.

Memory: a freshly started sidecar, 16 saves of distinct 10 MB files at once (16 threads); its resident set
sampled every 5 ms; held against the bound the 10 MB state saves have (`make bench`): under 4 × the bytes in
flight + 150 MB.

Writes bench/results/files-<time>.json and, with --docs, docs/bench/files.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import harness  # e2e/harness.py, on sys.path through bench/__init__.py
import psycopg
from durable.v1 import (
    checkpoint_pb2,
    checkpoint_pb2_grpc,
    common_pb2,
    files_pb2,
    files_pb2_grpc,
    instance_pb2,
    instance_pb2_grpc,
)

from bench.harness_sidecar import harness_sidecar
from bench.infra import RssSampler

ROOT = Path(__file__).resolve().parent.parent
WF = "wf-bench-files"
MIB = 1024 * 1024
SIZE = 10 * MIB
CONCURRENT = 16


def _upload_parts(data: bytes, digest: str) -> Any:
    yield files_pb2.UploadFileRequest(header=files_pb2.UploadFileHeader(sha256=digest, size_bytes=len(data)))
    for at in range(0, len(data), MIB):
        yield files_pb2.UploadFileRequest(chunk=data[at:at + MIB])


class Client:
    def __init__(self, port: int, md: Any) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[
            ("grpc.max_receive_message_length", 64 * MIB), ("grpc.max_send_message_length", 64 * MIB)])
        self.md = md
        self.files = files_pb2_grpc.FileServiceStub(self.channel)
        self.instances = instance_pb2_grpc.InstanceServiceStub(self.channel)
        self.checkpoints = checkpoint_pb2_grpc.CheckpointServiceStub(self.channel)

    def start(self, key: str) -> None:
        self.instances.StartOrResume(instance_pb2.StartOrResumeRequest(workflow_id=WF, instance_key=key,
                                                                       execution_id="bench"), metadata=self.md,
                                     timeout=30)

    def save(self, key: str, step: str, data: bytes) -> None:
        """As the Save node: which contents are held, the upload of the others, the save that names them."""
        digest = hashlib.sha256(data).hexdigest()
        held = self.files.StatFiles(files_pb2.StatFilesRequest(sha256=[digest]), metadata=self.md, timeout=30)
        if digest not in held.present:
            self.files.UploadFile(_upload_parts(data, digest), metadata=self.md, timeout=120)
        self.checkpoints.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[
            checkpoint_pb2.SaveCheckpointItem(
                workflow_id=WF, instance_key=key, step_name=step, state_json=b'{"document": "scan"}',
                execution_id="bench", files=[common_pb2.FileRef(property="data", file_name="scan.pdf",
                                                                mime_type="application/pdf", sha256=digest,
                                                                size_bytes=len(data))])]),
            metadata=self.md, timeout=30)

    def restore(self, key: str) -> int:
        """As a resume: the newest checkpoint's files, each downloaded whole; the bytes received."""
        listed = self.files.ListCheckpointFiles(files_pb2.ListCheckpointFilesRequest(workflow_id=WF,
                                                                                    instance_key=key),
                                                metadata=self.md, timeout=30)
        got = 0
        for ref in listed.files:
            for part in self.files.DownloadFile(files_pb2.DownloadFileRequest(sha256=ref.sha256), metadata=self.md,
                                                timeout=120):
                got += len(part.chunk)
        return got


def _p50(samples: list[float]) -> float:
    return statistics.median(samples)


def one_round(client: Client, url: str, reps: int, r: int) -> dict[str, Any]:
    insert_ms, save_ms, restore_ms = [], [], []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_raw_files (id bigserial PRIMARY KEY, data bytea NOT NULL)")
        conn.execute("ALTER TABLE bench_raw_files ALTER COLUMN data SET STORAGE EXTERNAL")
        for i in range(reps):
            data = os.urandom(SIZE)
            t0 = time.perf_counter()
            conn.execute("INSERT INTO bench_raw_files (data) VALUES (%b)", (data,))
            insert_ms.append((time.perf_counter() - t0) * 1000)
            key = f"doc-{r}-{i}"
            client.start(key)
            t0 = time.perf_counter()
            client.save(key, "downloaded", data)
            save_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            got = client.restore(key)
            restore_ms.append((time.perf_counter() - t0) * 1000)
            assert got == SIZE, got
        conn.execute("TRUNCATE bench_raw_files")
    insert, save, restore = _p50(insert_ms), _p50(save_ms), _p50(restore_ms)
    return {"round": r + 1, "insert_p50_ms": round(insert, 1), "save_p50_ms": round(save, 1),
            "restore_p50_ms": round(restore, 1), "save_over_insert": round(save / insert, 2),
            "restore_over_insert": round(restore / insert, 2)}


def concurrent_peak(work: Path) -> dict[str, Any]:
    """A fresh sidecar; 16 distinct 10 MB saves at once; its peak resident set against the bound."""
    with harness_sidecar(work, "durable_bench_files_rss") as sidecar:
        assert sidecar.process.proc is not None
        client = Client(sidecar.port, sidecar.md)
        keys = [f"rss-{n}" for n in range(CONCURRENT)]
        for key in keys:
            client.start(key)
        blobs = [os.urandom(SIZE) for _ in keys]
        errors: list[BaseException] = []

        def save(n: int) -> None:
            try:
                Client(sidecar.port, sidecar.md).save(keys[n], "downloaded", blobs[n])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        with RssSampler(sidecar.process.proc.pid) as rss:
            before = rss.rss()
            threads = [threading.Thread(target=save, args=(n,)) for n in range(CONCURRENT)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - t0
            peak = rss.peak()
        assert not errors, errors
    limit = 4 * CONCURRENT * SIZE + 150 * MIB
    return {"concurrent": CONCURRENT, "file_mb": SIZE // MIB, "rss_before_mb": round(before / MIB),
            "peak_rss_mb": round(peak / MIB), "limit_mb": round(limit / MIB), "met": peak < limit,
            "seconds": round(elapsed, 2)}


def run(rounds: int, reps: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with harness.work_dir() as work:
        with harness_sidecar(work, "durable_bench_files") as sidecar:
            client = Client(sidecar.port, sidecar.md)
            url = harness.db_url(sidecar.database)
            for r in range(rounds):
                rows.append(one_round(client, url, reps, r))
            client.channel.close()
        memory = concurrent_peak(work)
    med = {k: statistics.median(x[k] for x in rows) for k in ("insert_p50_ms", "save_p50_ms", "restore_p50_ms",
                                                               "save_over_insert", "restore_over_insert")}
    return {"file_mb": SIZE // MIB, "rounds": rounds, "reps": reps, "rows": rows,
            **{k: round(v, 2) for k, v in med.items()}, "memory": memory}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.files", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the median is reported)")
    p.add_argument("--reps", type=int, default=7, help="calls of each kind per round (their p50)")
    p.add_argument("--quick", action="store_true", help="1 round of 3 (a smoke run)")
    p.add_argument("--docs", type=Path, help="also write files.json into this folder (docs/bench)")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.reps = 1, 3
    result = run(args.rounds, args.reps)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2) + "\n"
    (out / f"files-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(text)
    if args.docs:
        (args.docs / "files.json").write_text(text)
    m = result["memory"]
    print(f"10 MB file: save p50 {result['save_p50_ms']} ms ({result['save_over_insert']}x a raw INSERT of the same "
          f"bytes, {result['insert_p50_ms']} ms), restore p50 {result['restore_p50_ms']} ms "
          f"({result['restore_over_insert']}x) (median of {args.rounds} rounds); {m['concurrent']} concurrent "
          f"10 MB saves: sidecar peak RSS {m['peak_rss_mb']} MB, bound {m['limit_mb']} MB: "
          f"{'met' if m['met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
