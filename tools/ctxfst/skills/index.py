"""The skill index: every skill as an action contract (STRIPS-ready), plus exports."""

from __future__ import annotations

import hashlib
import html
from pathlib import Path
from typing import Any

from .model import ParsedSkill

SKILL_INDEX_VERSION = "1.0.0"


def skill_node_id(name: str) -> str:
    """The entity-graph node of a skill."""
    return f"skill:{name}"


def index_entry(skill: ParsedSkill, root: Path) -> dict[str, Any]:
    record = skill.record
    assert record is not None
    effects = record.split_conditions()
    from ..files import project_relative

    path = project_relative(root, skill.fs_path, skill.path)
    return {
        "name": record.name,
        "node_id": skill_node_id(record.name),
        "description": record.description,
        "path": path,
        "dialect": skill.dialect,
        "preconditions": effects["pre_positive"],
        "negative_preconditions": effects["pre_negative"],
        "add_effects": effects["add"],
        "delete_effects": effects["delete"],
        "cost": record.cost_number(),
        "cost_level": record.cost if isinstance(record.cost, str) else None,
        "idempotent": bool(record.idempotent),
        "related_nodes": list(record.related_nodes),
        "related_skills": list(record.related_skills),
        "license": record.license,
        "compatibility": record.compatibility,
        "allowed_tools": (skill.frontmatter or {}).get("allowed-tools"),
        "script": _script(skill),
        "body_sha256": hashlib.sha256(skill.body.encode("utf-8")).hexdigest(),
    }


def _script(skill: ParsedSkill) -> str | None:
    """The executable the `command` executor runs: `script` at the top level or in
    metadata, a path inside the skill's folder."""
    data = skill.frontmatter or {}
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    value = data.get("script", metadata.get("script"))
    return value if isinstance(value, str) and value else None


def build_index(skills: list[ParsedSkill], root: Path) -> dict[str, Any]:
    entries = sorted((index_entry(s, root) for s in skills if s.record is not None),
                     key=lambda entry: entry["name"])
    return {"schema_version": SKILL_INDEX_VERSION, "skills": entries}


def skills_table(entries: list[dict[str, Any]]):
    import pyarrow as pa

    strings = pa.list_(pa.string())

    def column(name: str, kind):
        return pa.array([entry[name] for entry in entries], kind)

    table = pa.table({
        "name": column("name", pa.string()),
        "node_id": column("node_id", pa.string()),
        "description": column("description", pa.string()),
        "path": column("path", pa.string()),
        "dialect": column("dialect", pa.string()),
        "preconditions": column("preconditions", strings),
        "negative_preconditions": column("negative_preconditions", strings),
        "add_effects": column("add_effects", strings),
        "delete_effects": column("delete_effects", strings),
        "cost": column("cost", pa.float64()),
        "idempotent": column("idempotent", pa.bool_()),
        "related_nodes": column("related_nodes", strings),
        "related_skills": column("related_skills", strings),
        "body_sha256": column("body_sha256", pa.string()),
    })
    return table.replace_schema_metadata({"ctxfst.artifact": "skills",
                                          "ctxfst.schema_version": SKILL_INDEX_VERSION})


def graph_nodes_and_links(entries: list[dict[str, Any]], entities: list[dict[str, Any]]):
    """Skill nodes (type action) for the entity graph, and an IMPLIES edge from each
    action entity that names a skill in related_skills to that skill's node."""
    nodes = []
    for entry in entries:
        nodes.append({
            "id": entry["node_id"], "name": entry["name"], "type": "action", "aliases": [],
            "mention_count": 0, "chunk_ids": [],
            "preconditions": entry["preconditions"]
            + [f"NOT {state}" for state in entry["negative_preconditions"]],
            "postconditions": entry["add_effects"]
            + [f"NOT {state}" for state in entry["delete_effects"]],
            "related_skills": entry["related_skills"], "skill": entry["name"],
            "path": entry["path"], "cost": entry["cost"],
        })
    names = {entry["name"]: entry["node_id"] for entry in entries}
    links = []
    for entity in entities:
        if entity.get("type") != "action":
            continue
        for name in entity.get("related_skills", []):
            if name in names:
                links.append({"source": entity["id"], "target": names[name],
                              "relation": "IMPLIES",
                              "properties": {"via": "related_skills"}})
    return nodes, links


def to_prompt(entries: list[dict[str, Any]], root: Path | None = None) -> str:
    """The <available_skills> block Agent Skills clients put in a system prompt."""
    lines = ["<available_skills>"]
    for entry in entries:
        location = entry["path"] if root is None else str((root / entry["path"]).resolve())
        lines += ["  <skill>",
                  f"    <name>{html.escape(entry['name'])}</name>",
                  f"    <description>{html.escape(entry['description'])}</description>",
                  f"    <location>{html.escape(location)}</location>",
                  "  </skill>"]
    lines.append("</available_skills>")
    return "\n".join(lines) + "\n"
