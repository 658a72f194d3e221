"""`ctxfst serve` latency over HTTP with concurrent clients, on a generated build.

    .venv/bin/python benchmarks/serve_speed.py [--docs 10000] [--clients 4] [--requests 200]
        [--workers 1] [--mode graph] [--model hash-256] [--project DIR]

Generates a mock knowledge base (7 chunks a document: 10,000 documents are 70,000
chunks), builds it, starts `ctxfst serve` on a free port, then runs --clients threads,
each with its own keep-alive connection sending --requests queries (a bounded loop),
and prints the latency percentiles and the throughput.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ctxfst.mock import generate
from ctxfst.pipeline.runner import run_build

QUERIES = ["latency of the queue worker", "Kubernetes rollout with retry budget",
           "PostgreSQL index migration", "Go gRPC service under load", "vector search cache",
           "Telegram Bot API webhook", "部署 延遲 快取", "React and TypeScript tests",
           "event sourcing with Redis", "observability metrics and alerts"]


def start_server(root: Path, workers: int) -> tuple[subprocess.Popen, int]:
    server = subprocess.Popen([sys.executable, "-m", "ctxfst", "serve", "--port", "0",
                               "--workers", str(workers)],
                              cwd=root, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    assert server.stderr is not None
    while time.monotonic() < deadline:
        line = server.stderr.readline()
        if not line:
            sys.exit(f"the server stopped (exit {server.wait()})")
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if found:
            threading.Thread(target=server.stderr.read, daemon=True).start()  # drain it
            return server, int(found.group(1))
    server.kill()
    sys.exit("the server did not start in 300 s")


def client(port: int, mode: str, count: int, offset: int, times: list[float],
           start: threading.Barrier | None = None) -> None:
    """`count` timed queries on one keep-alive connection, after `WARM_UP` untimed ones
    (a worker's first requests touch cold pages) and, with `start`, a wait for the
    other clients."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for number in range(-WARM_UP, count):
        if number == 0 and start is not None:
            start.wait()
        body = json.dumps({"text": QUERIES[(offset + number) % len(QUERIES)], "mode": mode,
                           "top_k": 10})
        started = time.perf_counter()
        connection.request("POST", "/query", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
        if number >= 0:
            times.append(time.perf_counter() - started)
        if response.status != 200:
            sys.exit(f"query failed ({response.status}): {payload[:300]!r}")
    connection.close()


WARM_UP = 10


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and its children still running (Linux /proc; 0 elsewhere)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(entry.name) == pid or int(fields[1]) == pid:  # fields[1]: the parent
                total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    except OSError:
        return 0.0
    return total


def percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=200, help="per client")
    parser.add_argument("--mode", default="graph")
    parser.add_argument("--workers", type=int, default=1, help="`ctxfst serve --workers`")
    parser.add_argument("--model", default="hash-256")
    parser.add_argument("--project", type=Path,
                        help="serve this built project (kept) instead of a generated one")
    args = parser.parse_args()
    root = args.project or Path(tempfile.mkdtemp(prefix="ctxfst-serve-"))
    server = None
    try:
        if args.project is None:
            generate(root, args.docs, seed=5)
            with (root / "ctxfst.toml").open("a", encoding="utf-8") as settings:
                settings.write(f'embedding_model = "{args.model}"\n')
            if run_build(root, [], quiet=True) != 0:
                sys.exit("build failed")
        started = time.perf_counter()
        server, port = start_server(root, args.workers)
        print(f"server ready in {time.perf_counter() - started:.2f} s "
              f"({args.docs:,} documents, {args.model})")
        per_client: list[list[float]] = [[] for _ in range(args.clients)]

        def at_start() -> None:  # (the barrier's action: every client warmed up)
            nonlocal server_cpu, client_cpu, started
            server_cpu, client_cpu = cpu_seconds(server.pid), time.process_time()
            started = time.perf_counter()

        server_cpu = client_cpu = started = 0.0
        barrier = threading.Barrier(args.clients, action=at_start)
        threads = [threading.Thread(target=client, args=(port, args.mode, args.requests,
                                                         n * 7, per_client[n], barrier))
                   for n in range(args.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        server_cpu = cpu_seconds(server.pid) - server_cpu
        client_cpu = time.process_time() - client_cpu
        times = sorted(t for chunk in per_client for t in chunk)
        print(f"{args.mode} over HTTP, {args.workers} worker(s), {args.clients} clients x "
              f"{args.requests} requests, "
              f"top 10, {os.cpu_count()} CPUs: p50 {1000 * statistics.median(times):.1f} ms, "
              f"p90 {1000 * percentile(times, 0.90):.1f} ms, "
              f"p99 {1000 * percentile(times, 0.99):.1f} ms, "
              f"max {1000 * times[-1]:.1f} ms, {len(times) / elapsed:.0f} queries/s; CPU a "
              f"query: server {1000 * server_cpu / len(times):.1f} ms, "
              f"clients {1000 * client_cpu / len(times):.1f} ms")
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        if args.project is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
