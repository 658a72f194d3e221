"""Deterministic mock knowledge bases: valid CtxFST documents for scale runs and demos."""

from __future__ import annotations

import os
import random
from pathlib import Path


class MockError(Exception):
    """The mock knowledge base cannot be written where asked."""


def prepare_target(out: Path) -> None:
    """generate-mock writes only into a new or empty folder: never into a knowledge base
    (or anything else) that is already there."""
    if not os.path.lexists(out):
        return
    if not out.is_dir():
        raise MockError(f"{out} is a link to nothing" if out.is_symlink()
                        else f"{out} exists and is not a folder")
    if any(out.iterdir()):
        raise MockError(f"{out} is not empty; generate-mock writes only into a new or "
                        "empty folder")


_TOPICS = [
    ("python", "Python", "skill"), ("go", "Go", "skill"), ("typescript", "TypeScript", "skill"),
    ("rust", "Rust", "skill"), ("fastapi", "FastAPI", "framework"), ("hono", "Hono", "framework"),
    ("django", "Django", "framework"), ("react", "React", "library"),
    ("pandas", "Pandas", "library"), ("numpy", "NumPy", "library"),
    ("postgresql", "PostgreSQL", "database"), ("rocksdb", "RocksDB", "database"),
    ("redis", "Redis", "database"), ("kubernetes", "Kubernetes", "platform"),
    ("cloudflare-workers", "Cloudflare Workers", "platform"), ("docker", "Docker", "tool"),
    ("grpc", "gRPC", "protocol"), ("graphql", "GraphQL", "protocol"),
    ("llm-api", "LLM API", "product"), ("telegram-bot-api", "Telegram Bot API", "platform"),
    ("tool-calling", "Tool Calling", "concept"), ("vector-search", "Vector Search", "concept"),
    ("event-sourcing", "Event Sourcing", "architecture"),
    ("microservices", "Microservices", "architecture"),
    ("backend-engineering", "Backend Engineering", "domain"),
    ("observability", "Observability", "domain"),
]
_CATEGORIES = ["skill", "project", "workflow", "reference", "principle", "about"]
_WORDS = ("latency throughput deploy rollout cache index query schema migration retry "
          "queue worker handler endpoint contract test benchmark profile trace metric log "
          "alert budget incident review design tradeoff cost memory cpu network storage "
          "consistency replica partition shard lock transaction batch stream event").split()
_ZH = ("延遲 吞吐量 部署 快取 索引 查詢 結構 遷移 重試 佇列 處理 端點 "
       "測試 效能 追蹤 指標 日誌 告警 設計 取捨 成本 記憶體 網路 儲存").split()


_SYLLABLES = "ka ro mi su te na lo vi pe da zu ri ko ma ne ti ba go".split()
_ZH_CHARS = "山川風雲海星光橋城港林石火水木金土花雪月雷霧河湖島谷原"


def _term(rng: random.Random, chinese: bool) -> str:
    """A made-up project or component name, so documents differ as real ones do."""
    if chinese:
        return "".join(rng.choice(_ZH_CHARS) for _ in range(2))
    return "".join(rng.choice(_SYLLABLES) for _ in range(3))


def _sentence(rng: random.Random, names: list[str], chinese: bool) -> str:
    if chinese:
        words = rng.sample(_ZH, 4)
        return (f"{names[0]} 在{_term(rng, True)}專案的{words[0]}與{words[1]}："
                f"{_term(rng, True)}{words[2]}{words[3]}。")
    words = rng.sample(_WORDS, 5)
    return (f"{names[0]} {words[0]} in {_term(rng, False)} {words[1]} with "
            f"{rng.choice(names)} {words[2]} {_term(rng, False)} {' '.join(words[3:])} "
            f"{rng.randint(2, 999)}ms.").capitalize()


