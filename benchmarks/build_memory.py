"""Memory of a first build: every process's resident set (the build, the facts process
beside it, the workers they fork), sampled from /proc while `doit` runs (Linux).

    .venv/bin/python benchmarks/build_memory.py --docs 10000 [--interval 0.1]

Prints the build's stage lines with the time they appeared, then each process's peak
RSS. RSS counts pages a forked process still shares with its parent in both, so the sum
over processes overstates what the machine holds; the largest single peak is what
`build_speed.py` reports as peak RSS.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from build_speed import DOIT_ENV, make_project


def _tree(pid: int) -> list[int]:
    """pid and every process below it."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                todo.extend(int(child) for child in (task / "children").read_text().split())
        except OSError:
            pass  # (ended meanwhile)
    return found


def _rss_mb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between samples")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ctxfst-memory-"))
    try:
        make_project(root, args.docs, "hash-256")
        started = time.perf_counter()
        build = subprocess.Popen([str(Path(sys.executable).with_name("doit"))], cwd=root,
                                 env=DOIT_ENV, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        lines: list[tuple[float, str]] = []
        reader = threading.Thread(target=lambda: lines.extend(
            (time.perf_counter() - started, line.rstrip()) for line in build.stdout))
        reader.start()
        peaks: dict[int, int] = {}
        largest_sum = 0
        while build.poll() is None:
            sizes = {pid: _rss_mb(pid) for pid in _tree(build.pid)}
            sizes = {pid: size for pid, size in sizes.items() if size is not None}
            for pid, size in sizes.items():
                peaks[pid] = max(peaks.get(pid, 0), size)
            largest_sum = max(largest_sum, sum(sizes.values()))
            time.sleep(args.interval)
        reader.join()
        for at, line in lines:
            print(f"{at:8.2f} s  {line}")
        if build.returncode != 0:
            sys.exit("doit failed")
        print(f"{args.docs} documents: peak RSS per process (MB, the build's first): "
              + ", ".join(str(peaks[pid]) for pid in sorted(peaks)))
        print(f"largest single process {max(peaks.values())} MB; largest sum over "
              f"processes {largest_sum} MB (shared pages counted in each)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
