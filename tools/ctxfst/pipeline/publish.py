"""Publishing a build so that no reader ever catches it half done.

The staged artifacts are linked into a new folder, build/.published/<id> (the id is from
the manifest's sha256), with run_results.json; then one rename switches the link
build/current to it. Each fixed name in build/ (build/chunks.parquet) is a link to
current/<name>, made once, so at every instant build/ names one whole build: the old one
until the switch, the new one after. A folder that stops being current stays for the
readers that opened it: until the next publication, and at least RETAIN_SECONDS. A
journal (build/.publish.json) names what
is being published, so that the next build finishes a publication a kill cut short;
until then readers keep the build published before.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from ..artifacts.io import (
    copy_atomic,
    digest_written,
    link_atomic,
    read_bytes_no_follow,
    read_json,
    remove_detached,
    strict_json,
    sync_folder,
    write_json,
)
from ..artifacts.layout import (
    CURRENT,
    JOURNAL,
    LEDGER_FILES,
    MANIFEST,
    PUBLISHED,
    RUN_RESULTS,
    VERSION_ID_HEX,
    fixed_name_target,
    ledger_copy_name,
    result_path,
    staged,
    version_target,
)
from ..artifacts.reader import published_folder
from ..config import Config
from ..files import file_identity, is_real_folder
from ..version import __version__

MAX_JOURNAL_BYTES = 1 << 20
RETAIN_SECONDS = 60  # how long a folder that stopped being current stays, at least


def publish(config: Config, names: list[str], results: dict) -> None:
    """Publish the staged artifacts named (the manifest among them) with the run's
    results, under the journal."""
    journal = config.build_dir / JOURNAL
    write_json(journal, {"files": names, "results": results})
    _publish_staged(config, names, results)
    os.unlink(journal)


def recover(config: Config) -> bool:
    """Finish a publication interrupted by a kill. True when there was one."""
    journal = config.build_dir / JOURNAL
    if not os.path.lexists(journal):
        return False
    try:
        record = strict_json(read_bytes_no_follow(journal, MAX_JOURNAL_BYTES))
        names = [str(name) for name in record["files"]]
        results = record.get("results")
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        journal.unlink()
        return False
    from .table import ARTIFACTS

    if not names or not set(names) <= {*ARTIFACTS, MANIFEST} or MANIFEST not in names:
        journal.unlink()  # names we never publish ("../x"): a forged journal, not ours
        return False
    if not all(staged(config, name).is_file() and not staged(config, name).is_symlink()
               for name in names):
        journal.unlink()  # the staged set is gone (or not ours): the next build publishes
        return False
    if not isinstance(results, dict):
        results = {"toolchain": __version__, "stages": []}  # (a journal of an older ctxfst)
    _publish_staged(config, names, results)
    journal.unlink()
    return True


def current_version(build_dir: Path) -> str | None:
    """The id of the published folder build/current links to, if it is a link ctxfst
    made to a folder that is there."""
    try:
        folder = published_folder(build_dir)
    except ValueError:
        return None
    return folder.name if folder != build_dir else None


def _publish_staged(config: Config, names: list[str], results: dict) -> None:
    build = config.build_dir
    manifest = staged(config, MANIFEST)
    # (the digest the manifest stage wrote it with, while the file is as written then)
    sha256 = digest_written(manifest, os.lstat(manifest)) or \
        hashlib.sha256(read_bytes_no_follow(manifest)).hexdigest()
    version = sha256[:VERSION_ID_HEX]
    versions = build / PUBLISHED
    _own_folder(versions)
    before = current_version(build)
    folder = versions / version
    if is_real_folder(folder):
        # A build published before (the same manifest: the same bytes): readers may be
        # in it, so it is mended in place, never made again.
        for name in names:
            link_atomic(staged(config, name), folder / name)
        write_json(folder / RUN_RESULTS, results)
    else:
        _make_folder(config, folder, names, results)
    if version != before:
        _switch_current(build, version)
        if before is not None and is_real_folder(versions / before):
            os.utime(versions / before)  # (when it stopped being current: _drop_versions)
    _link_fixed_names(build, [*names, RUN_RESULTS])
    retired = _update_ledger(config, names)
    _drop_versions(versions, keep={version, before}, also=retired)


def _own_folder(path: Path) -> None:
    """path as a real folder: whatever else is there (a stranger's link) is removed."""
    if not is_real_folder(path):
        _remove(path)
        path.mkdir()


def _make_folder(config: Config, folder: Path, names: list[str], results: dict) -> None:
    """The published folder of a new build, made whole under a temp name and renamed
    into place."""
    temp = folder.with_name(f".{folder.name}.{secrets.token_hex(6)}.tmp")
    temp.mkdir()
    for name in names:
        source = staged(config, name)
        try:
            os.link(source, temp / name, follow_symlinks=False)
        except OSError:  # (another file system: a copy)
            copy_atomic(source, temp / name)
    write_json(temp / RUN_RESULTS, results)
    sync_folder(temp)
    os.rename(temp, folder)
    sync_folder(folder.parent)


def _switch_current(build: Path, version: str) -> None:
    """One rename makes build/current name the new folder."""
    _replace_with_link(build / CURRENT, version_target(version))
    sync_folder(build)


def _link_fixed_names(build: Path, names: list[str]) -> None:
    """Each published name in build/ a link through build/current (made once; a file or a
    stranger's link there is replaced); links to names no longer published are removed."""
    changed = False
    for name in names:
        path, target = build / name, fixed_name_target(name)
        try:
            if os.readlink(path) == target:
                continue
        except OSError:
            pass
        _replace_with_link(path, target)
        changed = True
    for path in _fixed_name_links(build):
        if path.name not in names:
            os.unlink(path)
            changed = True
    if changed:
        sync_folder(build)


def _replace_with_link(path: Path, target: str) -> None:
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    os.symlink(target, temp)
    try:
        os.replace(temp, path)
    except IsADirectoryError:  # a folder where a file belongs: not ours to keep
        _remove(path)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


RETIRED = ".retired-"  # + the id of a published folder being removed


def _drop_versions(versions: Path, keep: set[str | None], also: list[Path]) -> None:
    """The published folders that stopped being current over RETAIN_SECONDS ago, but
    never the current one or the one before (readers that opened them may still be
    reading), and what killed publications left there. A folder dropped is renamed
    out of the way at once and removed by a process of its own (remove_detached),
    with the folders `also` names."""
    retired_before = time.time() - RETAIN_SECONDS
    doomed = list(also)
    for entry in os.scandir(versions):
        if entry.name in keep:
            continue
        try:
            retired = entry.stat(follow_symlinks=False).st_mtime
        except FileNotFoundError:
            continue
        path = Path(entry.path)
        if entry.name.startswith(RETIRED):  # (one a remover did not finish)
            doomed.append(path)
        elif entry.name.startswith("."):
            _remove(path)
        elif retired < retired_before:
            try:
                os.rename(path, versions / f"{RETIRED}{entry.name}")
                doomed.append(versions / f"{RETIRED}{entry.name}")
            except OSError:
                _remove(path)
    if doomed:
        remove_detached(doomed)


def _remove(path: Path) -> None:
    """A file, link or folder (a folder's links are removed, never followed); what is
    gone already (a detached remover's work, remove_detached) is no error."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, onerror=_gone_already)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _gone_already(function, path: str, error: tuple) -> None:
    if not isinstance(error[1], FileNotFoundError):
        raise error[1]


def remove_published(build: Path) -> None:
    """What publishing made in build/ (for `doit clean`): the fixed names' links, the
    current link, the published folders."""
    for path in _fixed_name_links(build):
        path.unlink(missing_ok=True)
    if (build / CURRENT).is_symlink():
        (build / CURRENT).unlink()
    _remove(build / PUBLISHED)


def _fixed_name_links(build: Path) -> list[Path]:
    """The links in build/ that publishing made for fixed names (through current/)."""
    found = []
    for entry in os.scandir(build) if build.is_dir() else ():
        try:
            if entry.is_symlink() and os.readlink(entry.path).startswith(f"{CURRENT}/"):
                found.append(Path(entry.path))
        except OSError:  # (gone meanwhile)
            continue
    return found


def _update_ledger(config: Config, names: list[str]) -> list[Path]:
    """The facts artifacts into the facts ledger (the next build's prior state, which
    `doit clean` keeps), as copies: it is the only record of the facts' history, and must
    not change with a file in build/ edited in place. The facts stage made those copies
    (links of them are made here); one that is not as it wrote it is made again from the
    staged artifact. Returns the folders of replaced ledger files to remove (_retire),
    with those a remover left."""
    ledger = config.facts_ledger
    try:
        record = read_json(result_path(config, "facts"))
    except (OSError, ValueError):
        record = None  # (each copy is then made from its artifact)
    retired = ledger / f"{RETIRED}{secrets.token_hex(6)}"
    linked = False
    for name in LEDGER_FILES:
        if name in names:
            _retire(ledger / name, retired)
            copy = ledger_copy_name(name)
            if _same_written(config, record, name, copy):
                link_atomic(staged(config, copy), ledger / name, sync=False)
                linked = True
            else:
                copy_atomic(staged(config, name), ledger / name)
    if linked:
        sync_folder(ledger)  # (once, for every link)
    return [Path(entry.path) for entry in os.scandir(ledger)
            if entry.name.startswith(RETIRED)] if is_real_folder(ledger) else []


# A ledger file at least this large is not freed by the build that replaces it: freeing
# a file's blocks takes some 0.2 ms a MB here, and a remover is an interpreter started.
RETIRE_BYTES = 64 << 20


def _retire(path: Path, folder: Path) -> None:
    """Keep a large file about to be replaced linked in folder, for a remover to free
    (remove_detached): replaced, its last link gone, the kernel frees its blocks there
    and then (0.1 s for the 490 MB of a 100,000-document ledger)."""
    try:
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_size >= RETIRE_BYTES:
            folder.mkdir(exist_ok=True)
            os.link(path, folder / path.name, follow_symlinks=False)
    except OSError:
        pass  # (not retired: freed as it is replaced)


def written_entry(record: Any, name: str) -> dict | None:
    """A stage's record of a staged file it wrote (its sha256 and identity then), when
    the stage's result record holds one of that shape."""
    outputs = record.get("outputs") if isinstance(record, dict) else None
    entry = outputs.get(name) if isinstance(outputs, dict) else None
    if isinstance(entry, dict) and isinstance(entry.get("sha256"), str) \
            and isinstance(entry.get("identity"), list):
        return entry
    return None


def _same_written(config: Config, record: Any, name: str, other: str) -> bool:
    """Whether two staged files hold the same bytes: their stage wrote them with one
    sha256 (its result record) and both keep the identity they had then."""
    first, second = written_entry(record, name), written_entry(record, other)
    if first is None or second is None or first["sha256"] != second["sha256"]:
        return False
    try:
        return (file_identity(os.lstat(staged(config, name))) == first["identity"]
                and file_identity(os.lstat(staged(config, other))) == second["identity"])
    except OSError:
        return False
