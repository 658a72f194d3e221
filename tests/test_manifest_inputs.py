"""The manifest's inputs as the validate stage keeps them: the manifest's own text of
them, a stamp that leaves the settings file out, and a kept file read back or refused."""

from __future__ import annotations

import json

import pytest

from ctxfst.artifacts.io import Spliced, indented_json_pieces
from ctxfst.pipeline.errors import BuildFailed
from ctxfst.pipeline.manifest_inputs import (
    INPUTS_AT,
    read_manifest_inputs,
    write_manifest_inputs,
)

INPUTS = [("content/a.md", "a" * 64, 1), ("content/b \"é\".md", "b" * 64, 22),
          ("skills/s/SKILL.md", "c" * 64, 333), ("content/x.edges.yaml", "d" * 64, 0)]


def listed(items) -> list[dict]:
    return [{"path": path, "sha256": digest, "bytes": size} for path, digest, size in items]


@pytest.mark.parametrize("settings", [None, ("aaa.toml", "e" * 64, 5),
                                      ("content/b.toml", "e" * 64, 5), ("zzz.toml", "e" * 64, 5)])
@pytest.mark.parametrize("count", [0, 1, 2, 4])
def test_the_kept_inputs_are_the_manifests_text_and_their_stamp_leaves_settings_out(
        tmp_path, settings, count):
    inputs = INPUTS[:count]
    stamp = write_manifest_inputs(tmp_path / "kept", inputs, settings)
    kept = read_manifest_inputs((tmp_path / "kept").read_bytes())
    every = sorted([*inputs, settings]) if settings else inputs
    manifest = {"inputs": kept.inputs, "artifacts": [
        {"path": "x", "inputs": kept.lineage([None, "ledger:.ctxfst/facts"])},
        {"path": "y", "inputs": kept.lineage(kept.edges)},
        {"path": "z", "inputs": kept.lineage([None])}]}
    expected = {"inputs": listed(every), "artifacts": [
        {"path": "x", "inputs": [p for p, _, _ in every] + ["ledger:.ctxfst/facts"]},
        {"path": "y", "inputs": [p for p, _, _ in every if p.endswith(".edges.yaml")]},
        {"path": "z", "inputs": [p for p, _, _ in every]}]}
    assert b"".join(indented_json_pieces(manifest)) == (
        json.dumps(expected, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
    assert kept.skills == [p for p, _, _ in every if p.endswith("/SKILL.md")]
    if settings:  # (its other bytes: the same stamp)
        assert stamp == write_manifest_inputs(tmp_path / "other", inputs,
                                              (settings[0], "0" * 64, 99))
    for number, (path, _, size) in enumerate(inputs):  # (any other input: another stamp)
        changed = [*inputs[:number], (path, "f" * 64, size), *inputs[number + 1:]]
        assert stamp != write_manifest_inputs(tmp_path / "other", changed, settings)


@pytest.mark.parametrize("damage", [
    lambda data: data[:-1],                                   # cut short
    lambda data: data + b" ",                                 # grown
    lambda data: b"{}\n" + data.split(b"\n", 1)[1],           # a header of nothing
    lambda data: data.replace(b'"format":1', b'"format":2', 1),
    lambda data: data.replace(b'"edges":[]', b'"edges":[1]', 1),
    lambda data: b"not json\n" + data.split(b"\n", 1)[1],
    lambda data: data.split(b"\n", 1)[0],                     # no line break
])
def test_a_kept_file_not_as_written_is_refused(tmp_path, damage):
    write_manifest_inputs(tmp_path / "kept", INPUTS[:2], None)
    with pytest.raises(BuildFailed, match="doit clean"):
        read_manifest_inputs(damage((tmp_path / "kept").read_bytes()))


def test_spliced_text_must_be_at_the_indent_it_was_made_for():
    text = Spliced((b"[]",), INPUTS_AT)
    assert b"".join(indented_json_pieces({"inputs": text})) == b'{\n  "inputs": []\n}\n'
    with pytest.raises(ValueError):
        indented_json_pieces({"a": {"inputs": text}})
