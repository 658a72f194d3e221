"""Publishing: build/ names one whole build at every instant, whatever kills the publisher."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxfst.artifacts.reader import ArtifactError, BuildArtifacts, published_folder
from ctxfst.config import find_project
from ctxfst.pipeline import publish
from ctxfst.pipeline.table import ARTIFACTS

from .test_build import PUBLISHED, assert_consistent, build, example

HARNESS = Path(__file__).with_name("publish_kill.py")


def edit(root: Path, number: int) -> None:
    path = root / "content/backend-frameworks.ctxfst.md"
    text = path.read_text()
    end = text.index("</Chunk>")
    path.write_text(text[:end] + f"Added sentence number {number}.\n" + text[end:])


def published_folders(root: Path) -> list[str]:
    """The folders in build/.published once the removers of dropped ones are done (each
    removes its folders in a process of its own, renamed out of the way first)."""
    versions = root / "build/.published"
    deadline = time.monotonic() + 60
    while any(name.startswith(publish.RETIRED) for name in os.listdir(versions)):
        assert time.monotonic() < deadline, os.listdir(versions)
        time.sleep(0.05)
    return sorted(os.listdir(versions))


def staged_sets(root: Path, capsys, count: int) -> Path:
    """count builds of root, each a little different; their staged folders kept in
    root/../sets (the last one's stays in build/.staging: its folder there is empty)."""
    sets = root.parent / "sets"
    for number in range(count):
        if number:
            edit(root, number)
        code, out = build(root, capsys)
        assert code == 0, out
        if number < count - 1:
            shutil.copytree(root / "build/.staging", sets / f"set-{number}")
    (sets / f"set-{count - 1}").mkdir()
    return sets


def known_digests(root: Path, sets: Path) -> dict[str, list[str]]:
    """Each published name's sha256 in every staged set, in the sets' order."""
    known: dict[str, list[str]] = {name: [] for name in PUBLISHED}
    for folder in sorted(sets.iterdir()):
        staged = folder if any(folder.iterdir()) else root / "build/.staging"
        manifest = (staged / "manifest.json").read_bytes()
        recorded = {item["path"]: item["sha256"] for item in json.loads(manifest)["artifacts"]}
        for name in PUBLISHED:
            known[name].append(hashlib.sha256(manifest).hexdigest() if name == "manifest.json"
                               else recorded[name])
    return known


def test_readers_never_see_half_a_publication_while_it_is_killed_at_random(tmp_path, capsys):
    """The publisher is killed 100 times at random moments inside publish(), cycling
    through three builds, while a reader polls build/ the whole time: ctxfst's readers
    and a reader through build/current resolved once never read anything but one whole
    build; a reader by fixed names never reads a torn file, a missing one or one of no
    build."""
    root = example(tmp_path / "kb")
    sets = staged_sets(root, capsys, 3)
    known = tmp_path / "known.json"
    known.write_text(json.dumps(known_digests(root, sets)))
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, str(HARNESS), "read", str(root), str(known),
                               str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        driver = subprocess.run([sys.executable, str(HARNESS), "publish", str(root),
                                 str(sets), "100", "20261206"],
                                capture_output=True, text=True, timeout=600)
    finally:
        stop.touch()
        seen = json.loads(reader.communicate(timeout=120)[0])
    assert driver.returncode == 0, driver.stderr
    published = json.loads(driver.stdout)
    assert published["kills"] >= 100, published
    assert seen["wrong_count"] == 0, seen["wrong"]
    assert seen["ctxfst"] > 0 and seen["pinned"] > 0 and seen["fixed_names"] > 0, seen
    # The last publication finished: one whole build, no journal, no leftovers.
    assert not (root / "build/.publish.json").exists()
    assert_consistent(root)
    folders = published_folders(root)
    assert folders and not [name for name in folders if name.startswith(".")], folders
    opened = BuildArtifacts(root / "build", list(ARTIFACTS))
    for name in ARTIFACTS:
        opened.read(name)


def test_a_reader_keeps_the_build_it_opened_while_the_next_one_is_published(tmp_path,
                                                                           capsys):
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    opened = BuildArtifacts(root / "build", ["chunks.json"])
    before = opened.read("chunks.json")
    edit(root, 1)
    assert build(root, capsys)[0] == 0
    assert (root / "build/chunks.json").read_bytes() != before
    assert opened.read("chunks.json") == before  # the folder it opened is still there
    assert BuildArtifacts(root / "build", ["chunks.json"]).read("chunks.json") == \
        (root / "build/chunks.json").read_bytes()


# A build in a process of its own (as doit's: one thread; some tests leave threads in
# this one, and where threads run the build removes a dropped folder itself), whose
# remover waits for a file to appear (10 s at the most) before it removes a folder.
# A build whose remover waits for the file `go` (at most 10 s) before it removes.
HELD_REMOVAL_BUILD = """
import sys
from pathlib import Path
from ctxfst.artifacts import io
from ctxfst.pipeline import publish
from ctxfst.pipeline.runner import run_build
publish.RETAIN_SECONDS = 0
publish.RETIRE_BYTES = 0  # (the ledger files it replaces are retired, however small)
io._REMOVER = (f"import os, time\\ndeadline = time.monotonic() + 10\\n"
               f"while not os.path.exists({sys.argv[2]!r}) and time.monotonic() < deadline:"
               f"\\n    time.sleep(0.01)\\n" + io._REMOVER)
sys.exit(run_build(Path(sys.argv[1]), []))
"""


def test_folders_no_longer_current_are_dropped_after_a_while(tmp_path, capsys):
    """The current folder and the one before always stay; older ones stay
    RETAIN_SECONDS after they stopped being current, and go with the next publication
    after that: renamed out of the way, removed by a process of its own, which neither
    the build nor a reader of its output waits for."""
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    first = published_folder(root / "build").name
    for number in (1, 2):
        edit(root, number)
        assert build(root, capsys)[0] == 0
    assert len(os.listdir(root / "build/.published")) == 3  # all within RETAIN_SECONDS
    edit(root, 3)
    go = tmp_path / "go"
    builder = subprocess.run([sys.executable, "-c", HELD_REMOVAL_BUILD, str(root), str(go)],
                             capture_output=True, text=True, timeout=120)
    assert builder.returncode == 0, builder.stdout + builder.stderr
    assert os.listdir(root / "build/.published").count(publish.RETIRED + first) == 1
    go.touch()
    kept = published_folders(root)
    assert len(kept) == 2 and first not in kept
    assert_consistent(root)


def test_the_ledger_files_a_build_replaces_are_freed_by_the_remover(tmp_path, capsys):
    """A facts ledger file the publication replaces stays linked in a retired folder of
    the ledger, which the remover frees (freeing a large ledger's blocks took the build
    itself 0.1 s); the ledger holds the new files all the while. A retired folder a
    remover left (killed) goes with a later publication."""
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    ledger = root / ".ctxfst/facts"
    before = {path.name: path.read_bytes() for path in ledger.iterdir()}
    (ledger / f"{publish.RETIRED}left").mkdir()
    (ledger / f"{publish.RETIRED}left/semantic_facts.parquet").write_bytes(b"old")
    edit(root, 1)
    go = tmp_path / "go"
    builder = subprocess.run([sys.executable, "-c", HELD_REMOVAL_BUILD, str(root), str(go)],
                             capture_output=True, text=True, timeout=120)
    assert builder.returncode == 0, builder.stdout + builder.stderr
    retired = [path for path in ledger.iterdir() if path.name.startswith(publish.RETIRED)
               and path.name != f"{publish.RETIRED}left"]
    assert len(retired) == 1
    kept = {path.name: path.read_bytes() for path in retired[0].iterdir()}
    assert "semantic_facts.parquet" in kept
    assert all(before[name] == data for name, data in kept.items())
    for name in before:  # the ledger: the facts artifacts just published
        assert (ledger / name).read_bytes() == (root / "build" / name).read_bytes()
    assert (ledger / "semantic_facts.parquet").read_bytes() != before["semantic_facts.parquet"]
    go.touch()
    deadline = time.monotonic() + 60
    while any(path.name.startswith(publish.RETIRED) for path in ledger.iterdir()):
        assert time.monotonic() < deadline, os.listdir(ledger)
        time.sleep(0.05)
    assert sorted(os.listdir(ledger)) == sorted(before)
    assert_consistent(root)


def test_a_file_deleted_from_the_published_folder_is_put_back_in_place(tmp_path, capsys):
    """The same build published again (the same manifest, so the same folder, which
    readers may have open) is mended in place, not made anew."""
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    folder = published_folder(root / "build")
    kept = (folder / "entities.parquet").stat().st_ino
    (folder / "chunks.json").unlink()
    code, out = build(root, capsys)
    assert code == 0 and "published to build/" in out, out
    assert published_folder(root / "build") == folder
    assert (folder / "entities.parquet").stat().st_ino == kept
    assert os.listdir(root / "build/.published") == [folder.name]
    assert_consistent(root)


def test_an_older_plain_build_folder_is_published_anew_as_links(tmp_path, capsys):
    """build/ as a ctxfst that published plain files left it: read as it is, and the
    next build replaces the files with links through build/current."""
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    folder = published_folder(root / "build")
    for name in [*PUBLISHED, "run_results.json"]:
        (root / "build" / name).unlink()
        shutil.copy(folder / name, root / "build" / name)
    (root / "build/current").unlink()
    shutil.rmtree(root / "build/.published")
    assert published_folder(root / "build") == root / "build"
    BuildArtifacts(root / "build", list(ARTIFACTS)).read("chunks.json")
    code, out = build(root, capsys)
    assert code == 0 and "published to build/" in out, out
    assert all((root / "build" / name).is_symlink() for name in PUBLISHED)
    assert_consistent(root)


@pytest.mark.parametrize("target", ["/etc", "../..", ".published/../../outside",
                                    ".published/0123456789abcdeg"])
def test_a_current_link_ctxfst_did_not_make_is_refused_and_replaced(tmp_path, capsys,
                                                                    target):
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    link = root / "build/current"
    link.unlink()
    link.symlink_to(target)
    with pytest.raises(ArtifactError, match="not to a build ctxfst published"):
        BuildArtifacts(root / "build", ["chunks.json"])
    code, out = build(root, capsys)
    assert code == 0 and "published to build/" in out, out
    assert_consistent(root)
    BuildArtifacts(root / "build", ["chunks.json"]).read("chunks.json")


def test_a_published_folder_made_a_link_is_replaced_not_followed(tmp_path, capsys):
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(root / "build/.published")
    (root / "build/.published").symlink_to(outside)
    with pytest.raises(ArtifactError, match="not a folder of published artifacts"):
        BuildArtifacts(root / "build", ["chunks.json"])
    code, out = build(root, capsys)
    assert code == 0, out
    assert os.listdir(outside) == []
    assert not (root / "build/.published").is_symlink()
    assert_consistent(root)


def test_doit_clean_removes_every_published_folder_and_link(tmp_path, capsys):
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    edit(root, 1)
    assert build(root, capsys)[0] == 0
    assert build(root, capsys, "clean")[0] == 0
    assert sorted(os.listdir(root / "build")) == []
    assert (root / ".ctxfst/facts/semantic_facts.parquet").is_file()  # the ledger stays
    assert find_project(root) is not None
