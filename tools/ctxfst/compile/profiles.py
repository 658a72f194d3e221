"""Entity profiles: each entity with the chunks that mention it, and the text to embed.

Field names follow upstream's entity-profiles.json; `representation` uses its line
prefixes (name:, type:, aliases, tags, context, content, related).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from ..document.text import tokens
from .chunks import Export

PROFILES_SCHEMA_VERSION = "1.0.0"
MAX_CONTEXTS = 5
MAX_EXCERPTS = 3
TOP_KEYWORDS = 10
KEYWORD_CHUNKS = 50  # keywords come from an entity's 50 most important chunks
EXCERPT_WORDS = 80
_PRIORITY_RANK = {"critical": 0, "high": 1, "medium": 2, "low": 3}
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")


def truncate_words(text: str, limit: int = EXCERPT_WORDS) -> str:
    """Cut text to about `limit` words, counting two CJK characters as one word."""
    words = text.split()
    budget, kept = 0.0, []
    for word in words:
        cjk = len(_CJK.findall(word))
        cost = (cjk / 2) + (1 if len(word) > cjk else 0)
        if budget + cost > limit and kept:
            if cjk:  # split a long CJK run instead of dropping it whole
                room = int((limit - budget) * 2)
                if room > 0:
                    kept.append(word[:room])
            break
        kept.append(word)
        budget += cost
    return " ".join(kept)


def build_profiles(export: Export) -> list[dict[str, Any]]:
    names = {entity["id"]: entity.get("name", entity["id"]) for entity in export.entities}
    mentions: dict[str, list[dict]] = defaultdict(list)
    chunk_tokens: dict[str, Counter] = {}  # each chunk tokenised once, when first needed

    def tokens_of(chunk: dict) -> Counter:
        if chunk["id"] not in chunk_tokens:
            chunk_tokens[chunk["id"]] = Counter(tokens(chunk.get("context", "") + " "
                                                       + chunk.get("content", "")))
        return chunk_tokens[chunk["id"]]

    for chunk in export.chunks:
        for entity_id in dict.fromkeys(chunk.get("entities", [])):
            if entity_id in names:
                mentions[entity_id].append(chunk)
    profiles = []
    for entity in export.entities:
        entity_id = entity["id"]
        chunks = mentions.get(entity_id, [])
        # Most important chunks first, so capped lists keep what matters.
        ranked = sorted(chunks, key=lambda c: (_PRIORITY_RANK.get(c.get("priority"), 2), c["id"]))
        tags = list(dict.fromkeys(tag for chunk in ranked for tag in chunk.get("tags", [])))
        contexts = [c["context"] for c in ranked if c.get("context")][:MAX_CONTEXTS]
        excerpts = [truncate_words(c["content"])
                    for c in [c for c in ranked if c.get("content")][:MAX_EXCERPTS]]
        related = sorted({names[other] for chunk in chunks for other in chunk.get("entities", [])
                          if other != entity_id and other in names})
        counts: Counter = Counter()
        for chunk in ranked[:KEYWORD_CHUNKS]:
            counts.update(tokens_of(chunk))
        keywords = [word for word, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
                    [:TOP_KEYWORDS]]
        profile = {
            "id": entity_id, "name": entity.get("name", ""), "type": entity.get("type", ""),
            "aliases": entity.get("aliases", []),
            "mentioned_chunks": sorted(c["id"] for c in chunks),
            "mention_count": len(chunks),
            "tags": tags, "contexts": contexts, "content_excerpts": excerpts,
            "related_entities": related, "keywords": keywords,
        }
        for key in ("preconditions", "postconditions", "related_skills"):
            if entity.get(key):
                profile[key] = entity[key]
        profile["representation"] = representation(profile)
        profiles.append(profile)
    return profiles


def representation(profile: dict[str, Any]) -> str:
    lines = [f"name: {profile['name']}", f"type: {profile['type']}"]
    if profile["aliases"]:
        lines.append("aliases " + " ".join(profile["aliases"]))
    if profile["tags"]:
        lines.append("tags " + " ".join(profile["tags"]))
    lines += ["context " + context for context in profile["contexts"]]
    lines += ["content " + excerpt for excerpt in profile["content_excerpts"]]
    if profile["related_entities"]:
        lines.append("related " + " ".join(profile["related_entities"]))
    return "\n".join(lines)


def dangling_refs(export: Export) -> list[str]:
    """Entity ids that chunks name but no document declares (sorted)."""
    declared = {entity["id"] for entity in export.entities}
    return sorted({ref for chunk in export.chunks for ref in chunk.get("entities", [])
                   if ref not in declared})


def profiles_document(profiles: list[dict[str, Any]], dangling: list[str]) -> dict[str, Any]:
    return {
        "meta": {"schema_version": PROFILES_SCHEMA_VERSION, "input": "chunks.json",
                 "source_type": "ctxfst-export", "profile_type": "entity-profiles",
                 "entity_count": len(profiles), "max_contexts": MAX_CONTEXTS,
                 "top_keywords": TOP_KEYWORDS, "dangling_chunk_entity_refs": dangling},
        "entities": profiles,
    }


def entities_table(profiles: list[dict[str, Any]]):
    import pyarrow as pa

    strings = pa.list_(pa.string())

    def column(name: str, kind=None, default=None):
        return pa.array([p.get(name, default) for p in profiles], kind)

    table = pa.table({
        "entity_id": column("id", pa.string()),
        "name": column("name", pa.string()),
        "type": column("type", pa.string()),
        "aliases": column("aliases", strings, []),
        "mentioned_chunks": column("mentioned_chunks", strings, []),
        "mention_count": column("mention_count", pa.int32()),
        "tags": column("tags", strings, []),
        "contexts": column("contexts", strings, []),
        "content_excerpts": column("content_excerpts", strings, []),
        "related_entities": column("related_entities", strings, []),
        "keywords": column("keywords", strings, []),
        "preconditions": column("preconditions", strings, []),
        "postconditions": column("postconditions", strings, []),
        "related_skills": column("related_skills", strings, []),
        "representation": column("representation", pa.string()),
    })
    return table.replace_schema_metadata({"ctxfst.artifact": "entities",
                                          "ctxfst.schema_version": PROFILES_SCHEMA_VERSION})
