"""The shape of the code: its longest files and functions, its import cycles, what the
linter finds, and how long `import ctxfst` takes.

    .venv/bin/python benchmarks/code_shape.py
"""

from __future__ import annotations

import ast
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.test_layering import PACKAGE, cycles, module_graph  # noqa: E402


def longest_files(count: int = 3) -> list[tuple[int, str]]:
    sizes = [(len(path.read_text(encoding="utf-8").splitlines()), str(path.relative_to(REPO)))
             for path in PACKAGE.rglob("*.py")]
    return sorted(sizes, reverse=True)[:count]


def longest_functions(count: int = 3) -> list[tuple[int, str]]:
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((node.end_lineno - node.lineno + 1,
                              f"{path.relative_to(REPO)}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)[:count]


def ruff_findings() -> str:
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        return "ruff is not installed (pip install -e '.[dev]')"
    done = subprocess.run([str(ruff), "check", "--statistics", "--no-fix", "--select",
                           "E4,E7,E9,E501,F,I,B,UP", "--line-length", "100",
                           "tools", "tests", "benchmarks"],
                          cwd=REPO, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    total = sum(int(line.split()[0]) for line in lines if line.split()[0].isdigit())
    return f"{total} ({', '.join(lines[:6]) or 'none'})"


def import_seconds(runs: int = 15) -> float:
    """The median time of `import ctxfst` in a fresh interpreter, less the
    interpreter's own start (modules load from cached bytecode, Python's default)."""
    env = {name: value for name, value in os.environ.items()
           if name != "PYTHONDONTWRITEBYTECODE"}

    def median(code: str) -> float:
        subprocess.run([sys.executable, "-c", code], check=True, env=env)  # (caches)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, env=env)
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    return median("import ctxfst") - median("pass")


def main() -> None:
    print("longest files:", ", ".join(f"{path} ({lines})" for lines, path in longest_files()))
    print("longest functions:", ", ".join(f"{where} ({lines})"
                                          for lines, where in longest_functions()))
    found = cycles(module_graph())
    print(f"import cycles: {len(found)}")
    for cycle in found:
        print("  " + " <-> ".join(cycle))
    print("ruff findings:", ruff_findings())
    print(f"import ctxfst: {import_seconds() * 1000:.1f} ms")


if __name__ == "__main__":
    main()
