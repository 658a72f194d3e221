"""JSON Schemas: in sync with the models, valid, and at least as permissive as upstream's."""

from __future__ import annotations

import copy
import datetime as dt
import json

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxfst import schemas
from ctxfst.document.model import Frontmatter

from .conftest import CH22, REPO, UPSTREAM

SCHEMA_DIR = REPO / "schemas"


def load(name: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())


def frontmatter_of(path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8").split("\n---\n")[0][4:])
    return json.loads(json.dumps(data, default=lambda v: v.isoformat()))


def test_committed_schemas_match_the_models():
    assert schemas.main([]) == 0, "run: python -m ctxfst.schemas --write"


@pytest.mark.parametrize("name", sorted(schemas.SCHEMAS))
def test_schema_is_valid_and_versioned(name):
    schema = load(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"].endswith(":" + schema["x-ctxfst-schema-version"])


DOCS = sorted((REPO / "content").glob("*.md")) + [CH22] + sorted(
    p for p in UPSTREAM.glob("*.md") if p.name != "SOURCE.md")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_documents_match_the_frontmatter_schema(path):
    jsonschema.validate(frontmatter_of(path), load("frontmatter"))


@pytest.mark.parametrize("path", sorted((REPO / "skills").glob("*/SKILL.md"))
                         + sorted(UPSTREAM.glob("skills/*/SKILL.md")), ids=lambda p: p.parent.name)
def test_skills_match_the_skill_schema(path):
    jsonschema.validate(frontmatter_of(path), load("skill"))


def test_json_report_matches_its_schema(cli, tmp_path):
    (tmp_path / "bad.md").write_text("---\nchunks:\n  - id: x:y\n    priority: urgent\n---\n")
    report = cli("validate", tmp_path, "--format", "json").json()
    assert report["diagnostics"]
    jsonschema.validate(report, load("diagnostics"))


# The upstream schema is the floor, with the three constraints its own reference
# validator enforces on top: a positive version, a media type
# from its list, a real ISO date.
UPSTREAM_FLOOR = json.loads((UPSTREAM / "schema.json").read_text())
_chunk = UPSTREAM_FLOOR["properties"]["chunks"]["items"]["properties"]
_chunk["version"]["minimum"] = 1
_chunk["type"]["enum"] = ["text", "image", "video", "audio"]

_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
_json = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)


def from_schema(schema: dict) -> st.SearchStrategy:
    """Instances of the JSON Schema subset upstream's schemas use (generated here because
    hypothesis-jsonschema does not run on current Hypothesis)."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True)
        if schema.get("format") == "date":
            return st.dates().map(dt.date.isoformat)
        return st.text(max_size=40)
    if kind == "integer":
        return st.integers(min_value=schema.get("minimum"), max_value=10**6)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {})),
                        min_size=schema.get("minItems", 0), max_size=4)
    if kind == "object":
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        optional = sorted(set(properties) - required)

        @st.composite
        def build(draw):
            chosen = required | set(draw(st.lists(st.sampled_from(optional), unique=True))
                                    if optional else set())
            result = {key: draw(from_schema(properties[key])) for key in sorted(chosen)}
            if schema.get("additionalProperties", True) is not False:
                extra = draw(st.dictionaries(st.from_regex(r"x-[a-z]{1,6}", fullmatch=True),
                                             _json, max_size=2))
                result.update(extra)
            return result

        return build()
    return _json


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(from_schema(UPSTREAM_FLOOR))
def test_every_upstream_valid_document_is_accepted(document):
    ours = jsonschema.Draft202012Validator(load("frontmatter"))
    errors = [e.message for e in ours.iter_errors(document)]
    assert errors == []
    for chunk in document.get("chunks", []):
        if "created_at" in chunk:
            dt.date.fromisoformat(chunk["created_at"])  # the floor's dates are real dates
    Frontmatter.model_validate(copy.deepcopy(document))
