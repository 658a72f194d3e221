"""Where a build keeps what it makes, relative to the project's build folder.

Stages write into the staging folder (build/.staging) and record their results in its
stages/ folder; the last stage publishes the staged artifacts into build/ under a
journal, so that a build killed half way is finished by the next one.
"""

from __future__ import annotations

from pathlib import Path

STAGING = ".staging"
RESULTS = "stages"
LEDGER_COPIES = "ledger"  # the facts stage's copies of its files, for the facts ledger
JOURNAL = ".publish.json"
MANIFEST = "manifest.json"
RUN_RESULTS = "run_results.json"
MANIFEST_VERSION = "1.0.0"
FACTS_FILE = "semantic_facts.parquet"
RUNS_FILE = "semantic_fact_extraction_runs.parquet"
DELTA_FILE = "semantic_facts_delta.json"
LEDGER_FILES = (FACTS_FILE, RUNS_FILE, DELTA_FILE)  # a build's facts, kept in the ledger too
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
