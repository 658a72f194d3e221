"""Kill publications of a build at random moments while readers poll build/.

Run by tests/test_publish.py in processes of their own (no test runner's threads in a
forked publisher):

    publish_kill.py publish ROOT SETS KILLS SEED   prints {"kills", "publishes", ...}
    publish_kill.py read ROOT KNOWN STOP          prints what the readers saw

`publish` cycles build/.staging through the staged sets in SETS (folders holding a
whole staged build each, but for an empty one: the set build/.staging holds), forks a
publisher for each publication (recovering first, as every build does) and SIGKILLs it
at a random moment inside publish(), until KILLS publications were cut short. `read`
polls build/ until the file STOP appears, three ways: as ctxfst's readers do
(BuildArtifacts), through build/current resolved once (as a script following
docs/compiler.md does), and by fixed names alone (as LanceDB or duckdb would,
one file at a time); KNOWN is a JSON file of each artifact name's sha256 in every set.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import statistics
import sys
import time
from pathlib import Path


def drive(root: Path, sets: Path, kills_wanted: int, seed: int) -> dict:
    from ctxfst.artifacts.layout import JOURNAL, MANIFEST, staging
    from ctxfst.config import find_project
    from ctxfst.pipeline.publish import publish, recover
    from ctxfst.pipeline.table import ARTIFACTS

    config = find_project(root)
    names = [*ARTIFACTS, MANIFEST]
    order = sorted(path.name for path in sets.iterdir())
    on_stage = [next(name for name in order if not any((sets / name).iterdir()))]
    rng = random.Random(seed)

    def next_set() -> None:
        if os.path.lexists(config.build_dir / JOURNAL):
            return  # a publication to finish first: the same staged set
        name = order[(order.index(on_stage[0]) + 1) % len(order)]
        os.rmdir(sets / on_stage[0])
        os.rename(staging(config), sets / on_stage[0])
        os.rename(sets / name, staging(config))
        os.mkdir(sets / name)
        on_stage[0] = name

    def publication(kill_after: float | None) -> tuple[bool, float]:
        """(killed, seconds from the start of publish() to the end of the process)."""
        ready, signal_ready = os.pipe()
        pid = os.fork()
        if pid == 0:  # the publisher
            code = 1
            try:
                os.close(ready)
                recover(config)
                os.write(signal_ready, b"1")
                publish(config, names, {"toolchain": "kill-test", "stages": []})
                code = 0
            finally:
                os._exit(code)
        os.close(signal_ready)
        started = os.read(ready, 1) == b"1"
        begun = time.perf_counter()
        if started and kill_after is not None:
            time.sleep(kill_after)
            os.kill(pid, signal.SIGKILL)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        seconds = time.perf_counter() - begun
        os.close(ready)
        if status not in (0, -signal.SIGKILL) or not started:
            raise SystemExit(f"the publisher failed (exit {status})")
        return status == -signal.SIGKILL, seconds

    timings = []
    for _ in range(6):
        next_set()
        timings.append(publication(None)[1])
    took = statistics.median(timings)
    kills = publishes = 0
    while kills < kills_wanted and publishes < 20 * kills_wanted:
        next_set()
        killed = publication(rng.uniform(0, took))[0]
        kills += killed
        publishes += 1
    publication(None)  # the last one finished (after a recovery, as any build)
    return {"kills": kills, "publishes": publishes, "publish_seconds": took}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_loop(root: Path, known_file: Path, stop: Path) -> dict:
    from ctxfst.artifacts.reader import ArtifactError, BuildArtifacts

    build = root / "build"
    known: dict[str, list[str]] = json.loads(known_file.read_text())
    names = sorted(known)
    artifacts = [name for name in names if name != "manifest.json"]
    seen = {"ctxfst": 0, "pinned": 0, "fixed_names": 0, "mixed_by_fixed_names": 0}
    wrong: list[str] = []
    while not stop.exists():
        try:  # 1. as ctxfst's readers do
            opened = BuildArtifacts(build, artifacts)
            for name in artifacts:
                opened.read(name)
            seen["ctxfst"] += 1
        except ArtifactError as error:
            wrong.append(f"ctxfst: {error}")
        try:  # 2. through build/current, resolved once
            folder = Path(os.path.realpath(build / "current"))
            manifest = json.loads((folder / "manifest.json").read_bytes())
            for item in manifest["artifacts"]:
                if sha256((folder / item["path"]).read_bytes()) != item["sha256"]:
                    wrong.append(f"pinned: {item['path']} is not the manifest's")
            seen["pinned"] += 1
        except (OSError, ValueError) as error:
            wrong.append(f"pinned: {error!r}")
        digests = {}  # 3. by fixed names, each file alone
        for name in names:
            try:
                digests[name] = sha256((build / name).read_bytes())
            except OSError as error:
                wrong.append(f"fixed name: {error!r}")
                continue
            if digests[name] not in known[name]:
                wrong.append(f"fixed name: {name} is of no build")
        seen["fixed_names"] += 1
        sets = range(len(known[names[0]]))
        seen["mixed_by_fixed_names"] += not any(
            all(digests.get(name) == known[name][at] for name in names) for at in sets)
    return {**seen, "wrong": wrong[:20], "wrong_count": len(wrong)}


if __name__ == "__main__":
    mode, root = sys.argv[1], Path(sys.argv[2])
    if mode == "publish":
        report = drive(root, Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        report = read_loop(root, Path(sys.argv[3]), Path(sys.argv[4]))
    print(json.dumps(report))
