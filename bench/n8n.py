"""`python -m bench.n8n`: what durability costs per order inside one real n8n.

One n8n (the pinned 2.41 on Node 24 that `make e2e` installs, on PostgreSQL, with our packed
nodes installed the documented way), one sidecar, one set of fake services (e2e/fake_services.py),
three workflows side by side:

- **plain**: Webhook (answers when the last node finishes) → three HTTP Request calls;
- **durable**: the same, wired as the node README documents it now: Resume Point, then per call
  Idempotency Guard *Claim* → HTTP call → Durable Checkpoint *Save* (completes the key the Claim
  took; *Done Before* goes to the same Save); the last Save has the option *Complete Instance*
  (the instance completed in the save's own call, no separate Complete node);
- **control**: plain plus as many No Operation nodes as *durable* has durable nodes (what n8n's
  engine itself charges for that many more nodes).

Runs are interleaved (round after round, each workflow once per round and concurrency, the order
rotating), closed loop at 1 and 8 concurrent orders. Per workflow and concurrency it reports p50 /
p95 per order, orders/s, CPU per order of n8n (its whole process tree, task runner included), the
sidecar and all PostgreSQL processes (psutil), RPCs per order (the sidecar's Prometheus counter
durable_rpc_total) and the size of n8n's execution record per order (execution_data.data), and the
durable/plain ratios the targets of issue 20 name. `--profile` also runs the durable workflow with
n8n under `node --cpu-prof` and the sidecar under py-spy and summarises both.

The e2e smoke test (e2e/test_bench_n8n_smoke.py) calls `run_workloads` against the e2e stack's
n8n with tiny counts; `make bench` / `make bench-quick` run `main`, which builds its own stack.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import json
import os
import shlex
import statistics
import sys
import threading
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness  # e2e/harness.py (on sys.path through bench/__init__.py): how a real n8n is installed and started
import psutil
import psycopg
from fake_services import FakeServices

from bench.harness_sidecar import harness_sidecar
from bench.infra import OtherLoad, _busy_seconds, _cpu_seconds, _postgres_cpu, describe_code, settle

ROOT = Path(__file__).resolve().parent.parent

CALLS = ("payment", "inventory", "shipping")
# The two intake wirings node-package/README.md documents ("Answer the sender only after the Resume Point"),
# each as a plain workflow and a durable one: `last` answers when the last node finishes (the durable one's
# Finished and Busy outputs go to a No Operation node), `respond` answers from a Respond to Webhook node right
# after the start (the durable one's on the Resume Point's Start output). **control** is plain `last` plus as
# many No Operation nodes as the durable workflow runs durable nodes per order.
INTAKES = {"last": ("plain", "durable"), "respond": ("plain-respond", "durable-respond")}
WORKFLOWS = ("plain", "durable", "control", "plain-respond", "durable-respond")
PATHS = {kind: f"bench-{kind}" for kind in WORKFLOWS}
RESPOND_MODE = {kind: "responseNode" if kind.endswith("-respond") else "lastNode" for kind in WORKFLOWS}
# A workflow answered at its start reports its end to the fake services (POST /route/bench-done): an order is
# measured from its delivery to that report, in the plain and the durable workflow alike.
DONE_ROUTE = "bench-done"
# The newest node versions, as the docs' examples use them (examples/generate.py).
RESUME_POINT, GUARD, CHECKPOINT, TRIGGER = 2.1, 2.1, 2, 1


# --- the workflows -------------------------------------------------------------------------------------


def _node(name: str, type_: str, version: float, params: dict[str, Any], x: int, y: int = 300,
          credential: str | None = None, **extra: Any) -> dict[str, Any]:
    node = {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench-n8n/{name}/{type_}")), "name": name, "type": type_,
            "typeVersion": version, "position": [x, y], "parameters": params, **extra}
    if credential:
        node["credentials"] = {"durableSidecarApi": {"id": credential, "name": "Durable Sidecar"}}
    return node


def _webhook(kind: str) -> dict[str, Any]:
    return _node("Webhook", "n8n-nodes-base.webhook", 2.1,
                 {"httpMethod": "POST", "path": PATHS[kind], "responseMode": RESPOND_MODE[kind], "options": {}}, 0,
                 webhookId=str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench-n8n/webhook/{kind}")))


def _http(service: str, services_url: str, x: int, *, durable: bool = False) -> dict[str, Any]:
    # The same expression in every workflow: the order from the Webhook's item (paired items). A durable call
    # sends the Claim's derived key as its Idempotency-Key, as the README's step 2 says.
    body = ("={{ JSON.stringify({ orderId: $('Webhook').item.json.body.orderId, "
            "amount: $('Webhook').item.json.body.amount }) }}")
    params: dict[str, Any] = {"method": "POST", "url": f"{services_url}/{service}", "sendBody": True,
                              "specifyBody": "json", "jsonBody": body, "options": {}}
    if durable:
        params |= {"sendHeaders": True, "headerParameters": {"parameters": [
            {"name": "Idempotency-Key", "value": "={{ $json.idempotency.derivedKey }}"}]}}
    return _node(f"Call {service}", "n8n-nodes-base.httpRequest", 4.2, params, x)


def _respond(x: int, name: str = "Accepted") -> dict[str, Any]:
    return _node(name, "n8n-nodes-base.respondToWebhook", 1.5, {"respondWith": "noData", "options": {}}, x)


def _done(services_url: str, x: int) -> dict[str, Any]:
    return _node("Report Done", "n8n-nodes-base.httpRequest", 4.2, {
        "method": "POST", "url": f"{services_url}/route/{DONE_ROUTE}", "sendBody": True, "specifyBody": "json",
        "jsonBody": "={{ JSON.stringify({ orderId: $('Webhook').item.json.body.orderId }) }}", "options": {}}, x)


def _chain(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    return {a["name"]: {"main": [[{"node": b["name"], "type": "main", "index": 0}]]} for a, b in itertools.pairwise(nodes)}


def _link(connections: dict[str, Any], source: str, output: int, target: str) -> None:
    outputs = connections.setdefault(source, {"main": []})["main"]
    outputs += [[] for _ in range(output + 1 - len(outputs))]
    outputs[output].append({"node": target, "type": "main", "index": 0})


def _plain(kind: str, services_url: str) -> dict[str, Any]:
    nodes = [_webhook(kind)]
    if RESPOND_MODE[kind] == "responseNode":
        nodes.append(_respond(220))
    nodes += [_http(s, services_url, 220 * (len(nodes) + i)) for i, s in enumerate(CALLS)]
    if RESPOND_MODE[kind] == "responseNode":
        nodes.append(_done(services_url, 220 * len(nodes)))
    return {"name": f"bench: {kind}", "nodes": nodes, "connections": _chain(nodes)}


def _durable(kind: str, services_url: str, credential: str) -> dict[str, Any]:
    """The order as node-package/README.md documents it: Webhook and Resume Trigger into one Resume Point (with a
    step output per side effect but the last), then per call Claim → call → Save (Done Before → the same Save;
    the last Save with Complete Instance); the intake's answer as the README's section on answering says."""
    respond = RESPOND_MODE[kind] == "responseNode"
    step_outputs = ", ".join(CALLS[:-1])
    nodes = [_webhook(kind), _node("Resume Trigger", "n8n-nodes-durable.resumeTrigger", TRIGGER, {}, 0, 500,
                                   credential=credential),
             _node("Resume Point", "n8n-nodes-durable.resumePoint", RESUME_POINT,
                   {"instanceKey": "={{ $json.body.orderId }}", "stepOutputs": step_outputs, "options": {}}, 220,
                   credential=credential)]
    connections: dict[str, Any] = {}
    _link(connections, "Webhook", 0, "Resume Point")
    _link(connections, "Resume Trigger", 0, "Resume Point")
    x, previous = 440, "Resume Point"  # Resume Point output 0: Start
    if respond:
        nodes.append(_respond(x))
        _link(connections, "Resume Point", 0, "Accepted")
        x, previous = x + 220, "Accepted"
    else:
        nodes.append(_node("Already Received", "n8n-nodes-base.noOp", 1, {}, 440, 600))
        _link(connections, "Resume Point", 2, "Already Received")  # Finished
        _link(connections, "Resume Point", 3, "Already Received")  # Busy
    for n, service in enumerate(CALLS, start=1):
        claim = _node(f"Claim {service}", "n8n-nodes-durable.idempotencyGuard", GUARD,
                      {"operation": "claim", "scope": service, "options": {}}, x, credential=credential)
        call = _http(service, services_url, x + 220, durable=True)
        # The last Save completes the instance in its own SaveCheckpoints call (option Complete Instance).
        options = {"completeInstance": True} if n == len(CALLS) else {}
        save = _node(f"Save {service}", "n8n-nodes-durable.durableCheckpoint", CHECKPOINT,
                     {"operation": "save", "stepName": service, "options": options}, x + 440, credential=credential)
        nodes += [claim, call, save]
        _link(connections, previous, 0, claim["name"])
        # Resume Point: 1 Resume (nothing saved yet) → the first Claim; step output n-1 → the Claim after it.
        _link(connections, "Resume Point", 1 if n == 1 else 4 + n - 2, claim["name"])
        _link(connections, claim["name"], 0, call["name"])   # First Run
        _link(connections, claim["name"], 1, save["name"])   # Done Before → the same Save
        _link(connections, call["name"], 0, save["name"])
        previous, x = save["name"], x + 660
    if respond:
        done = _done(services_url, x)
        nodes.append(done)
        _link(connections, previous, 0, done["name"])
        # The door (README "The door"): the Resume Point's error output into Not Accepted (the item's
        # details.httpStatus) and Stop and Error, as the examples wire it. It runs for no good order; the Resume
        # Point still claims ahead beside it.
        next(n for n in nodes if n["name"] == "Resume Point")["onError"] = "continueErrorOutput"
        nodes += [_node("Not Accepted", "n8n-nodes-base.respondToWebhook", 1.5, {
                      "respondWith": "json",
                      "responseBody": "={{ JSON.stringify({ error: $json.error, status: $json.details.httpStatus }) }}",
                      "options": {"responseCode": "={{ $json.details.httpStatus }}"}}, 440, 700),
                  _node("Fail Execution", "n8n-nodes-base.stopAndError", 1, {"errorMessage": "={{ $json.error }}"},
                        660, 700)]
        # Its outputs: Start, Resume, Finished, Busy, a step output per call but the last, then the error output.
        _link(connections, "Resume Point", 4 + len(CALLS) - 1, "Not Accepted")
        _link(connections, "Not Accepted", 0, "Fail Execution")
    return {"name": f"bench: {kind}", "nodes": nodes, "connections": connections}


def workflows(services_url: str, credential: str) -> dict[str, dict[str, Any]]:
    """Every workflow of the bench by kind (n8n workflow JSON, not yet saved)."""
    out: dict[str, dict[str, Any]] = {}
    for plain, durable in INTAKES.values():
        out[plain] = _plain(plain, services_url)
        out[durable] = _durable(durable, services_url, credential)
    durable_nodes = durable_node_count(out["durable"])
    control = [_webhook("control")]
    x = 220
    for i, service in enumerate(CALLS):
        # Spread the No Operation nodes as the durable nodes are: before, around and after each call.
        per_call = durable_nodes // len(CALLS) + (1 if i < durable_nodes % len(CALLS) else 0)
        for j in range(per_call):
            control.append(_node(f"NoOp {service} {j + 1}", "n8n-nodes-base.noOp", 1, {}, x))
            x += 220
        control.append(_http(service, services_url, x))
        x += 220
    out["control"] = {"name": "bench: control", "nodes": control, "connections": _chain(control)}
    for wf in out.values():
        wf["settings"] = {"executionOrder": "v1"}
    return {kind: out[kind] for kind in WORKFLOWS}


def durable_node_count(workflow: dict[str, Any]) -> int:
    """The durable nodes an order runs through (the Resume Trigger runs only to resume one)."""
    return sum(1 for n in workflow["nodes"]
               if n["type"].startswith("n8n-nodes-durable.") and n["type"] != "n8n-nodes-durable.resumeTrigger")


# --- measuring ----------------------------------------------------------------------------------------


def _tree_cpu(pid: int) -> dict[int, float]:
    out: dict[int, float] = {}
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                out[p.pid] = _cpu_seconds(p)
    return out


def _delta(start: dict[int, float], end: dict[int, float]) -> float:
    return sum(max(0.0, cpu - start.get(pid, 0.0)) for pid, cpu in end.items())


# The process's own calls, not an order's: its session (one heartbeat a second whatever the load) and the Resume
# Trigger's stream (counted when it ends).
PROCESS_METHODS = frozenset({"OpenSession", "Heartbeat", "WatchSession", "CloseSession", "WatchResumable"})


def rpc_counts(metrics_url: str | None) -> dict[str, float] | None:
    """durable_rpc_total by method, over all status codes (health checks are not counted there)."""
    if not metrics_url:
        return None
    with urllib.request.urlopen(metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        if line.startswith("durable_rpc_total{"):
            labels, value = line[len("durable_rpc_total{"):].rsplit("} ", 1)
            method = next((part.split("=", 1)[1].strip('"') for part in labels.split(",")
                           if part.startswith("method=")), "")
            out[method] += float(value)
    return dict(out)


def rpc_total(metrics_url: str | None) -> float | None:
    """Sum of durable_rpc_total over all methods and codes."""
    counts = rpc_counts(metrics_url)
    return None if counts is None else sum(counts.values())


@dataclass
class Cell:
    """Everything measured for one workflow at one concurrency in one round."""

    latencies_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    orders: int = 0
    errors: int = 0
    first_error: str = ""
    cpu_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # The order's RPCs by method (the process's own, PROCESS_METHODS, counted apart).
    rpcs: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    rpcs_known: bool = True
    others_s: float = 0.0

    def add(self, other: Cell) -> None:
        self.latencies_ms += other.latencies_ms
        self.wall_s += other.wall_s
        self.orders += other.orders
        self.errors += other.errors
        self.first_error = self.first_error or other.first_error
        for k, v in other.cpu_s.items():
            self.cpu_s[k] += v
        for k, v in other.rpcs.items():
            self.rpcs[k] += v
        self.rpcs_known = self.rpcs_known and other.rpcs_known
        self.others_s += other.others_s

    @property
    def p50_ms(self) -> float | None:
        return statistics.median(self.latencies_ms) if self.latencies_ms else None

    @property
    def orders_per_s(self) -> float | None:
        return self.orders / self.wall_s if self.wall_s else None

    def order_rpcs(self) -> float:
        return sum(v for k, v in self.rpcs.items() if k not in PROCESS_METHODS)


@dataclass
class Target:
    """Where the load goes: a running n8n, the sidecar's pid and metrics, the PostgreSQL database of n8n, and
    the fake services (an order answered at its start is over when it reports to them)."""

    n8n_url: str
    n8n_pid: int
    sidecar_pid: int
    n8n_database_url: str
    metrics_url: str | None
    services: FakeServices | None = None


def _post(url: str, body: dict[str, Any], timeout: float = 60) -> tuple[int, bytes]:
    return harness.http("POST", url, body, timeout=timeout)


def window(target: Target, kind: str, concurrency: int, orders: int, cell: Cell | None) -> None:
    """`orders` orders of one workflow, `concurrency` closed-loop workers; measured into `cell` (None: warm-up).
    An order answered at its start (RESPOND_MODE responseNode) is measured until it reports its end."""
    url = f"{target.n8n_url}/webhook/{PATHS[kind]}"
    answered_early = RESPOND_MODE[kind] == "responseNode"
    if answered_early and target.services is None:
        raise ValueError(f"{kind} answers at its start: the bench needs the fake services to see its end")
    lock = threading.Lock()
    left = [orders]
    latencies: list[float] = []
    errors: list[str] = []

    def worker() -> None:
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            order = f"{kind}-{uuid.uuid4().hex[:12]}"
            t0 = time.perf_counter()
            status, reply = _post(url, {"orderId": order, "amount": 42.0, "email": f"{order}@example.com"})
            if status == 200 and answered_early:
                assert target.services is not None
                if not target.services.wait_route(DONE_ROUTE, order, timeout=60):
                    status, reply = 0, b"answered, but its end was not reported within 60 s"
            elapsed = (time.perf_counter() - t0) * 1000
            with lock:
                if status == 200:
                    latencies.append(elapsed)
                else:
                    errors.append(f"HTTP {status}: {reply[:300]!r}")

    n8n0, side0, pg0 = _tree_cpu(target.n8n_pid), _tree_cpu(target.sidecar_pid), _postgres_cpu()
    busy0, me0 = _busy_seconds(), _tree_cpu(os.getpid())
    rpc0 = rpc_counts(target.metrics_url)
    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    n8n = _delta(n8n0, _tree_cpu(target.n8n_pid))
    side = _delta(side0, _tree_cpu(target.sidecar_pid))
    pg = _delta(pg0, _postgres_cpu())
    me = _delta(me0, _tree_cpu(os.getpid()))
    busy = _busy_seconds() - busy0
    rpc1 = rpc_counts(target.metrics_url)
    if cell is None:
        if errors:
            raise RuntimeError(f"warm-up of {kind}: {len(errors)} of {orders} orders failed, first: {errors[0]}")
        return
    cell.latencies_ms += latencies
    cell.wall_s += wall
    cell.orders += len(latencies)
    cell.errors += len(errors)
    if errors and not cell.first_error:
        cell.first_error = errors[0]
    cell.cpu_s["n8n"] += n8n
    cell.cpu_s["sidecar"] += side
    cell.cpu_s["postgres"] += pg
    cell.cpu_s["load generator"] += me
    cell.others_s += max(0.0, busy - n8n - side - pg - me)
    if rpc0 is None or rpc1 is None:
        cell.rpcs_known = False
    else:
        for method, n in rpc1.items():
            if n - rpc0.get(method, 0.0):
                cell.rpcs[method] += n - rpc0.get(method, 0.0)


def execution_sizes(database_url: str, workflow_ids: dict[str, str]) -> dict[str, dict[str, float]]:
    """Per workflow: executions saved and the mean size of their execution_data.data (n8n's run record)."""
    out: dict[str, dict[str, float]] = {}
    with psycopg.connect(database_url) as conn:
        for kind, wid in workflow_ids.items():
            row = conn.execute(
                'SELECT count(*), avg(octet_length(d.data)), avg(pg_column_size(d.data)) '
                'FROM execution_entity e JOIN execution_data d ON d."executionId" = e.id '
                'WHERE e."workflowId" = %s AND e.status = %s', (wid, "success")).fetchone()
            if row and row[0]:
                out[kind] = {"executions": int(row[0]), "data_bytes": round(float(row[1]), 0),
                             "stored_bytes": round(float(row[2]), 0)}
    return out


def dump_records(database_url: str, workflow_ids: dict[str, str], out: Path) -> None:
    """One successful execution's record per workflow (execution_data.data, n8n's flatted JSON), for reading."""
    with psycopg.connect(database_url) as conn:
        for kind, wid in workflow_ids.items():
            row = conn.execute(
                'SELECT d.data FROM execution_entity e JOIN execution_data d ON d."executionId" = e.id '
                'WHERE e."workflowId" = %s AND e.status = %s ORDER BY e.id DESC LIMIT 1', (wid, "success")).fetchone()
            if row:
                (out / f"n8n-record-{kind}.json").write_text(str(row[0]))


@dataclass
class Plan:
    concurrency: list[int]
    rounds: int
    orders: dict[int, int]  # orders per window, by concurrency
    warmup: int
    # infra.settle after the warm-up (full runs): the sidecar part's write-back is not measured here.
    settle: bool = False


QUICK = Plan([1, 8], rounds=2, orders={1: 10, 8: 24}, warmup=5)
FULL = Plan([1, 8], rounds=5, orders={1: 60, 8: 200}, warmup=20, settle=True)
SMOKE = Plan([1, 8], rounds=1, orders={1: 2, 8: 8}, warmup=1)


def create_workflows(n8n: harness.N8n, api_key: str, services_url: str, credential: str) -> dict[str, str]:
    """Creates and publishes the three workflows through n8n's public API; their ids by kind."""
    ids = {}
    for kind, wf in workflows(services_url, credential).items():
        status, reply = harness.http("POST", f"{n8n.url}/api/v1/workflows", wf,
                                     headers={"X-N8N-API-KEY": api_key}, timeout=60)
        if status != 200:
            raise RuntimeError(f"creating the {kind} workflow: HTTP {status}: {reply[:2000]!r}")
        wid = json.loads(reply)["id"]
        status, reply = harness.http("POST", f"{n8n.url}/api/v1/workflows/{wid}/activate", {},
                                     headers={"X-N8N-API-KEY": api_key}, timeout=60)
        if status != 200:
            raise RuntimeError(f"publishing the {kind} workflow: HTTP {status}: {reply[:2000]!r}")
        ids[kind] = wid
    for kind in ids:
        n8n.wait_webhook(PATHS[kind])
    return ids


def run_workloads(target: Target, plan: Plan, workflow_ids: dict[str, str],
                  log: Any = print) -> dict[str, Any]:
    """Warm-up, then the interleaved rounds (the order of the workflows rotating each round); the rows (one per
    workflow and concurrency, every round pooled) and each round's durable/plain ratios per intake."""
    for kind in WORKFLOWS:
        window(target, kind, 1, plan.warmup, None)
    if plan.settle:
        log(f"  settled: {settle()}")
    per_round = [{(k, c): Cell() for k in WORKFLOWS for c in plan.concurrency} for _ in range(plan.rounds)]
    sizes_before = execution_sizes(target.n8n_database_url, workflow_ids)
    for r, cells in enumerate(per_round):
        for c in plan.concurrency:
            turn = r % len(WORKFLOWS)
            for kind in WORKFLOWS[turn:] + WORKFLOWS[:turn]:
                window(target, kind, c, plan.orders[c], cells[(kind, c)])
        log(f"  round {r + 1}/{plan.rounds}: " + ", ".join(
            f"{intake} p50 ×{_ratio(cells, d, p, 1, 'p50')}, c8 {_ratio(cells, d, p, 8, 'tput')}"
            for intake, (p, d) in INTAKES.items()))
    sizes = execution_sizes(target.n8n_database_url, workflow_ids)
    rows = []
    for kind in WORKFLOWS:
        for c in plan.concurrency:
            cell = Cell()
            for cells in per_round:
                cell.add(cells[(kind, c)])
            n = max(1, cell.orders)
            lat = sorted(cell.latencies_ms)
            row = {
                "workflow": kind, "concurrency": c, "orders": cell.orders, "errors": cell.errors,
                "first_error": cell.first_error,
                "p50_ms": round(statistics.median(lat), 2) if lat else None,
                "p95_ms": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 2) if lat else None,
                "orders_per_s": round(cell.orders / cell.wall_s, 2) if cell.wall_s else None,
                "cpu_ms_per_order": {k: round(v * 1000 / n, 2) for k, v in cell.cpu_s.items()},
                "others_cpu_ms_per_order": round(cell.others_s * 1000 / n, 2),
                "rpcs_per_order": round(cell.order_rpcs() / n, 2) if cell.rpcs_known else None,
                "rpcs_by_method": {m: round(v / n, 2) for m, v in sorted(cell.rpcs.items())} if cell.rpcs_known else None,
                "execution_data_bytes": (sizes.get(kind) or sizes_before.get(kind) or {}).get("data_bytes"),
            }
            rows.append(row)
            log(f"  {kind:<15} c{c:<2} p50 {row['p50_ms']} ms  p95 {row['p95_ms']} ms  {row['orders_per_s']} orders/s  "
                f"n8n {row['cpu_ms_per_order'].get('n8n')} ms CPU/order  RPCs {row['rpcs_per_order']}  "
                f"record {row['execution_data_bytes']} B  errors {cell.errors}")
    rounds = [{intake: {"p50_ratio_c1": _ratio(cells, d, p, 1, "p50"), "throughput_share_c8": _ratio(cells, d, p, 8, "tput")}
               for intake, (p, d) in INTAKES.items()} for cells in per_round]
    return {"rows": rows, "rounds": rounds}


