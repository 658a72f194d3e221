"""The command line explains itself: every command has a description and examples that
parse, every option says its default, the reference in docs/ is the code's, `ctxfst rule`
explains codes, completion scripts complete in real shells, -q/-v and colour behave."""

from __future__ import annotations

import argparse
import json
import os
import pty
import shlex
import shutil
import subprocess
import sys

import pytest

from ctxfst import cli_help, rule_docs
from ctxfst.cli import build_parser, main
from ctxfst.cli_args import HelpFormatter, default_text, options, subcommands, walk
from ctxfst.diagnostics import RULES

from .conftest import REPO, copy_example, write

COMMANDS = [(path, command) for path, command in walk(build_parser()) if path]
LEAVES = [(path, command) for path, command in COMMANDS if not subcommands(command)]


def ids(items):
    return [" ".join(path) for path, _ in items]


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=ids(COMMANDS))
def test_every_command_has_a_description_and_examples_that_parse(path, command):
    assert command.description and command.description[0].isupper(), path
    assert command.epilog and command.epilog.startswith("examples:\n"), path
    examples = [line.strip() for line in command.epilog.splitlines()[1:] if line.strip()]
    assert examples, path
    for example in examples:
        words = shlex.split(example)
        words = words[:words.index(">")] if ">" in words else words
        assert words[:1 + len(path)] == ["ctxfst", *path], example
        try:
            build_parser().parse_args(words[1:])
        except SystemExit as error:  # argparse refused the example
            pytest.fail(f"the example {example!r} does not parse (exit {error.code})")


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=ids(COMMANDS))
def test_every_option_has_help_that_says_its_default(path, command):
    formatter = HelpFormatter(command.prog)
    for action in options(command):
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        text = formatter._get_help_string(action)
        assert action.help and action.help.strip(), (path, action.option_strings)
        if action.required:
            assert "required" in text, (path, action.option_strings)
        elif default_text(action) is not None:
            assert "default" in text, (path, action.option_strings, text)
    for action in command._actions:  # positionals too say what they are
        if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
            assert action.help, (path, action.dest)


