"""JSON Schemas of ctxfst's inputs and outputs, generated from the pydantic models.

`python -m ctxfst.schemas --write` refreshes schemas/; a test fails when the committed
files and the models drift apart.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .diagnostics import OUTPUT_SCHEMA_VERSION
from .document.model import SCHEMA_VERSION, ChunkRecord, Entity, Frontmatter
from .output_models import OUTPUT_MODELS, DiagnosticRecord
from .runtime.state import STATE_SCHEMA_VERSION
from .skills.model import SkillRecord

DRAFT = "https://json-schema.org/draft/2020-12/schema"


class DiagnosticSummary(BaseModel):
    files: int = Field(ge=0)
    errors: int = Field(ge=0)
    warnings: int = Field(ge=0)
    infos: int = Field(ge=0)


class DiagnosticsReport(BaseModel):
    """The output of `ctxfst validate --format json` and `ctxfst lint --format json`."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[OUTPUT_SCHEMA_VERSION]  # type: ignore[valid-type]
    diagnostics: list[DiagnosticRecord]
    summary: DiagnosticSummary


SCHEMAS: dict[str, type[BaseModel]] = {
    "frontmatter": Frontmatter,
    "entity": Entity,
    "chunk": ChunkRecord,
    "skill": SkillRecord,
    "diagnostics": DiagnosticsReport,
    **OUTPUT_MODELS,
}
# the version in a schema's $id: the documents' for the input formats
VERSIONS = {"diagnostics": OUTPUT_SCHEMA_VERSION, "world-state": STATE_SCHEMA_VERSION,
            **{name: OUTPUT_SCHEMA_VERSION for name in OUTPUT_MODELS if name != "world-state"}}


def schema_for(name: str) -> dict:
    model = SCHEMAS[name]
    body = model.model_json_schema()
    version = VERSIONS.get(name, SCHEMA_VERSION)
    return {"$schema": DRAFT, "$id": f"urn:ctxfst:schema:{name}:{version}",
            "x-ctxfst-schema-version": version, **body}


def render(name: str) -> str:
    return json.dumps(schema_for(name), indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def default_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "schemas"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the schema files")
    parser.add_argument("--dir", type=Path, default=default_dir())
    args = parser.parse_args(argv)
    stale = []
    for name in SCHEMAS:
        target = args.dir / f"{name}.schema.json"
        text = render(name)
        if args.write:
            target.write_text(text)
        elif not target.is_file() or target.read_text() != text:
            stale.append(str(target))
    if stale:
        print("out of date: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