def _ratio(cells: dict[tuple[str, int], Cell], durable: str, plain: str, c: int, what: str) -> float | None:
    """One round's durable/plain p50 (what="p50") or durable/plain orders per second (what="tput")."""
    d, p = cells.get((durable, c)), cells.get((plain, c))
    if d is None or p is None:
        return None
    a, b = (d.p50_ms, p.p50_ms) if what == "p50" else (d.orders_per_s, p.orders_per_s)
    return round(a / b, 3) if a and b else None


def ratios(rows: list[dict[str, Any]], durable_nodes: int, rounds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The figures the targets name: per intake, the median over the rounds of each round's durable/plain ratio
    (without rounds: the ratio of the pooled rows), and the order's RPCs; n8n's CPU per durable node."""
    by = {(r["workflow"], r["concurrency"]): r for r in rows}

    def get(kind: str, c: int, key: str) -> float | None:
        row = by.get((kind, c))
        return None if row is None else row.get(key)

    def cpu(kind: str, c: int, who: str = "n8n") -> float | None:
        row = by.get((kind, c))
        return None if row is None else row["cpu_ms_per_order"].get(who)

    out: dict[str, Any] = {"durable_nodes": durable_nodes, "intakes": {}}
    for intake, (plain, durable) in INTAKES.items():
        figures: dict[str, Any] = {}
        for key, c, field_ in (("p50_ratio_c1", 1, "p50_ms"), ("throughput_share_c8", 8, "orders_per_s")):
            per_round = [r[intake][key] for r in rounds or [] if r.get(intake, {}).get(key) is not None]
            if per_round:
                figures[key] = round(statistics.median(per_round), 3)
                figures[f"{key}_rounds"] = per_round
            else:
                a, b = get(durable, c, field_), get(plain, c, field_)
                figures[key] = round(a / b, 3) if a and b else None
        figures["rpcs_per_order"] = get(durable, 1, "rpcs_per_order")
        figures["rpcs_by_method"] = get(durable, 1, "rpcs_by_method")
        out["intakes"][intake] = figures
    # The figures of issue 20, on the `last` intake (kept under their old names).
    out["p50_ratio_c1"] = out["intakes"]["last"]["p50_ratio_c1"]
    out["throughput_share_c8"] = out["intakes"]["last"]["throughput_share_c8"]
    for c in (1, 8):
        a, b, k = cpu("plain", c), cpu("durable", c), cpu("control", c)
        if a is not None and b is not None and k is not None and durable_nodes:
            out[f"n8n_cpu_ms_per_durable_node_c{c}"] = round((b - a) / durable_nodes, 3)
            out[f"n8n_cpu_ms_per_noop_node_c{c}"] = round((k - a) / durable_nodes, 3)
        for who in ("n8n", "sidecar", "postgres"):
            a, b = cpu("plain", c, who), cpu("durable", c, who)
            if a is not None and b is not None:
                out[f"extra_cpu_ms_per_order_{who}_c{c}"] = round(b - a, 2)
    return out


# --- the stack main() builds --------------------------------------------------------------------------


@contextlib.contextmanager
def stack(work: Path, n8n_env: dict[str, str] | None = None) -> Iterator[tuple[harness.N8n, harness.Sidecar,
                                                                                 FakeServices, Target]]:
    package_dir = Path(os.environ.get("DURABLE_E2E_PACKAGE_DIR", str(ROOT / "node-package")))
    metrics_port = harness.free_port()
    # Each piece is undone as soon as it exists (in reverse order), so a failure while starting the next
    # leaves no throwaway database or server behind.
    with harness_sidecar(work, "durable_bench_n8n", metrics_port=metrics_port) as sidecar, \
            contextlib.ExitStack() as undo:
        n8n_db = harness.create_db("n8n_bench")
        undo.callback(harness.drop_db, n8n_db)
        services = FakeServices().start()  # stop() waits for the serving thread: only once it runs
        undo.callback(services.stop)
        n8n = harness.N8n(work, n8n_db, package_dir, extra_env={"N8N_LOG_LEVEL": "error", **(n8n_env or {})})
        undo.callback(n8n.stop_all)
        harness.import_credential(n8n, sidecar, credential_id="durableSidecarBench")
        main = n8n.start_main()
        assert main.proc is not None and sidecar.process.proc is not None
        target = Target(n8n.url, main.proc.pid, sidecar.process.proc.pid, harness.db_url(n8n_db),
                        f"http://127.0.0.1:{metrics_port}/metrics", services)
        yield n8n, sidecar, services, target


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.n8n", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="two short rounds (bench-quick); docs untouched")
    p.add_argument("--smoke", action="store_true", help="one tiny round (CI: only that it runs)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 5, quick 2)")
    p.add_argument("--orders", help="orders per window at c1,c8 (default 60,200; quick 10,24)")
    p.add_argument("--profile", action="store_true",
                   help="also profile the durable workflow: n8n with node --cpu-prof, the sidecar with py-spy")
    p.add_argument("--out", type=Path, help="results directory (default bench/results/<time>-n8n)")
    p.add_argument("--docs", type=Path, help="also write n8n-summary.md and n8n-chart.png here (not with --quick)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from bench import n8n_report

    args = parse_args(argv)
    base = SMOKE if args.smoke else QUICK if args.quick else FULL
    plan = Plan(base.concurrency, args.rounds or base.rounds,
                dict(zip(base.concurrency, map(int, args.orders.split(",")), strict=False)) if args.orders else base.orders,
                base.warmup, base.settle)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or ROOT / "bench" / "results" / (stamp + "-n8n" + ("-quick" if args.quick or args.smoke else ""))
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m bench.n8n " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    print(f"bench.n8n: results in {out}", flush=True)
    started = dt.datetime.now(dt.UTC)
    other = OtherLoad()
    t0 = time.monotonic()
    profiles: dict[str, Any] = {}
    with harness.work_dir() as work, stack(work) as (n8n, _sidecar, services, target):
        version = n8n.env.get("N8N_E2E_VERSION", "")
        print(f"== [{time.monotonic() - t0:6.1f} s] n8n {version} ready at {n8n.url}",
              flush=True)
        api_key = n8n.create_api_key("bench")
        ids = create_workflows(n8n, api_key, services.url, "durableSidecarBench")
        nodes = durable_node_count(workflows(services.url, "x")["durable"])
        print(f"== [{time.monotonic() - t0:6.1f} s] workflows published; interleaved runs at c"
              f"{','.join(map(str, plan.concurrency))}", flush=True)
        result = run_workloads(target, plan, ids)
        dump_records(target.n8n_database_url, ids, out)
        if args.profile:
            from bench import n8n_profile

            print(f"== [{time.monotonic() - t0:6.1f} s] profiling the durable workflow", flush=True)
            profiles = n8n_profile.profile(n8n, target, out, orders=plan.orders[1] * 2)
    # The nodes' RPC client measured whole, in Node 24 without n8n, once n8n has stopped (bench/n8n_client.py).
    from bench import n8n_client

    quick = bool(args.quick or args.smoke)
    print(f"== [{time.monotonic() - t0:6.1f} s] the nodes' RPC client, measured whole", flush=True)
    client = n8n_client.run(orders=5 if quick else 100, gaps_ms=[15.0] if quick else [0.0, 15.0],
                            rounds=1 if quick else 3)
    finished = dt.datetime.now(dt.UTC)
    data = {
        "meta": {"command": command, "started": started.isoformat(timespec="seconds"),
                 "finished": finished.isoformat(timespec="seconds"), "plan": plan.__dict__,
                 "n8n": version, "other_load": other.report(),
                 "code": describe_code(ROOT), "quick": quick},
        "rows": result["rows"],
        "ratios": ratios(result["rows"], nodes, result["rounds"]),
        "rounds": result["rounds"],
        "profiles": profiles,
        "client": client,
    }
    (out / "n8n-results.json").write_text(json.dumps(data, indent=1))
    docs = None if quick else args.docs
    n8n_report.write(data, out, docs)
    print(f"== [{time.monotonic() - t0:6.1f} s] done: {out / 'n8n-summary.md'}"
          + (f" and {docs}/n8n-summary.md" if docs else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
