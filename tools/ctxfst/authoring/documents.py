"""Documents read to be edited in place (contexts, lint fixes): each file read once, its
exact text kept beside the parse of those same bytes, and written back as it came (a BOM
kept, atomically)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..artifacts.io import write_atomic
from ..document.model import ParsedDocument

BOM = b"\xef\xbb\xbf"


@dataclass
class Editable:
    doc: ParsedDocument
    raw: str          # the file's text as it is: line endings kept, a BOM dropped
    bom: bool
    explicit: bool    # named by the user (else met in a folder)

    def write(self, text: str) -> None:
        write_atomic(Path(self.doc.fs_path), (BOM if self.bom else b"") + text.encode())


def read_editable(inputs: Iterable) -> tuple[list[Editable], dict[str, str]]:
    """The documents among inputs (ctxfst.document.kb.Input), parsed from the bytes read,
    and the other files' text (skills, extra-edge files) by path."""
    from ..document.edges import is_edge_file
    from ..document.parse import parse_document
    from ..document.source import Source

    documents: list[Editable] = []
    others: dict[str, str] = {}
    for item in inputs:
        data, _ = item.source.read_bytes()
        name = Path(item.source.path).name
        if name == "SKILL.md" or is_edge_file(name):
            others[item.source.path] = (data or b"").decode("utf-8", "replace")
            continue
        source = item.source if data is None else \
            Source(item.source.path, item.source.fs_path, data)  # (no second read)
        doc = parse_document(source)  # (an unreadable file: its located diagnostic)
        try:
            raw = (data or b"").decode("utf-8-sig")
        except UnicodeDecodeError:
            raw = ""  # (parsing reported it, CTX002)
        documents.append(Editable(doc, raw, bool(data and data.startswith(BOM)),
                                  item.explicit))
    return documents, others