def mock_document(index: int, seed: int, chunks_per_doc: int = 6) -> str:
    rng = random.Random(f"{seed}:{index}")
    chinese = index % 5 == 4
    topics = rng.sample(_TOPICS, 5)
    lines = ["---", f'title: "Notes {index:05d}"', "entities:"]
    for slug, name, kind in topics:
        lines += [f"  - id: entity:{slug}", f"    name: {name}", f"    type: {kind}"]
    lines.append("chunks:")
    bodies = []
    for number in range(chunks_per_doc):
        chunk_id = f"{rng.choice(_CATEGORIES)}:n{index:05d}-{number}"
        linked = rng.sample(topics, rng.randint(1, 3))
        names = [name for _, name, _ in linked]
        context = _sentence(rng, names, chinese) + " " + _sentence(rng, names, chinese)
        lines += [f"  - id: {chunk_id}",
                  f"    tags: [{', '.join(sorted({n for n in names}))}, T{number}]",
                  f"    entities: [{', '.join(f'entity:{slug}' for slug, _, _ in linked)}]",
                  f'    context: "{context}"',
                  f'    created_at: "2026-{1 + index % 12:02d}-{1 + number:02d}"',
                  "    version: 1",
                  f"    priority: {rng.choice(['low', 'medium', 'high', 'critical'])}"]
        if index > 0 and number == 0:
            lines.append(f"    dependencies: [ref:n{rng.randrange(index):05d}]")
        text = "\n".join(_sentence(rng, names, chinese) for _ in range(rng.randint(4, 8)))
        bodies.append(f'<Chunk id="{chunk_id}">\n## {names[0]}\n\n{text}\n</Chunk>\n')
    # A stable anchor chunk other documents depend on.
    lines += [f"  - id: ref:n{index:05d}",
              f'    context: "Reference anchor for notes {index}: what the other notes cite '
              f'when they build on {topics[0][1]}"',
              f"    entities: [entity:{topics[0][0]}]", "    tags: [Anchor]"]
    anchor_text = "\n".join(_sentence(rng, [topics[0][1]], chinese) for _ in range(3))
    bodies.append(f'<Chunk id="ref:n{index:05d}">\n{anchor_text}\n</Chunk>\n')
    return "\n".join(lines) + "\n---\n\n" + "\n".join(bodies)


def generate(out: Path, documents: int, seed: int = 0) -> list[Path]:
    """Write a ctxfst project with `documents` documents under out/content."""
    content = out / "content"
    content.mkdir(parents=True, exist_ok=True)
    (out / "skills").mkdir(exist_ok=True)
    config = out / "ctxfst.toml"
    if not config.exists():
        config.write_text('content_dir = "content"\nskills_dir = "skills"\nbuild_dir = "build"\n')
    written = []
    for index in range(documents):
        path = content / f"{index // 1000:03d}" / f"notes-{index:05d}.ctxfst.md"
        path.parent.mkdir(exist_ok=True)
        path.write_text(mock_document(index, seed), encoding="utf-8")
        written.append(path)
    return written


