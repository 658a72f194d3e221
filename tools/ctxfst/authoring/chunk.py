"""`ctxfst chunk`: plain Markdown notes into CtxFST drafts, offline and deterministically.

A draft keeps the note's body byte for byte and only adds lines: `<Chunk>` tags around
passages that follow the note's structure (a section per heading, small sections joined,
long ones cut between blocks, never inside a code block or table), and a frontmatter
that declares each chunk with an id from its heading, tags from its headings and the
note's own frontmatter, and links to the catalog's entities named in its text. Names not
in the catalog are proposed as YAML comments for a person to review, never declared.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..diagnostics import Diagnostic, diag
from ..document.mentions import NameFinder
from ..document.model import Entity, Frontmatter
from ..document.text import normalize, script_mix
from . import DEFAULT_CATEGORY, DEFAULT_MAX_TOKENS, DEFAULT_MIN_TOKENS
from .markdown import Block, blocks, chunk_marker_line, split_lines
from .yamledit import flow_list, scalar_text

MAX_LINKS = 6             # lint's advice (CTX510): the 1-6 entities a chunk is about
MAX_CANDIDATES = 8        # entity candidates proposed per note
MAX_SLUG = 48
# A name this short matches only as the catalog spells it: "Go" is a language, "go" a verb.
SHORT_NAME = 3
_LINK = re.compile(r"!?\[([^\[\]\n]*)\]\([^()\n]*\)")
_MARKUP = re.compile(r"[*_`~<>#]+")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ][0-9:.+\-Z]+)?")
# A Latin name: a word with a capital after its first letter, digits or + (gRPC, OpenAI,
# Node.js, C++), or a run of capitalised words (Cloudflare Workers).
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9+#]*(?:[.\-][A-Za-z0-9+#]+)*")
_BRACKETED = re.compile(r"[「『《〈]([^」』》〉\n]{2,16})[」』》〉]")
_SENTENCE_ENDS = ".!?:;。！？"
_MARKER_ONLY = re.compile(r"\s*(?:[-*+]|\d{1,9}[.)]|>|#{1,6}|\|)\s*")
_COMMON = frozenset("""
a an and are as at be but by for from has have he her his how i if in into is it its me
my no not of on or our she so that the their then there these they this those to up us
was we were what when where which who why will with you your also after all any before
both each every here just many more most much new now only other over same some such
than too very one two three first second next last still even however while because
yes ok note notes see use using used example examples e.g i.e etc
""".split())


class ChunkError(Exception):
    """A note that cannot be drafted (located diagnostics in .diagnostics)."""


@dataclass
class Candidate:
    name: str
    entity_id: str
    mentions: int
    line: int


@dataclass
class DraftChunk:
    id: str
    start: int                 # first line of the passage (0-based, in the note's lines)
    end: int                   # one past its last line
    tags: list[str]
    entities: list[str]
    tokens: int


@dataclass
class Draft:
    source: str                # the note, as shown
    target: Path
    title: str
    chunks: list[DraftChunk]
    declared: list[Entity]     # catalog entities the draft declares (the KB lacks them)
    candidates: list[Candidate]
    text: str = ""
    diagnostics: list[Diagnostic] = field(default_factory=list)


@dataclass
class Catalog:
    """The entities a draft may link: each normalised name or alias to its entity."""

    entities: dict[str, Entity] = field(default_factory=dict)
    by_name: dict[str, str] = field(default_factory=dict)
    spellings: dict[str, set[str]] = field(default_factory=dict)  # short names as written
    in_kb: set[str] = field(default_factory=set)  # ids the target knowledge base declares

    def add(self, entity: Entity, in_kb: bool) -> None:
        self.entities.setdefault(entity.id, entity)
        if in_kb:
            self.in_kb.add(entity.id)
        for label in (entity.name, *entity.aliases):
            key = normalize(label)
            self.by_name.setdefault(key, entity.id)
            if len(key) <= SHORT_NAME:
                self.spellings.setdefault(key, set()).add(label.strip())

    def finder(self) -> NameFinder:
        return NameFinder(self.by_name)


@dataclass
class Options:
    max_tokens: int = DEFAULT_MAX_TOKENS
    min_tokens: int = DEFAULT_MIN_TOKENS
    category: str = DEFAULT_CATEGORY


def _token_weight(text: str) -> float:
    """About what a subword tokenizer makes of text: 4/3 a Latin word, 1 a CJK character
    (WordPiece and most BPE vocabularies give a CJK character a token of its own)."""
    latin, cjk = script_mix(text)
    return latin * 4 / 3 + cjk


def estimate_tokens(text: str) -> int:
    return math.ceil(_token_weight(text) - 1e-9)


def slug(text: str) -> str:
    """kebab-case ASCII of a heading: markup dropped, accents folded; '' when none is left."""
    plain = _MARKUP.sub(" ", _LINK.sub(r"\1", text))
    ascii_text = unicodedata.normalize("NFKD", plain).encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z0-9]+", ascii_text.lower())
    out = ""
    for word in words:
        joined = f"{out}-{word}" if out else word
        if len(joined) > MAX_SLUG:
            break
        out = joined
    return out or "-".join(words)[:MAX_SLUG].strip("-")


def heading_slug(text: str) -> str:
    """A heading's slug; a heading with no ASCII word (Chinese, say) gets a short stable
    hash of its text instead, so the id still changes only when the heading does."""
    return slug(text) or "s-" + hashlib.sha256(normalize(text).encode()).hexdigest()[:8]


def plain_heading(text: str) -> str:
    return " ".join(_MARKUP.sub(" ", _LINK.sub(r"\1", text)).split())


# ---- reading a note ---------------------------------------------------------------------

@dataclass
class Note:
    source: str
    lines: list[str]           # the body's lines, endings kept
    body_line: int             # the body's first line in the file (0-based)
    meta: dict[str, Any]
    newline: str
    parts: list[Block] = field(default_factory=list)  # the body's blocks


def read_note(source: str, text: str) -> Note:
    """A note's ordinary frontmatter (if any) and body; a note that is already CtxFST, or
    whose frontmatter is not YAML, raises ChunkError."""
    from ..document.parse import split_frontmatter
    from ..document.yamlpos import load_yaml

    lines = split_lines(text)
    newline = _newline(lines)
    meta: dict[str, Any] = {}
    body_line = 0
    if lines and lines[0].rstrip("\r\n").rstrip() == "---":
        # (the parser's own rule for where frontmatter ends; its lines are these lines)
        front, body_line, problem = split_frontmatter(
            text.replace("\r\n", "\n").replace("\r", "\n"), source)
        if problem is not None:
            raise ChunkError([problem])
        loaded = load_yaml(front, source, line_offset=1)
        if not loaded.ok:
            raise ChunkError(loaded.diagnostics)
        if loaded.value is not None and not isinstance(loaded.value, dict):
            raise ChunkError([diag("CTX013", "the note's frontmatter is not a mapping",
                                   source, 2, 1)])
        meta = loaded.value or {}
        if "entities" in meta or "chunks" in meta:
            raise ChunkError([diag("CTX901", "already a CtxFST document (its frontmatter "
                                   "declares entities or chunks): check it with `ctxfst "
                                   "validate` instead", source, 1, 1)])
    body = lines[body_line:]
    parts = blocks(body)
    unclosed = next((block for block in parts if block.unclosed), None)
    if unclosed is not None:
        raise ChunkError([diag("CTX907", "this code fence is never closed, so the code runs "
                               "to the end of the note and no chunk could end after it; "
                               "close it", source, body_line + unclosed.start + 1, 1)])
    marker = chunk_marker_line(body, parts)
    if marker is not None:
        raise ChunkError([diag("CTX901", "the note has a chunk tag or marker outside code, "
                               "so it is CtxFST already or would not survive being "
                               "chunked", source, body_line + marker + 1, 1)])
    return Note(source, body, body_line, meta, newline, parts)


def _newline(lines: list[str]) -> str:
    counts = {"\r\n": 0, "\n": 0, "\r": 0}
    for line in lines:
        for ending in counts:
            if line.endswith(ending):
                counts[ending] += 1
                break
    return max(counts, key=lambda e: (counts[e], e == "\n"))


# ---- sections and chunks ----------------------------------------------------------------

@dataclass
class _Section:
    path: list[str]            # the headings above and of this section, outermost first
    blocks: list[Block]


def _sections(parts: list[Block]) -> list[_Section]:
    sections: list[_Section] = []
    stack: list[tuple[int, str]] = []
    current = _Section([], [])
    for block in parts:
        if block.kind == "heading":
            if current.blocks:
                sections.append(current)
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, plain_heading(block.title)))
            current = _Section([title for _, title in stack], [block])
        else:
            current.blocks.append(block)
    if current.blocks:
        sections.append(current)
    return sections


def _units(section_blocks: list[Block]) -> list[tuple[int, int]]:
    """The places a long section may be cut: between blocks, and between a list's
    top-level items. (start, end) line spans."""
    out: list[tuple[int, int]] = []
    for block in section_blocks:
        if block.kind == "list" and len(block.items) > 1:
            edges = [*block.items, block.end]
            out.extend(itertools.pairwise(edges))
        else:
            out.append((block.start, block.end))
    return out


class TokenCounts:
    """estimate_tokens over any run of lines, from sums made once (words never span
    lines): a long note is counted once, not once per way of cutting it."""

    def __init__(self, lines: list[str]) -> None:
        self.sums = [0.0]
        for line in lines:
            self.sums.append(self.sums[-1] + _token_weight(line))

    def __call__(self, start: int, end: int) -> int:
        return math.ceil(self.sums[end] - self.sums[start] - 1e-9)


@dataclass
class _Piece:
    path: list[str]
    start: int
    end: int
    tokens: int
    has_text: bool             # more than a heading


def plan_pieces(parts: list[Block], count: TokenCounts, options: Options
                ) -> tuple[list[_Piece], list[tuple[int, int]]]:
    """The passages a body becomes, and the spans of single blocks over the budget."""
    pieces: list[_Piece] = []
    oversized: list[tuple[int, int]] = []
    for section in _sections(parts):
        has_text = any(b.kind != "heading" for b in section.blocks)
        start, end = section.blocks[0].start, section.blocks[-1].end
        size = count(start, end)
        if size <= options.max_tokens:
            pieces.append(_Piece(section.path, start, end, size, has_text))
            continue
        current: _Piece | None = None
        for unit_start, unit_end in _units(section.blocks):
            unit = count(unit_start, unit_end)
            if unit > options.max_tokens:
                oversized.append((unit_start, unit_end))
            if current is not None and current.tokens + unit <= options.max_tokens:
                current.end, current.tokens = unit_end, count(current.start, unit_end)
                current.has_text = True
                continue
            is_heading = current is None and section.blocks[0].kind == "heading" \
                and unit_end == section.blocks[0].end
            current = _Piece(section.path, unit_start, unit_end, unit, not is_heading)
            pieces.append(current)
    return _joined(count, pieces, options), oversized


def _joined(count: TokenCounts, pieces: list[_Piece], options: Options) -> list[_Piece]:
    """Small pieces (and bare headings) joined to the next while the two fit the budget;
    a bare heading at the end joins the one before."""
    out: list[_Piece] = []
    for piece in pieces:
        if out:
            last = out[-1]
            small = last.tokens < options.min_tokens or not last.has_text
            combined = count(last.start, piece.end)
            if small and (combined <= options.max_tokens or not last.has_text):
                out[-1] = _Piece(last.path if last.has_text else piece.path, last.start,
                                 piece.end, combined, True)
                continue
        out.append(piece)
    if len(out) > 1 and not out[-1].has_text:
        last = out.pop()
        out[-1].end, out[-1].tokens = last.end, count(out[-1].start, last.end)
    return out


# ---- entities ---------------------------------------------------------------------------

def link_entities(text: str, catalog: Catalog, finder: NameFinder) -> list[str]:
    """The catalog entities text names, most-named first (then first named), at most
    MAX_LINKS."""
    counts: dict[str, list[int]] = {}
    for start, end, name in finder.mentions(text):
        spelt = catalog.spellings.get(name)
        if spelt is not None and text[start:end] not in spelt:
            continue
        entity_id = catalog.by_name[name]
        seen = counts.setdefault(entity_id, [0, start])
        seen[0] += 1
    ranked = sorted(counts, key=lambda e: (-counts[e][0], counts[e][1], e))
    return ranked[:MAX_LINKS]


def entity_candidates(lines: list[str], first_line: int, catalog: Catalog,
                      skip: set[int]) -> list[Candidate]:
    """Names in the note that look like entities and are not in the catalog: Latin words
    with inner capitals or digits, runs of capitalised words not opening a sentence,
    terms in CJK title brackets. Counted, most frequent first."""
    found: dict[str, Candidate] = {}
    sentence_starts: set[str] = set()
    for number, line in enumerate(lines):
        if number in skip:
            continue
        text = re.sub(r"`[^`]*`", " ", _LINK.sub(r"\1", line))
        for name, _start in _latin_names(text, sentence_starts):
            _count(found, name, first_line + number + 1)
        for match in _BRACKETED.finditer(text):
            _count(found, match.group(1).strip(), first_line + number + 1)
    known = set(catalog.by_name)
    out = [c for key, c in found.items()
           if key not in known and not (key in sentence_starts and c.mentions < 2)]
    out.sort(key=lambda c: (-c.mentions, c.line, c.name))
    for candidate in out:
        candidate.entity_id = "entity:" + heading_slug(candidate.name)
    return out[:MAX_CANDIDATES]


def _count(found: dict[str, Candidate], name: str, line: int) -> None:
    key = normalize(name)
    if len(key) < 2 or key in _COMMON:
        return
    if key in found:
        found[key].mentions += 1
    else:
        found[key] = Candidate(name, "", 1, line)


def _latin_names(text: str, sentence_starts: set[str]) -> Iterable[tuple[str, int]]:
    run: list[re.Match] = []

    def flush():
        if not run:
            return
        words = [m.group() for m in run]
        opening = _opens_sentence(text, run[0].start())
        while words and words[0].lower() in _COMMON:
            words.pop(0)
            opening = False
        while words and words[-1].lower() in _COMMON:
            words.pop()
        if not words:
            return
        name = " ".join(words)
        distinctive = len(words) > 1 or _distinctive(words[0])
        if opening and len(words) == 1 and not _distinctive(words[0]):
            sentence_starts.add(normalize(name))
        if distinctive or not opening:
            yield name, run[0].start()

    for match in _WORD.finditer(text):
        word = match.group()
        capital = word[0].isupper() or (not word.islower() and _distinctive(word))
        adjacent = run and text[run[-1].end():match.start()] == " "
        if capital and (adjacent or not run):
            run.append(match)
            continue
        yield from flush()
        run = [match] if capital else []
    yield from flush()


def _opens_sentence(text: str, start: int) -> bool:
    """Whether the word at start opens a sentence, a line or a list item (looked at
    backwards from start: a long line costs the same for each word)."""
    index = start - 1
    while index >= 0 and text[index].isspace():
        index -= 1
    if index < 0 or text[index] in _SENTENCE_ENDS:
        return True
    return index < 16 and _MARKER_ONLY.fullmatch(text[:start]) is not None


def _distinctive(word: str) -> bool:
    """A word that is a name wherever it stands: an inner capital (gRPC, PostgreSQL),
    a digit or + (S3, C++), or all capitals (AWS), beyond one letter."""
    return len(word) > 1 and (any(c.isupper() for c in word[1:]) or
                              any(c.isdigit() or c in "+#" for c in word))


# ---- the draft --------------------------------------------------------------------------

def draft_note(note: Note, target: Path, catalog: Catalog, finder: NameFinder,
               options: Options, stem: str) -> Draft:
    """Plan a note's chunks (ids are given later, across every note of the run)."""
    lines = note.lines
    title = _title(note, stem)
    count = TokenCounts(lines)
    pieces, oversized = plan_pieces(note.parts, count, options)
    extra_tags = _meta_tags(note.meta)
    doc_title = normalize(title)
    chunks: list[DraftChunk] = []
    linked: set[str] = set()
    for piece in pieces:
        text = "".join(lines[piece.start:piece.end])
        entities = link_entities(text, catalog, finder)
        linked.update(entities)
        # the title tags every chunk of a note cut in several: too broad a tag (CTX505)
        path = [t for t in piece.path if len(pieces) == 1 or normalize(t) != doc_title]
        tags = _unique(path + extra_tags)
        chunks.append(DraftChunk("", piece.start, piece.end, tags, entities, piece.tokens))
    code = {i for block in note.parts if block.kind in ("code", "heading", "table")
            for i in range(block.start, block.end)}
    candidates = entity_candidates(lines, note.body_line, catalog, code)
    declared = [catalog.entities[e] for e in sorted(linked) if e not in catalog.in_kb]
    draft = Draft(note.source, target, title, chunks, declared, candidates)
    for start, end in oversized:
        size = count(start, end)
        draft.diagnostics.append(diag(
            "CTX902", f"a block of about {size} tokens (lines {note.body_line + start + 1}-"
            f"{note.body_line + end}) is over the budget of {options.max_tokens} and is "
            "never cut (a code block, table, paragraph or list item): it is one chunk",
            note.source, note.body_line + start + 1, 1))
    return draft


