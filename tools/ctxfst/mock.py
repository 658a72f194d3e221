"""Deterministic mock knowledge bases: valid CtxFST documents for scale runs and demos."""

from __future__ import annotations

import random
from pathlib import Path

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
_ZH = "延遲 吞吐量 部署 快取 索引 查詢 結構 遷移 重試 佇列 處理 端點 測試 效能 追蹤 指標 日誌 告警 設計 取捨 成本 記憶體 網路 儲存".split()


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