def test_mode_help_says_graph_is_the_default(capsys):
    with pytest.raises(SystemExit):
        main(["query", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: graph)" in text and "(default: 5)" in text


def test_required_options_are_shown_as_required(capsys):
    with pytest.raises(SystemExit):
        main(["facts", "ask", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "claims (required)" in text and "exists, count or list (required)" in text


def test_the_generated_reference_is_current_and_documents_every_option():
    assert cli_help.main([]) == 0, "run: python -m ctxfst.cli_help --write"
    reference = (REPO / "docs" / "cli-reference.md").read_text()
    for path, command in walk(build_parser()):
        section = reference.split(f"## {' '.join(('ctxfst', *path))}\n", 1)
        assert len(section) == 2, path
        body = section[1].split("\n## ", 1)[0]
        for action in options(command):
            for flag in action.option_strings:
                assert flag in body, (path, flag)
        assert "examples:" in body, path


def test_every_command_is_shown_in_use_in_the_hand_written_docs():
    docs = "\n".join(p.read_text() for p in (REPO / "docs").glob("*.md")
                     if p.name != "cli-reference.md")
    missing = [" ".join(path) for path, _ in LEAVES if f"ctxfst {' '.join(path)}" not in docs]
    assert not missing, f"no example in docs/ of: {missing}"


# ---- ctxfst rule -----------------------------------------------------------------------

def test_rule_data_is_generated_from_docs_and_covers_every_code():
    assert rule_docs.main([]) == 0, "run: python -m ctxfst.rule_docs --write"
    documented = rule_docs.load()
    assert set(documented) == set(RULES)
    for code, entry in documented.items():
        assert entry["severity"] == RULES[code].severity.value and entry["meaning"], code


def test_rule_explains_a_code(capsys):
    assert main(["rule", "ctx205"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CTX205 (error): ")
    assert "`postconditions` may name a `state` or a `goal`" in " ".join(out.split())
    assert "cannot be silenced" in out
    assert main(["rule", "CTX502"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "A context shorter than 8 words." in out and "--ignore CTX502" in out
    assert "Lint is advice" in out  # the section's notes come with it


def test_rule_lists_a_prefix_and_refuses_an_unknown_code(capsys):
    assert main(["rule", "CTX5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == sorted(c for c in RULES if c.startswith("CTX5"))
    assert main(["rule", "CTX2O5"]) == 2
    assert "did you mean CTX205?" in capsys.readouterr().err


def test_rule_json(capsys):
    assert main(["rule", "CTX106", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rules"][0]["code"] == "CTX106" and data["rules"][0]["silenceable"] is True


# ---- completion ------------------------------------------------------------------------

def completion_script(shell: str, tmp_path) -> str:
    target = tmp_path / f"ctxfst.{shell}"
    target.write_text(subprocess.run(
        [sys.executable, "-m", "ctxfst", "completion", shell], capture_output=True,
        text=True, check=True).stdout)
    return str(target)


def shell_complete(shell: str, script: str, words: list[str]) -> list[str]:
    quoted = " ".join(shlex.quote(word) for word in words)
    flags = ["-f"] if shell == "zsh" else []
    program = (f"source {shlex.quote(script)}; COMP_WORDS=({quoted}); "
               f"COMP_CWORD={len(words) - 1}; _ctxfst; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    out = subprocess.run([shell, *flags, "-c", program], capture_output=True, text=True,
                         check=True)
    found = [line for line in out.stdout.splitlines() if line]
    # zsh's compgen offers every candidate; compadd then keeps those matching the word
    return [w for w in found if w.startswith(words[-1])] if shell == "zsh" else found


CASES = [
    (["ctxfst", "st"], ["state"]),
    (["ctxfst", "state", "re"], ["replay", "remove"]),
    (["ctxfst", "query", "--mode", ""], ["vector", "lexical", "keyword-graph", "graph",
                                         "hybrid"]),
    (["ctxfst", "-q", "export", "graph", "--format", "g"], ["graphml", "gexf"]),
    (["ctxfst", "query", "--to"], ["--top-k"]),
    (["ctxfst", "rule", "CTX20"], [c for c in sorted(RULES) if c.startswith("CTX20")]),
    (["ctxfst", "state", "init", "--goal", ""], []),  # a free value: nothing offered
]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_bash_and_zsh_completion(shell, tmp_path, monkeypatch):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed (.ci/run installs it)")
    script = completion_script(shell, tmp_path)
    for words, expected in CASES:
        assert shell_complete(shell, script, words) == expected, words
    (tmp_path / "content").mkdir()
    monkeypatch.chdir(tmp_path)  # file names complete where a command takes a path
    assert shell_complete(shell, script, ["ctxfst", "validate", "cont"]) == ["content"]


def test_fish_completion(tmp_path):
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed (.ci/run installs it)")
    script = completion_script("fish", tmp_path)

    def complete(line: str) -> list[str]:
        out = subprocess.run(["fish", "--no-config", "-c", f"source {shlex.quote(script)}; "
                              f"complete -C {shlex.quote(line)}"], capture_output=True,
                             text=True, check=True)
        return [row.split("\t")[0] for row in out.stdout.splitlines()]

    assert complete("ctxfst st") == ["state"]
    assert sorted(complete("ctxfst state re")) == ["remove", "replay"]
    assert sorted(complete("ctxfst query --mode ")) == sorted(
        ["vector", "lexical", "keyword-graph", "graph", "hybrid"])
    assert complete("ctxfst export graph --format g") == ["gexf", "graphml"]
    assert "--top-k" in complete("ctxfst query --to")
    assert complete("ctxfst rule CTX20")[:2] == ["CTX201", "CTX202"]


def test_unknown_shell_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as error:
        main(["completion", "tcsh"])
    assert error.value.code == 2


# ---- -q / -v and colour ----------------------------------------------------------------

@pytest.fixture
def noisy_kb(tmp_path, monkeypatch):
    root = copy_example(tmp_path)
    write(root, "content/short.ctxfst.md", """
        ---
        title: Short
        chunks:
          - id: faq:short
            context: Too short.
        ---
        <Chunk id="faq:short">
        A passage.
        </Chunk>
        """)
    monkeypatch.chdir(root)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    return root


def test_quiet_prints_findings_only_and_verbose_says_what_was_hidden(noisy_kb, capsys):
    assert main(["lint"]) == 0
    normal = capsys.readouterr().out.splitlines()
    assert len(normal) > 1 and "file(s) checked" in normal[-1]
    for argv in (["lint", "-q"], ["-q", "lint"], ["--quiet", "lint"]):
        assert main(argv) == 0
        assert capsys.readouterr().out.splitlines() == normal[:-1], argv
    assert main(["lint", "-v", "--ignore", "CTX511"]) == 0
    captured = capsys.readouterr()
    hidden = sum(1 for line in normal if " CTX511: " in line)
    assert hidden and f"ctxfst: {hidden} warning(s) and info(s) hidden" in captured.err
    assert main(["lint", "-q", "--format", "json"]) == 0  # JSON keeps its shape
    assert "summary" in json.loads(capsys.readouterr().out)


@pytest.mark.model
def test_quiet_build_prints_no_progress(noisy_kb, capsys):
    assert main(["build", "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert not [line for line in out if line.startswith((".", "--", "   ", "build:"))], out
    assert main(["build"]) == 0
    assert "build: 0 of" in capsys.readouterr().out  # up to date, said without -q


def test_verbose_shows_the_traceback_of_an_internal_error(noisy_kb, monkeypatch, capsys):
    import ctxfst.validation as validation

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(validation, "check_paths", broken)
    assert main(["validate"]) == 70
    assert "internal error: RuntimeError: boom" in capsys.readouterr().err
    with pytest.raises(RuntimeError):
        main(["validate", "-v"])


def run_in_terminal(argv: list[str], env: dict) -> bytes:
    """The command's output as a terminal shows it (stdout a pty)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "ctxfst", *argv], stdout=follower,
                               stderr=subprocess.DEVNULL, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the follower closed: the command ended
            break
        if not data:
            break
        chunks.append(data)
    process.wait(timeout=120)
    os.close(leader)
    return b"".join(chunks)


def test_colour_on_a_terminal_never_in_a_pipe_and_never_with_no_color(noisy_kb):
    env = {key: value for key, value in os.environ.items()
           if key not in ("NO_COLOR", "FORCE_COLOR")}
    env["TERM"] = "xterm"
    coloured = run_in_terminal(["lint"], env)
    assert b"\x1b[1;33mwarning\x1b[0m" in coloured and b"\x1b[1mCTX502\x1b[0m" in coloured
    plain = run_in_terminal(["lint"], {**env, "NO_COLOR": "1"})
    assert b"\x1b[" not in plain and b"warning CTX502" in plain
    piped = subprocess.run([sys.executable, "-m", "ctxfst", "lint"], capture_output=True,
                           env=env).stdout
    assert b"\x1b[" not in piped and b"warning CTX502" in piped
    forced = subprocess.run([sys.executable, "-m", "ctxfst", "lint"], capture_output=True,
                            env={**env, "FORCE_COLOR": "1"}).stdout
    assert b"\x1b[1;33mwarning" in forced
