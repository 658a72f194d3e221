"""The shapes of the commands' `--format json` outputs, as pydantic models: the source of
schemas/*-output.schema.json (ctxfst.schemas writes them; tests check every output
against them). Only ctxfst.schemas imports this module: the commands build plain dicts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .diagnostics import OUTPUT_SCHEMA_VERSION
from .retrieval import MODES
from .runtime.loop import STOP_REASONS
from .runtime.state import RESULTS, STATE_SCHEMA_VERSION

Version = Literal[OUTPUT_SCHEMA_VERSION]  # type: ignore[valid-type]


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Open(BaseModel):
    """An object that may gain fields in a minor version."""

    model_config = ConfigDict(extra="allow")


class DiagnosticRecord(Closed):
    code: str = Field(pattern=r"^CTX\d{3}$")
    severity: Literal["error", "warning", "info"]
    message: str
    path: str
    line: int = Field(ge=1)
    column: int = Field(ge=1)


# ---- ctxfst query ----------------------------------------------------------------------

class QueryHit(Closed):
    chunk_id: str
    score: float
    title: str = Field(description="the title of the chunk's document")
    source: str = Field(description="the document's path, relative to the project")
    line_start: int = Field(ge=1, description="the <Chunk> element's first line in source")
    line_end: int = Field(ge=1, description="its last line")
    context: str
    content: str = Field(description="the chunk's text, as compiled")
    via: list[str] = Field(description="the graph paths or entities that led to the chunk")


class QuerySeed(Open):
    name: str
    entity: str | None = None
    score: float | None = None
    by: str | None = Field(None, description="what matched: name, vector, chunk ...")


class QueryExpanded(Open):
    entity: str
    name: str
    activation: float


class QueryOutput(Closed):
    """The output of `ctxfst query --format json`."""

    schema_version: Version
    query: str
    mode: Literal[MODES]  # type: ignore[valid-type]
    results: list[QueryHit]
    seeds: list[QuerySeed]
    expanded: list[QueryExpanded]


# ---- ctxfst eval -----------------------------------------------------------------------

class EvalScores(Open):
    hit_at_k: int = Field(ge=0, description="queries with a relevant chunk in the top k")
    relevant_in_top_k: int = Field(ge=0)
    possible: int = Field(ge=0, description="k times the number of queries")
    precision_at_k: float = Field(ge=0, le=1, description="relevant_in_top_k / possible")
    recall_at_k: float = Field(ge=0, le=1, description="the mean share of each query's "
                               "relevant chunks found in its top k")
    entity_recall: float = Field(ge=0, le=1)
    mrr: float = Field(ge=0, le=1)
    ndcg: float = Field(ge=0, le=1)


class EvalRanked(Closed):
    chunk_id: str
    relevant: bool


class EvalQuery(Open):
    id: str
    query: str
    half: Literal["dev", "test"] = Field(description="the half its id's seeded hash puts "
                                         "it in")
    results: dict[str, list[EvalRanked]] = Field(description="each mode's top k")


class EvalOutput(Closed):
    """The output of `ctxfst eval --format json`."""

    schema_version: Version
    k: int = Field(ge=1)
    queries: int = Field(ge=0)
    half: Literal["dev", "test"] | None = Field(None, description="the half scored "
                                                "(--half); absent: every query")
    modes: dict[str, EvalScores]
    per_query: list[EvalQuery]


# ---- ctxfst plan / select / run --------------------------------------------------------

class PlanStep(Closed):
    step: int = Field(ge=1)
    skill: str
    preconditions_met: list[str]
    must_not_hold: list[str]
    adds: list[str]
    removes: list[str]
    reaches_goal: bool
    cost: float


class PlanAlternative(Closed):
    steps: list[str]
    cost: float
    why_not: str


class PlanOutput(Closed):
    """The output of `ctxfst plan --format json` (a plan, or why there is none)."""

    schema_version: Version
    goal: str
    solved: bool
    algorithm: Literal["astar", "ucs", "greedy"]
    expanded: int = Field(ge=0, description="search states expanded")
    steps: list[str] | None = None
    cost: float | None = None
    validated: bool | None = None
    explanation: list[PlanStep] | None = Field(None, description="with --explain")
    alternatives: list[PlanAlternative] | None = Field(None, description="with --explain")
    unreachable: list[str] | None = Field(None, description="unsolved: goal facts no "
                                             "skill sequence reaches")
    reason: str | None = None


class SelectCandidate(Closed):
    skill: str
    cost: float
    distance: float | None = Field(description="to the goal in the graph; null: none")
    via: str | None = Field(description="the relation its shortest way to the goal "
                                           "starts with (REQUIRES, LEADS_TO, SIMILAR); null "
                                           "when its effect is the goal or there is none")
    applicable: bool
    reason: str


class SelectOutput(Closed):
    """The output of `ctxfst select --format json`."""

    schema_version: Version
    goal: str
    goal_reached: bool
    selected: str | None
    candidates: list[SelectCandidate]


class CompletedSkill(Open):
    skill: str
    result: Literal[RESULTS]  # type: ignore[valid-type]
    timestamp: str
    summary: str | None = None


class Subgraph(Open):
    nodes: list[str]
    edges: list[dict[str, Any]]


class WorldStateOutput(Closed):
    """A world state: `.ctxfst/world-state.json`, and the output of `ctxfst state
    init|show|add|remove|complete|subgraph|replay --format json`."""

    schema_version: Literal[STATE_SCHEMA_VERSION]  # type: ignore[valid-type]
    session_id: str
    lineage: str
    serial: int = Field(ge=1)
    goal: str
    active_states: list[str]
    completed_skills: list[CompletedSkill]
    current_subgraph: Subgraph
    created_at: str
    updated_at: str


class StateEvent(Open):
    type: Literal["init", "add", "remove", "complete", "subgraph", "external", "step_started",
                  "step_finished"]
    serial: int = Field(ge=1)
    lineage: str
    at: str


class StateHistoryOutput(Closed):
    """The output of `ctxfst state history --format json`: the event log, oldest first."""

    schema_version: Version
    events: list[StateEvent]


class RunStep(Open):
    skill: str
    status: str
    summary: str


class RunOutput(Closed):
    """The output of `ctxfst run --format json`."""

    schema_version: Version
    stop_reason: Literal[STOP_REASONS]  # type: ignore[valid-type]
    steps: list[RunStep]
    state: WorldStateOutput
    pending_skill: str | None = Field(
        default=None, description="with pending_needs_confirmation: the interrupted skill")


# ---- ctxfst facts ----------------------------------------------------------------------

class FactEvidence(Open):
    path: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    excerpt: str
    source_type: str
    source_id: str
    extractor: str
    confidence: float


class Fact(Open):
    fact_id: str
    entity_type: str
    entity_id: str
    namespace: str
    key: str
    value: str
    value_norm: str
    value_type: str
    confidence: float = Field(ge=0, le=1)
    freshness_at: str | None
    is_active: bool
    evidence_count: int = Field(ge=0)
    evidence: list[FactEvidence]


class FactDetail(Fact):
    """The output of `ctxfst facts show --format json`: one fact with all its evidence."""

    schema_version: Version
    tenant_id: str
    extract_version: str
    created_run_id: str
    created_build_seq: int
    updated_build_seq: int
    invalidated_run_id: str | None
    invalidated_build_seq: int | None
    invalidation_reason: str | None


class FactsAskOutput(Closed):
    """The output of `ctxfst facts ask --format json`: yes, no or unknown, and why."""

    schema_version: Version
    tenant: str
    op: Literal["exists", "count", "list"]
    filters: dict[str, Any]
    min_confidence: float
    build_seq: int
    answer: Literal["yes", "no", "unknown"]
    count: int | None
    count_exact: bool
    facts_matched: int = Field(ge=0)
    below_threshold: int = Field(ge=0)
    completeness: dict[str, Any]
    facts: list[Fact]
    entities: list[dict[str, Any]]
    fallback: dict[str, Any]
    reason: str
    truncated: bool


class FactsListOutput(Closed):
    """The output of `ctxfst facts list --format json`."""

    schema_version: Version
    tenant: str
    build_seq: int
    total: int = Field(ge=0)
    facts: list[Fact]
    truncated: bool


# ---- ctxfst rule -----------------------------------------------------------------------

class RuleEntry(Closed):
    code: str = Field(pattern=r"^CTX\d{3}$")
    severity: Literal["error", "warning", "info"]
    title: str
    silenceable: bool = Field(description="a warning or info: [lint] settings and noqa "
                                          "comments can hide it; errors never")
    reported_by: Literal["validate", "lint"] = Field(
        description="validate: validate, lint and the build; lint: ctxfst lint only")
    meaning: str = Field(description="the code's row in docs/rules.md")
    group: str = Field(description="its section of docs/rules.md")
    notes: str = Field(description="what the section says of all its codes (may be empty)")


class RuleOutput(Closed):
    """The output of `ctxfst rule [CODE] --format json`."""

    schema_version: Version
    rules: list[RuleEntry]


# ---- ctxfst serve (HTTP) ---------------------------------------------------------------

class ServedBuild(Closed):
    manifest_sha256: str = Field(description="the sha256 of the served build's manifest.json")
    chunks: int = Field(ge=0)
    model: str = Field(description="the embedding model of its vectors")
    loaded_at: float = Field(description="when it was loaded (seconds since the epoch)")


class ServeHealthOutput(Closed):
    """`GET /health` of `ctxfst serve`."""

    schema_version: Version
    status: Literal["ok", "no_build"]
    build: ServedBuild | None = Field(description="the build answers come from")
    stale: str | None = Field(description="why the sources differ from the build, at "
                                             "the last check; null when they do not")
    load_error: str | None = Field(description="why the newest build could not be loaded "
                                                  "(the one before is served)")
    pid: int = Field(description="the process that answered (with --workers, one of "
                                 "several, each with its own loaded build)")


class ServeErrorDetail(Closed):
    code: str = Field(description="stable: bad_request, not_found, stale_build, no_build ...")
    message: str


class ServeErrorOutput(Closed):
    """Any `ctxfst serve` answer with a status other than 200."""

    schema_version: Version
    error: ServeErrorDetail


# ---- ctxfst chunk ----------------------------------------------------------------------

class DraftedChunk(Closed):
    id: str
    line_start: int = Field(ge=1, description="the passage's first line in the note's body")
    line_end: int = Field(ge=1, description="its last line")
    tokens: int = Field(ge=0, description="estimated: 4/3 a Latin word, 1 a CJK character")
    tags: list[str]
    entities: list[str] = Field(description="catalog entities the passage names")


class EntityCandidate(Closed):
    name: str
    id: str = Field(description="the id proposed (to review: it is not declared)")
    mentions: int = Field(ge=1)
    line: int = Field(ge=1, description="the first mention's line in the note")


class ChunkDraft(Closed):
    note: str
    draft: str = Field(description="the file the draft is (or would be) written to")
    title: str
    chunks: list[DraftedChunk]
    declared: list[str] = Field(description="entities of a --catalog file the draft "
                                            "declares, since its knowledge base lacks them")
    candidates: list[EntityCandidate]


class ChunkOutput(Closed):
    """The output of `ctxfst chunk --format json`."""

    schema_version: Version
    written: list[str] = Field(description="empty with --dry-run or when anything failed")
    drafts: list[ChunkDraft]
    skipped: list[str] = Field(description="CtxFST documents found among the notes")
    diagnostics: list[DiagnosticRecord]


# ---- ctxfst contextualize ----------------------------------------------------------------

class ContextAnswer(Closed):
    path: str = Field(description="the document")
    chunk_id: str
    cached: bool = Field(description="answered from .ctxfst/cache/ (no request)")
    prompt_chars: int = Field(ge=0, description="the size of what is (or would be) asked")
    context: str | None = Field(description="the context written; null with --dry-run "
                                               "or when the request failed")
    error: str | None = Field(description="why the request failed, after its retries")


class ContextualizeOutput(Closed):
    """The output of `ctxfst contextualize --format json`."""

    schema_version: Version
    dry_run: bool
    chunks: list[ContextAnswer] = Field(description="every chunk that had no context")
    written: list[str] = Field(description="the documents written")
    diagnostics: list[DiagnosticRecord]


# name in schemas/ -> model; every one of them has OUTPUT_SCHEMA_VERSION's version but the
# world state, which is the state file's
OUTPUT_MODELS: dict[str, type[BaseModel]] = {
    "query-output": QueryOutput,
    "eval-output": EvalOutput,
    "plan-output": PlanOutput,
    "select-output": SelectOutput,
    "run-output": RunOutput,
    "world-state": WorldStateOutput,
    "state-history-output": StateHistoryOutput,
    "facts-ask-output": FactsAskOutput,
    "facts-show-output": FactDetail,
    "facts-list-output": FactsListOutput,
    "rule-output": RuleOutput,
    "chunk-output": ChunkOutput,
    "contextualize-output": ContextualizeOutput,
    "serve-health-output": ServeHealthOutput,
    "serve-error-output": ServeErrorOutput,
}
