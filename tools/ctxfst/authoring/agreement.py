"""How far drafts agree with a hand-made CtxFST document of the same notes: chunk
boundaries (passages matched by their words) and entity links (on matched passages)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..document.model import ParsedDocument
from ..document.text import jaccard, tokens

SAME_PASSAGE = 0.5   # word-set Jaccard from which two passages are one chunk, cut alike
RELATED = 0.2        # below this a hand-made chunk has no counterpart in the notes


@dataclass
class Agreement:
    reference_chunks: int = 0
    draft_chunks: int = 0
    same_boundaries: int = 0          # reference chunks a draft chunk matches one to one
    without_counterpart: list[str] = field(default_factory=list)
    pairs: list[tuple[str, str, float]] = field(default_factory=list)
    links_agreed: int = 0
    links_drafted: int = 0
    links_reference: int = 0

    @property
    def precision(self) -> float:
        return self.links_agreed / self.links_drafted if self.links_drafted else 0.0

    @property
    def recall(self) -> float:
        return self.links_agreed / self.links_reference if self.links_reference else 0.0


def _passages(docs: list[ParsedDocument]) -> dict[str, tuple[set[str], set[str]]]:
    """chunk id -> (its words, its entity ids)."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    for doc in docs:
        for _, record in doc.chunks:
            body = doc.bodies.get(record.id)
            out[record.id] = (set(tokens(body.content if body else "")), set(record.entities))
    return out


def compare(drafts: list[ParsedDocument], reference: list[ParsedDocument]) -> Agreement:
    ours, theirs = _passages(drafts), _passages(reference)
    result = Agreement(reference_chunks=len(theirs), draft_chunks=len(ours))

    def best(words: set[str], among: dict) -> tuple[str | None, float]:
        scored = [(jaccard(words, other[0]), key) for key, other in among.items()]
        if not scored:
            return None, 0.0
        score, key = max(scored, key=lambda item: (item[0], item[1]))
        return key, score

    for ref_id in sorted(theirs):
        words, ref_links = theirs[ref_id]
        draft_id, score = best(words, ours)
        if draft_id is None or score < RELATED:
            result.without_counterpart.append(ref_id)
            continue
        result.pairs.append((ref_id, draft_id, round(score, 3)))
        back, _ = best(ours[draft_id][0], theirs)
        if back == ref_id and score >= SAME_PASSAGE:
            result.same_boundaries += 1
        draft_links = ours[draft_id][1]
        result.links_agreed += len(draft_links & ref_links)
        result.links_drafted += len(draft_links)
        result.links_reference += len(ref_links)
    return result
