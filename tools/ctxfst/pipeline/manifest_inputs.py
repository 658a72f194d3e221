"""The manifest's inputs as the validate stage encodes them, for the manifest stage to
put in unparsed: the text of the manifest's `inputs` list, and the paths of every input
as each artifact fed by all of them lists them in its lineage. At 100,000 documents
these are 35 of the manifest's 39 MB, and parsing them back and encoding them again
took the manifest stage 0.4 s; the validate stage encodes them once, as it lists them.

The staged file (layout.MANIFEST_INPUTS) is a line of JSON, the header, then the two
texts: the header says their sizes, and which inputs some lineages list alone
(extra-edge files, skills).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from json.encoder import encode_basestring
from operator import itemgetter
from pathlib import Path

from ..artifacts.io import Spliced, compact_json, write_pieces
from ..artifacts.layout import MANIFEST_INPUTS
from ..skills import SKILL_FILE
from .errors import BuildFailed

_FORMAT = 1

# Where the manifest puts them (indented_json's indents): its `inputs`, a member of the
# top-level object; an artifact's `inputs`, a member of an item of `artifacts`.
INPUTS_AT = "\n  "
LINEAGE_AT = "\n      "
_INPUT_ITEM = INPUTS_AT + "  "
_LINEAGE_ITEM = LINEAGE_AT + "  "

Input = tuple[str, str, int]  # (project-relative path, sha256, size)


def write_manifest_inputs(path: Path, inputs: list[Input], settings: Input | None) -> str:
    """Keep the manifest's inputs: the knowledge base's (in path order), and the settings
    file's, which the manifest lists among them (then all in order of their paths).
    Returns a digest of the knowledge base's, which changes exactly when one does."""
    from ..document.edges import is_edge_file  # (pydantic: loaded by validation already)

    ordered = inputs if settings is None else sorted([*inputs, settings], key=itemgetter(0))
    member = _INPUT_ITEM + "  "
    records = [f'{{{member}"path": {encode_basestring(relative)},{member}"sha256": '
               f'{encode_basestring(digest)},{member}"bytes": {int(size)}{_INPUT_ITEM}}}'
               .encode() for relative, digest, size in ordered]
    separator = ("," + _INPUT_ITEM).encode("utf-8")
    body = separator.join(records)
    paths = [item[0] for item in ordered]
    # The digest: of the body with the settings file's record cut out, and a separator.
    cut = (0, 0)
    if settings is not None:
        at = ordered.index(settings)  # (records before it: the separators between them)
        start = sum(map(len, records[:at])) + at * len(separator)
        cut = (start, start + len(records[at]) + len(separator)) if at < len(records) - 1 \
            else (max(0, start - len(separator)), len(body))
    stamp = hashlib.sha256(memoryview(body)[:cut[0]])
    stamp.update(memoryview(body)[cut[1]:])
    listed = b"".join([("[" + _INPUT_ITEM).encode("utf-8"), body,
                       (INPUTS_AT + "]").encode("utf-8")]) if records else b"[]"
    members = ("," + _LINEAGE_ITEM).join(map(encode_basestring, paths)).encode("utf-8")
    header = {"format": _FORMAT, "inputs": len(listed), "paths": len(members),
              "edges": [p for p in paths if is_edge_file(p)],
              "skills": [p for p in paths if p.endswith("/" + SKILL_FILE)]}
    write_pieces(path, [compact_json(header) + b"\n", listed, members])
    return stamp.hexdigest()


@dataclass(frozen=True)
class ManifestInputs:
    """The manifest's inputs as the validate stage kept them."""

    inputs: Spliced           # the manifest's `inputs`
    members: memoryview       # every input's path, as lineage members (empty: none)
    edges: list[str]          # the extra-edge files among them
    skills: list[str]         # the SKILL.md files among them

    def lineage(self, feeds: list[str | None]) -> Spliced:
        """An artifact's `inputs`: each feed a path, or None for every input's."""
        runs: list[bytes | memoryview] = []
        for feed in feeds:
            if feed is not None:
                runs.append(encode_basestring(feed).encode("utf-8"))
            elif self.members:
                runs.append(self.members)
        if not runs:
            return Spliced((b"[]",), LINEAGE_AT)
        pieces: list[bytes | memoryview] = [("[" + _LINEAGE_ITEM).encode("utf-8")]
        separator = ("," + _LINEAGE_ITEM).encode("utf-8")
        for number, run in enumerate(runs):
            if number:
                pieces.append(separator)
            pieces.append(run)
        pieces.append((LINEAGE_AT + "]").encode("utf-8"))
        return Spliced(tuple(pieces), LINEAGE_AT)


def read_manifest_inputs(data: bytes) -> ManifestInputs:
    """The kept inputs from the staged file's bytes (BuildFailed when they are not as
    write_manifest_inputs writes them)."""
    end = data.find(b"\n")
    try:
        header = json.loads(data[:end]) if end >= 0 else None
    except (ValueError, RecursionError):
        header = None
    fields = ("format", "inputs", "paths", "edges", "skills")
    if not isinstance(header, dict) or sorted(header) != sorted(fields) \
            or header["format"] != _FORMAT \
            or any(type(header[key]) is not int or header[key] < 0
                   for key in ("inputs", "paths")) \
            or end + 1 + header["inputs"] + header["paths"] != len(data) \
            or any(not isinstance(paths, list) or not all(type(p) is str for p in paths)
                   for paths in (header["edges"], header["skills"])):
        raise BuildFailed(f"{MANIFEST_INPUTS} in the staging folder is not as the validate "
                          "stage writes it; run `doit clean`, then `doit`")
    view = memoryview(data)
    listed = view[end + 1:end + 1 + header["inputs"]]
    return ManifestInputs(Spliced((listed,), INPUTS_AT), view[end + 1 + header["inputs"]:],
                          header["edges"], header["skills"])