def _title(note: Note, stem: str) -> str:
    title = note.meta.get("title")
    if isinstance(title, str) and title.strip():
        return title.strip()
    for block in note.parts:
        if block.kind == "heading" and block.level == 1 and plain_heading(block.title):
            return plain_heading(block.title)
        if block.kind == "heading":
            break
    words = re.sub(r"^[0-9]+[-_. ]*", "", stem).replace("-", " ").replace("_", " ").strip()
    return words[:1].upper() + words[1:] if words else stem


def _meta_tags(meta: dict[str, Any]) -> list[str]:
    tags = meta.get("tags", meta.get("keywords"))
    if isinstance(tags, str):
        tags = [t for t in re.split(r"[,\s]+", tags) if t]
    if not isinstance(tags, list):
        return []
    return [str(t).lstrip("#").strip() for t in tags
            if isinstance(t, (str, int, float)) and not isinstance(t, bool)
            and str(t).lstrip("#").strip()]


def _unique(values: list[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for value in values:
        key = normalize(value)
        if key and key not in seen:
            seen.add(key)
            out.append(value)
    return out


def assign_ids(drafts: list[Draft], notes: list[Note], taken: set[str],
               category: str) -> None:
    """Ids from headings, unique across the run and the knowledge base: `category:topic`
    for a section, `category:topic-2` for its second part; a topic two sections of the
    run share (or the knowledge base has) is qualified by its note's name, and any id
    still taken is numbered."""
    planned: list[tuple[DraftChunk, str, int, str]] = []  # chunk, topic, part, note slug
    for draft, note in zip(drafts, notes, strict=True):
        note_slug = slug(Path(note.source).stem.split(".")[0]) or heading_slug(draft.title)
        topic, part = slug(draft.title) or heading_slug(draft.title), 0
        for chunk in draft.chunks:
            heading = _own_heading(note.parts, chunk)
            if heading is not None:
                topic, part = heading_slug(heading), 1
            else:
                part += 1
            planned.append((chunk, topic, part, note_slug))
    sections: dict[str, int] = {}
    for _, topic, part, _ in planned:
        if part <= 1:
            sections[topic] = sections.get(topic, 0) + 1
    used = set(taken)
    for chunk, topic, part, note_slug in planned:
        if (sections.get(topic, 0) > 1 or f"{category}:{topic}" in taken) \
                and not topic.startswith(note_slug):
            topic = f"{note_slug}-{topic}"
        wanted = f"{category}:{topic}" + (f"-{part}" if part > 1 else "")
        candidate, number = wanted, 2
        while candidate in used:
            candidate = f"{wanted}-{number}"
            number += 1
        used.add(candidate)
        chunk.id = candidate


def _own_heading(parts: list[Block], chunk: DraftChunk) -> str | None:
    """The heading a chunk's passage opens with (the first, where it holds several)."""
    for block in parts:
        if chunk.start <= block.start < chunk.end:
            return plain_heading(block.title) if block.kind == "heading" else None
    return None


def render(draft: Draft, note: Note) -> str:
    """The draft's text: a new frontmatter, then the body with chunk tags added."""
    nl = note.newline
    front = _frontmatter(draft, note.meta)
    body: list[str] = []
    starts = {c.start: c for c in draft.chunks}
    ends = {c.end: c for c in draft.chunks}
    for number, line in enumerate(note.lines):
        if number in starts:
            body.append(f'<Chunk id="{starts[number].id}">{nl}')
        body.append(line)
        if number + 1 in ends:
            if not line.endswith(("\n", "\r")):
                body.append(nl)
            body.append(f"</Chunk>{nl}")
    return nl.join(front.split("\n")) + "".join(body)


def _scalar(value) -> str:
    return scalar_text(value) if isinstance(value, str) else json.dumps(value)


def _frontmatter(draft: Draft, meta: dict[str, Any]) -> str:
    out = ["---", f"title: {_scalar(draft.title)}"]
    kept = {k: _plain(v) for k, v in meta.items()
            if isinstance(k, str) and k not in Frontmatter.model_fields
            and k not in ("tags", "keywords")}
    if kept:
        out.append(yaml.safe_dump(kept, sort_keys=False, allow_unicode=True,
                                  width=1_000_000).rstrip("\n"))
    if draft.declared:
        out.append("entities:")
        for entity in draft.declared:
            out.append(f"  - id: {entity.id}")
            out.append(f"    name: {_scalar(entity.name)}")
            out.append(f"    type: {entity.type}")
            out.append(f"    aliases: {flow_list(list(entity.aliases))}")
    if draft.candidates:
        out.append("# Entity candidates for review: names in the text that no entity of the")
        out.append("# catalog has. Declare the ones you keep under entities: (type and id")
        out.append("# to check) and link them in the chunks' entities:.")
        for candidate in draft.candidates:
            plural = "s" if candidate.mentions > 1 else ""
            out.append(f"#  - {{id: {candidate.entity_id}, name: {_scalar(candidate.name)}, "
                       f"type: concept}}  # {candidate.mentions} mention{plural}, line "
                       f"{candidate.line}")
    created = _created(meta)
    out.append("chunks:")
    for chunk in draft.chunks:
        out.append(f"  - id: {chunk.id}")
        out.append(f"    tags: {flow_list(chunk.tags)}")
        out.append(f"    entities: {flow_list(chunk.entities)}")
        if created:
            out.append(f"    created_at: {_scalar(created)}")
    out.append("---")
    return "\n".join(out) + "\n"


def _plain(value):
    """A YAML value with dates as ISO strings (what the draft's reader gets back)."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _created(meta: dict[str, Any]) -> str | None:
    for key in ("created_at", "created", "date"):
        value = _plain(meta.get(key))
        if isinstance(value, str) and _ISO_DATE.fullmatch(value.strip()):
            return value.strip()
    return None