# A small career knowledge base in the shape of the CtxFST course's example: articles
# whose wording hides their topic (a "personal AI assistant" that is a chat bot in all
# but name; an edge framework that never mentions Python), among look-alike articles.
_CAREER_ENTITIES = {
    "telegram-bot-api": ("Telegram Bot API", "platform"), "nodejs": ("Node.js", "platform"),
    "llm-api": ("LLM API", "product"), "tool-calling": ("Tool Calling", "concept"),
    "personal-ai-assistant": ("Personal AI Assistant", "product"),
    "agent-architecture": ("Agent Architecture", "architecture"),
    "python": ("Python", "skill"), "fastapi": ("FastAPI", "framework"),
    "docker": ("Docker", "tool"), "hono": ("Hono", "framework"),
    "cloudflare-workers": ("Cloudflare Workers", "platform"),
    "typescript": ("TypeScript", "skill"), "edge-computing": ("Edge Computing", "concept"),
}
_CAREER_ARTICLES = [
    ("telegram-bot-basics", ["telegram-bot-api", "nodejs"],
     "Building a Telegram chat bot in Node.js: registering the bot, polling for updates",
     "I built a Telegram chat bot with Node.js. BotFather gives you a token; the bot polls "
     "getUpdates and answers each message in the chat."),
    ("telegram-bot-commands", ["telegram-bot-api", "nodejs"],
     "Telegram chat bot commands, inline keyboards and callback queries",
     "Commands like /start and /help are the first thing users of a Telegram bot try. "
     "Inline keyboards turn a chat bot reply into buttons."),
    ("telegram-bot-webhook", ["telegram-bot-api"],
     "Running a Telegram chat bot on a webhook instead of polling",
     "A Telegram bot can receive updates through a webhook: Telegram posts every message "
     "to your HTTPS endpoint and the bot answers in the same chat."),
    ("telegram-bot-ai-replies", ["telegram-bot-api", "llm-api"],
     "A Telegram chat bot that answers with an LLM API",
     "The simplest AI chat bot on Telegram forwards each message to an LLM API and sends "
     "the completion back to the chat."),
    ("telegram-bot-groups", ["telegram-bot-api"],
     "Moderating Telegram group chats with a bot",
     "A moderation chat bot deletes spam in Telegram groups, welcomes new members and "
     "answers FAQ messages automatically."),
    ("discord-chat-bot", ["llm-api"],
     "A Discord chat bot that answers questions with AI",
     "Our Discord chat bot answers questions in the server with an AI model; slash commands "
     "pick the persona of the bot."),
    ("chat-bot-prompts", ["llm-api"],
     "Prompting an AI chat bot: personas, memory and guard rails",
     "An AI chat bot needs a system prompt for its persona, a short memory of the chat and "
     "guard rails against prompt injection."),
    ("line-chat-bot", ["llm-api"],
     "Building a LINE chat bot with AI answers for customer support",
     "The customer support chat bot on LINE forwards questions to an AI model and answers in "
     "the chat within seconds."),
    ("llm-api-streaming", ["llm-api"],
     "Calling an LLM API with streaming responses and retries",
     "Streaming tokens from an LLM API keeps answers responsive; retries with backoff "
     "handle rate limits."),
    ("personal-assistant", ["personal-ai-assistant", "llm-api", "tool-calling",
                            "agent-architecture", "nodejs"],
     "A personal AI assistant that lives on my laptop and acts on my behalf",
     "My personal AI assistant keeps my calendar, files and notes in order: it plans the "
     "steps of a task, calls tools to carry them out and reports back what it did. It runs "
     "as a small Node.js service on my laptop."),
    ("agent-architecture", ["agent-architecture", "tool-calling", "llm-api"],
     "Agent architecture: a planning loop around a language model and its tools",
     "An agent keeps a loop: read the goal, choose a tool, observe the result, decide again. "
     "The model only proposes; the runtime executes."),
    ("tool-calling", ["tool-calling", "llm-api"],
     "Tool calling: letting a model ask for functions with typed arguments",
     "With tool calling the model returns a function name and JSON arguments; your code "
     "validates them, runs the function and hands the result back."),
    ("nodejs-event-loop", ["nodejs"],
     "The Node.js event loop and why long handlers block everything",
     "Node.js runs JavaScript on one thread; a slow handler stalls every other request, so "
     "move heavy work to workers."),
    ("fastapi-dependencies", ["fastapi", "python"],
     "FastAPI dependency injection for database sessions and auth",
     "FastAPI resolves dependencies per request: a Python function yields a database "
     "session and another checks the bearer token."),
    ("fastapi-performance", ["fastapi", "python"],
     "Tuning FastAPI performance: workers, async endpoints and connection pools",
     "Most FastAPI latency comes from blocking calls inside async endpoints; Python "
     "workers and pooled connections fix the rest."),
    ("fastapi-docker", ["fastapi", "python", "docker"],
     "Deploying FastAPI in Docker behind a reverse proxy",
     "A slim Python image, uvicorn workers and a health endpoint make FastAPI containers "
     "predictable to deploy."),
    ("fastapi-validation", ["fastapi", "python"],
     "Request validation in FastAPI with Pydantic models",
     "FastAPI validates request bodies with Pydantic models and documents them in OpenAPI "
     "for free."),
    ("fastapi-testing", ["fastapi", "python"],
     "Testing FastAPI applications with the test client and fixtures",
     "The FastAPI test client calls endpoints in-process; fixtures override dependencies."),
    ("hono-edge", ["hono", "cloudflare-workers", "typescript", "edge-computing"],
     "A tiny web framework for edge runtimes, with routing and middleware",
     "Hono is a small TypeScript framework: routes, middleware and typed handlers that run "
     "unchanged on Workers, Deno and Bun, in the data centre closest to the user."),
]


def career_document(slug: str, entity_ids: list[str], context: str, text: str) -> str:
    lines = ["---", f'title: "{context}"', "entities:"]
    for entity in entity_ids:
        name, kind = _CAREER_ENTITIES[entity]
        lines += [f"  - id: entity:{entity}", f"    name: {name}", f"    type: {kind}"]
    lines += ["chunks:", f"  - id: article:{slug}", f'    context: "{context}"',
              f"    entities: [{', '.join(f'entity:{e}' for e in entity_ids)}]",
              f"    tags: [{_CAREER_ENTITIES[entity_ids[0]][0]}]", "---", "",
              f'<Chunk id="article:{slug}">', text, "</Chunk>", ""]
    return "\n".join(lines)


def generate_career(out: Path, filler: int = 10, seed: int = 0) -> list[Path]:
    """The course-style career KB (career/*.ctxfst.md) plus `filler` mock documents."""
    written = generate(out, filler, seed)
    folder = out / "content" / "career"
    folder.mkdir(parents=True, exist_ok=True)
    for slug, entities, context, text in _CAREER_ARTICLES:
        path = folder / f"{slug}.ctxfst.md"
        path.write_text(career_document(slug, entities, context, text), encoding="utf-8")
        written.append(path)
    return written
