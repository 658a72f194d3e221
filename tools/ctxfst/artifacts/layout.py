"""Where a build keeps what it makes, relative to the project's build folder.

Stages write into the staging folder (build/.staging) and record their results in its
stages/ folder; the last stage publishes the staged artifacts as one folder,
build/.published/<id>, and then switches the link build/current to it: every fixed name
in build/ (build/chunks.parquet) is a link through build/current, so a reader sees one
whole build, the old or the new. A journal lets the next build finish a publication a
kill cut short.
"""

from __future__ import annotations

from pathlib import Path

STAGING = ".staging"
RESULTS = "stages"
LEDGER_COPIES = "ledger"  # the facts stage's copies of its files, for the facts ledger
JOURNAL = ".publish.json"
CURRENT = "current"  # the link to the published build's folder
PUBLISHED = ".published"  # the published builds' folders, by id
VERSION_ID_HEX = 16  # a published folder's id: the first hex digits of its manifest's sha256
MANIFEST = "manifest.json"
MANIFEST_INPUTS = "manifest-inputs.json"  # staged: the manifest's inputs, encoded by validate
RUN_RESULTS = "run_results.json"
MANIFEST_VERSION = "1.0.0"
FACTS_FILE = "semantic_facts.parquet"
RUNS_FILE = "semantic_fact_extraction_runs.parquet"
EVIDENCE_FILE = "semantic_fact_evidence.parquet"
DELTA_FILE = "semantic_facts_delta.json"
# a build's facts, kept in the ledger too
LEDGER_FILES = (FACTS_FILE, EVIDENCE_FILE, RUNS_FILE, DELTA_FILE)
# Each vectors file names its id column as the rows it embeds do (chunks.parquet's
# chunk_id, entities.parquet's entity_id, skills.parquet's node_id), so a join is
# `USING (chunk_id)`. 2.0.0: the column was `id` in every file before.
VECTOR_ID_COLUMNS = {"chunk_vectors": "chunk_id", "entity_vectors": "entity_id",
                     "skill_vectors": "node_id"}
VECTORS_SCHEMA = "2.0.0"


def staging(config) -> Path:
    return config.build_dir / STAGING


def staged(config, name: str) -> Path:
    return staging(config) / name


def ledger_copy_name(name: str) -> str:
    """The staged copy of a facts artifact that publishing links into the facts ledger
    (a file of its own: the ledger must not change with build/'s file edited in place)."""
    return f"{LEDGER_COPIES}/{name}"


def result_name(stage: str) -> str:
    """A stage's result record, as a name in the staging folder."""
    return f"{RESULTS}/{stage}.json"


def result_path(config, stage: str) -> Path:
    return staged(config, result_name(stage))


def version_target(version: str) -> str:
    """What build/current links to, for a published folder's id."""
    return f"{PUBLISHED}/{version}"


def is_version_target(target: str) -> bool:
    """Whether a link's target is one build/current may have (a stranger's link is not)."""
    prefix = f"{PUBLISHED}/"
    version = target[len(prefix):]
    return target.startswith(prefix) and len(version) == VERSION_ID_HEX \
        and all(c in "0123456789abcdef" for c in version)


def fixed_name_target(name: str) -> str:
    """What a fixed name in build/ (chunks.parquet) links to."""
    return f"{CURRENT}/{name}"
