"""The build, declared once: each stage's inputs, outputs, the settings it reads, its
lineage, its one-line summary and its function. The doit tasks (and so `doit list`), the
manifest's artifact list and lineage, run_results.json and the stage table in
docs/compiler.md are all made from STAGE_TABLE. Adding an artifact is one entry here plus
the function that writes it.

    python -m ctxfst.pipeline.table            # the docs table, in Markdown
    python -m ctxfst.pipeline.table --update docs/compiler.md
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ..artifacts.layout import (
    LEDGER_FILES,
    MANIFEST,
    MANIFEST_INPUTS,
    RUN_RESULTS,
    VECTORS_SCHEMA,
    ledger_copy_name,
    result_name,
)

SCHEMA = "1.0.0"  # every published artifact's schema (or Arrow schema) version today


@dataclass(frozen=True)
class Stage:
    name: str
    doc: str  # what `doit list` says
    run: str  # its function in pipeline/"py"
    reads: tuple[str, ...] = ()  # staged files of earlier stages: a change re-runs this one
    publishes: tuple[tuple[str, str], ...] = ()  # (artifact, schema version) for build/
    keeps: tuple[str, ...] = ()  # staged files for later stages only, never published
    settings: tuple[str, ...] = ()  # ctxfst.toml keys its outputs depend on
    lineage: tuple[str, ...] = ()  # what its artifacts are made from (the manifest says)
    # Project files it reads itself, and a state whose change re-runs it: the function in
    # pipeline/"py" that gives (paths, state).
    sources: str = ""
    source_files: str = ""  # those files, in words (for the docs table)
    after: tuple[str, ...] = ()  # stages that must succeed first (ordering only)
    summary: str = "done"  # its progress line, filled from its recorded counts
    final: bool = False  # publishes every artifact into build/ (the manifest stage)
    # Runs in a forked process beside the stages that follow it, until a stage that
    # reads its outputs waits for it (pipeline/beside.py)
    beside: bool = False
    # Modules a stage imports before it runs (a beside stage: before it forks, so that
    # its own process does not import again what the stages after it need: 0.2 s for
    # Arrow); with Arrow imported, pyarrow's probe for pandas is answered then too
    imports: tuple[str, ...] = ()
    # A view of the published build, after the final stage: it writes its file into
    # build/ itself (not in the manifest), and its task exists only while the Config
    # attribute named here is true.
    opt_in: str = ""
    writes: tuple[str, ...] = ()  # its files in build/ (a view's)

    def enabled(self, config) -> bool:
        return not self.opt_in or bool(getattr(config, self.opt_in))

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.publishes) + self.keeps

    def outputs_for(self, config) -> tuple[str, ...]:
        """What this stage writes with these settings (JSON exports may be off)."""
        return tuple(name for name in self.outputs if exported(config, name))

    def reads_for(self, config) -> tuple[str, ...]:
        return tuple(name for name in self.reads if exported(config, name))


# The JSON exports, in the reference implementation's shapes: each holds the rows of a
# Parquet artifact (chunks.parquet, entities.parquet) that is always made. With
# `json_exports = false` they are neither written nor published.
JSON_EXPORTS = ("chunks.json", "entity-profiles.json")


def exported(config, name: str) -> bool:
    """Whether an artifact is made with these settings."""
    return config.build.json_exports or name not in JSON_EXPORTS


def _published(*names: str) -> tuple[tuple[str, str], ...]:
    return tuple((name, SCHEMA) for name in names)


_MAKERS = (
    Stage("validate", "Validate content/ and skills/ (stops the build on errors, build/ "
          "untouched).", "stage_validate",
          keeps=("validation.json", MANIFEST_INPUTS), settings=("extra_edges",),
          sources="validate_sources",
          source_files="`content/`, `skills/`, `ctxfst.toml`, `content_path` files",
          summary="{files} files, {documents_checked} checked again ({documents_typed} "
                  "typed), {warnings} warning(s)"),
    Stage("compile", "Compile chunks and the entity catalog: chunks.json, chunks.parquet.",
          "stage_compile", reads=("validation.json",),
          publishes=_published("chunks.json", "chunks.parquet"),
          keeps=("catalog.json", "extra-edges.json"), settings=("json_exports",),
          lineage=("inputs",),
          summary="{documents_recompiled} of {documents} documents recompiled, {chunks} "
                  "chunks, {entities} entities"),
    Stage("skills", "Compile skills/*/SKILL.md into the skill index: skill-index.json, "
          "skills.parquet.", "stage_skills",
          publishes=_published("skill-index.json", "skills.parquet"),
          lineage=("inputs:skills",), sources="skill_sources",
          source_files="`skills/*/SKILL.md`", after=("validate",),
          summary="{skills} skills"),
    Stage("profiles", "Build entity profiles: entity-profiles.json, entities.parquet.",
          "stage_profiles", reads=("chunks.parquet", "catalog.json"),
          publishes=_published("entity-profiles.json", "entities.parquet"),
          settings=("json_exports",), lineage=("chunks.parquet",),
          summary="{entities_profiled} of {entities} entity profiles made"),
    Stage("embed", "Embed chunks, entity profiles and skills (cached by model and text).",
          "stage_embed", reads=("chunks.parquet", "entities.parquet", "skills.parquet"),
          publishes=tuple((name, VECTORS_SCHEMA) for name in (
              "chunk_vectors.parquet", "entity_vectors.parquet", "skill_vectors.parquet")),
          settings=("embedding_model", "embed_batch_size"),
          lineage=("chunks.parquet", "entities.parquet", "skills.parquet"),
          summary="{embedded} of {texts} texts embedded, {cache_hits} from the cache, "
                  "{unchanged} unchanged"),
    Stage("graph", "Build the entity graph: SIMILAR, REQUIRES/LEADS_TO and extra edges.",
          "stage_graph",
          reads=("entities.parquet", "entity_vectors.parquet", "extra-edges.json",
                 "skill-index.json"),
          publishes=_published("entity-graph.json", "edges.parquet"),
          settings=("similar_top_k", "similar_min_score", "similar_exact_max"),
          lineage=("entities.parquet", "entity_vectors.parquet", "skill-index.json",
                   "inputs:extra-edges"),
          summary="{nodes} nodes, {edges} edges"),
    Stage("facts", "Extract semantic facts with evidence; invalidate what sources stopped "
          "saying.", "stage_facts",
          # validation.json changes exactly when a source does; the ledger is read, not
          # tracked
          reads=("validation.json",),
          publishes=_published(*LEDGER_FILES),
          keeps=tuple(ledger_copy_name(name) for name in LEDGER_FILES),
          settings=("facts_tenants", "facts_extractors"),
          lineage=("inputs", "ledger:.ctxfst/facts"), sources="facts_sources",
          beside=True, imports=("pyarrow", "pyarrow.parquet", "pyarrow.compute"),
          source_files="the facts ledger `.ctxfst/facts/`, extractor plugins' versions",
          summary="{extracted} of {sources} sources extracted, {facts_added} facts added, "
                  "{facts_updated} updated, {facts_invalidated} invalidated"),
)

STAGE_TABLE: tuple[Stage, ...] = _MAKERS + (
    Stage("manifest", "Write manifest.json and run_results.json, then publish the "
          "artifacts to build/.", "stage_manifest",
          reads=tuple(name for stage in _MAKERS for name in stage.outputs)
          + tuple(result_name(stage.name) for stage in _MAKERS),
          keeps=(MANIFEST,), final=True,
          summary="{artifacts} artifacts and the manifest published"),
    Stage("report", "Write build/report.html, the HTML report of the published build "
          "(with `report = true`).", "stage_report", reads=(MANIFEST,),
          settings=(), after=("manifest",), opt_in="report", writes=("report.html",),
          source_files="the published build, lint findings of the sources",
          summary="{bytes} bytes, {entities} entities, {findings} finding(s)"),
)

STAGES: tuple[str, ...] = tuple(stage.name for stage in STAGE_TABLE)
BY_NAME: dict[str, Stage] = {stage.name: stage for stage in STAGE_TABLE}
# Published artifact -> (the stage that makes it, its schema version), in table order.
ARTIFACTS: dict[str, tuple[str, str]] = {
    name: (stage.name, version) for stage in STAGE_TABLE for name, version in stage.publishes}
PUBLISHED_FILES: tuple[str, ...] = (*ARTIFACTS, MANIFEST, RUN_RESULTS)


def artifacts_for(config) -> dict[str, tuple[str, str]]:
    """ARTIFACTS as these settings make them."""
    return {name: made for name, made in ARTIFACTS.items() if exported(config, name)}


def published_files_for(config) -> tuple[str, ...]:
    return tuple(name for name in PUBLISHED_FILES if exported(config, name))


def _reads_from(stage: Stage, other: Stage) -> bool:
    """Whether stage reads what other writes (its outputs or its result record)."""
    return bool({*other.outputs, result_name(other.name)} & set(stage.reads))


def waits_for(stage: Stage) -> tuple[str, ...]:
    """The beside stages whose outputs this stage reads: it waits for them."""
    return tuple(other.name for other in STAGE_TABLE
                 if other.beside and _reads_from(stage, other))


def waiters(stage: Stage) -> tuple[str, ...]:
    """The stages that wait for a beside stage."""
    return tuple(other.name for other in STAGE_TABLE if stage.name in waits_for(other))


def _run_order() -> tuple[str, ...]:
    """The order doit takes the stages in: the table's, but each beside stage right
    after the last stage it reads from (or runs after), so that it starts as early as
    it can."""
    order = [stage.name for stage in STAGE_TABLE if not stage.beside]
    for stage in STAGE_TABLE:
        if stage.beside:
            before = {other.name for other in STAGE_TABLE if _reads_from(stage, other)}
            before |= set(stage.after)
            place = max((order.index(name) + 1 for name in before), default=0)
            order.insert(place, stage.name)
    return tuple(order)


RUN_ORDER: tuple[str, ...] = _run_order()


def markdown_table() -> str:
    """The stage table of docs/compiler.md."""

    def names(items) -> str:
        return ", ".join(f"`{item}`" for item in items)

    rows = ["| stage | what it does | reads | publishes to `build/` | keeps for later stages "
            "| settings |", "| --- | --- | --- | --- | --- | --- |"]
    for stage in STAGE_TABLE:
        reads = ("every output above" if stage.final else
                 ", ".join(filter(None, (names(stage.reads), stage.source_files))))
        published = (f"every artifact above, {names((MANIFEST, RUN_RESULTS))}" if stage.final
                     else names(stage.writes) + " (not in the manifest)" if stage.writes
                     else ", ".join(f"`{name}`" + (" (unless `json_exports = false`)"
                                                   if name in JSON_EXPORTS else "")
                                    for name, _ in stage.publishes))
        rows.append(f"| `{stage.name}` | {stage.doc} | {reads} | {published or '-'} | "
                    f"{names(stage.keeps) or '-'} | {names(stage.settings) or '-'} |")
    return "\n".join(rows) + "\n"


BEGIN, END = "<!-- stage-table: python -m ctxfst.pipeline.table -->", "<!-- /stage-table -->"


def update_docs(path: Path) -> bool:
    """Rewrite the table between the markers in path; True when it changed."""
    text = path.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise ValueError(f"{path}: no {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    updated = f"{head}{BEGIN}\n{markdown_table()}{END}{tail}"
    if updated != text:
        path.write_text(updated, encoding="utf-8")
    return updated != text


if __name__ == "__main__":
    if sys.argv[1:2] == ["--update"] and len(sys.argv) == 3:
        print("updated" if update_docs(Path(sys.argv[2])) else "up to date")
    else:
        sys.stdout.write(markdown_table())
