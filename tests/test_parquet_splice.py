"""Row groups copied from an earlier Parquet file give the bytes of a whole write."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctxfst.artifacts.parquet import (
    parquet_bytes,
    parquet_files_threaded,
    parquet_groups_bytes,
    parquet_groups_bytes_threaded,
    parquet_pieces_threaded,
    pieces_of,
)
from ctxfst.artifacts.parquet_splice import (
    SpliceError,
    group_ranges,
    group_record,
    group_spans,
    natural_starts,
    read_parts,
    record_of,
    relative_starts,
    spaced_group_starts,
    splice,
    splice_recorded,
)


def table(rows: list[tuple[str, str, list[str]]]):
    return pa.table({"id": pa.array([r[0] for r in rows], pa.string()),
                     "text": pa.array([r[1] for r in rows], pa.string()),
                     "tags": pa.array([r[2] for r in rows], pa.list_(pa.string()))}
                    ).replace_schema_metadata({"kind": "test"})


def whole(rows, target):
    keys = [r[0] for r in rows]
    return parquet_bytes(table(rows), group_starts=spaced_group_starts(keys, target))


def encoder(rows, seen: list | None = None):
    """encode(ranges) for splice: the rows of those ranges, one row group each."""

    def encode(ranges):
        if seen is not None:
            seen.extend(ranges)
        picked = [row for start, end in ranges for row in rows[start:end]]
        return parquet_bytes(table(picked), group_starts=relative_starts(ranges))

    return encode


def spliced(before, after, target, edited: set[str]):
    """splice() by the previous keys; splice_recorded() by the previous file's record
    (what a build keeps) gives the same bytes, and the record of what it made."""
    keys = [r[0] for r in after]
    starts = spaced_group_starts(keys, target)
    encode = encoder(after)
    previous = whole(before, target)
    previous_keys = [r[0] for r in before]

    def unchanged(start: int, end: int) -> bool:
        return edited.isdisjoint(keys[start:end])

    by_keys = splice(previous, previous_keys, keys, starts, unchanged, encode)
    record = record_of(previous, previous_keys, spaced_group_starts(previous_keys, target))
    pieces, made = splice_recorded(previous, record, keys, starts, unchanged, encode)
    by_record = b"".join(pieces)
    assert by_record == by_keys and made == record_of(by_record, keys, starts)
    return by_keys


def test_a_spliced_file_is_the_whole_write_after_any_edits():
    rng = random.Random(5)
    words = ["alpha", "beta", "中文", "gamma", "δ"]
    for case in range(60):
        ids = sorted({f"k{rng.randrange(10_000):05d}" for _ in range(rng.randint(0, 400))})
        before = [(i, " ".join(rng.choices(words, k=rng.randint(0, 6))),
                   rng.sample(words, rng.randint(0, 2))) for i in ids]
        after = {row[0]: row for row in before}
        edited = set()
        for _ in range(rng.randint(0, 8)):
            action = rng.random()
            if action < 0.4 and after:
                key = rng.choice(sorted(after))
                after[key] = (key, "edited " + str(case), [])
                edited.add(key)
            elif action < 0.7 and after:
                del after[rng.choice(sorted(after))]
            else:
                key = f"k{rng.randrange(10_000):05d}x"
                after[key] = (key, "added", ["new"])
                edited.add(key)
        after_rows = [after[key] for key in sorted(after)]
        target = rng.choice([1, 4, 16])
        result = spliced(before, after_rows, target, edited)
        assert result == whole(after_rows, target), case
        assert pq.read_table(pa.BufferReader(result)).equals(table(after_rows))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_row_groups_encoded_in_threads_and_put_together_are_the_whole_write(workers,
                                                                            monkeypatch):
    import ctxfst.parallel

    monkeypatch.setattr(ctxfst.parallel, "worker_count", lambda: workers)
    rng = random.Random(workers)
    for count in (0, 1, 2, 5, 17):
        groups = [table([(f"g{number}r{row}", "text " * rng.randint(0, 3), ["t"] * (row % 3))
                         for row in range(rng.randint(1, 40))]) for number in range(count)]
        schema = table([]).schema
        made = parquet_groups_bytes_threaded(schema, count, groups.__getitem__)
        assert made == parquet_groups_bytes(schema, groups), count
        assert pq.ParquetFile(pa.BufferReader(made)).metadata.num_row_groups == count
        # two files made together, a row group of each from one call: each the bytes
        # of its whole write
        pairs = [(group, group.select(["id"])) for group in groups]
        ids = schema.remove(2).remove(1)
        both = parquet_files_threaded([schema, ids], count, pairs.__getitem__)
        assert both == [made, parquet_groups_bytes(ids, [pair[1] for pair in pairs])]


def test_a_file_encoded_in_threads_reads_as_its_bytes_from_the_threads_buffers(monkeypatch):
    """The threads' files stay in Arrow's buffers (views): their footers read from the
    views are the bytes' own, kept as bytes, so the memo made from them is the one the
    joined file gives."""
    import ctxfst.parallel

    monkeypatch.setattr(ctxfst.parallel, "worker_count", lambda: 2)
    groups = [table([(f"g{number}r{row}", "text", ["t"]) for row in range(number + 3)])
              for number in range(6)]
    schema = table([]).schema
    made = parquet_pieces_threaded([schema], len(groups), lambda n: (groups[n],))[0]
    joined = b"".join(made.pieces)
    assert joined == parquet_groups_bytes(schema, groups)
    assert any(isinstance(piece, memoryview) for piece in made.pieces)
    whole_file = pieces_of(joined)
    assert made.encoding == whole_file.encoding
    assert [group_record(g) for g in made.groups] == \
        [group_record(g) for g in whole_file.groups]
    viewed = read_parts(memoryview(pa.py_buffer(joined)).cast("B"))
    assert viewed.footer == read_parts(joined).footer
    assert all(type(value) is bytes for _, _, value in viewed.footer)
    assert all(type(group.entry) is bytes for group in viewed.groups)


@pytest.mark.parametrize("workers,named", [(1, True), (2, True), (3, True), (2, False)])
def test_files_encoded_into_temporary_files_are_the_whole_write(workers, named,
                                                                 monkeypatch, tmp_path):
    """With a folder to spill into, the threads write the files into temporary files
    (nothing left in the folder; Arrow opens them again by their /proc name, or writes
    through the Python file where there is none) and the pieces are FileSpans of them:
    written, the bytes of the whole write, with the groups and encoding the joined file
    gives."""
    import ctxfst.artifacts.parquet
    import ctxfst.parallel
    from ctxfst.artifacts.io import FileSpan, write_pieces

    monkeypatch.setattr(ctxfst.parallel, "worker_count", lambda: workers)
    if not named:
        monkeypatch.setattr(ctxfst.artifacts.parquet, "_OPEN_FILES", str(tmp_path / "none"))
    schema = table([]).schema
    ids = schema.remove(2).remove(1)
    for count in (0, 1, 7):
        groups = [table([(f"g{number}r{row}", "text " * row, ["t"]) for row in
                         range(number + 3)]) for number in range(count)]
        made = parquet_pieces_threaded([schema, ids], count,
                                       lambda n, groups=groups: (groups[n],
                                                                 groups[n].select(["id"])),
                                       spill=tmp_path)
        assert sorted(path.name for path in tmp_path.iterdir()) == [], count
        for pieces, schema_of, tables in ((made[0], schema, groups),
                                          (made[1], ids, [g.select(["id"]) for g in groups])):
            whole = parquet_groups_bytes(schema_of, tables)
            assert count == 0 or any(isinstance(p, FileSpan) for p in pieces.pieces)
            write_pieces(tmp_path / "out", pieces.pieces)
            assert (tmp_path / "out").read_bytes() == whole, count
            (tmp_path / "out").unlink()
            whole_file = pieces_of(whole)
            assert pieces.encoding == whole_file.encoding
            assert [group_record(g) for g in pieces.groups] == \
                [group_record(g) for g in whole_file.groups]


def test_unchanged_groups_are_copied_not_encoded():
    rows = [(f"id{i:04d}", f"text {i}", []) for i in range(2000)]
    keys = [r[0] for r in rows]
    starts = spaced_group_starts(keys, 64)
    assert 10 < len(starts) < 100
    encoded: list = []
    encode = encoder(rows, encoded)
    edited = {"id0500"}
    result = splice(whole(rows, 64), keys, keys, starts,
                    lambda start, end: edited.isdisjoint(keys[start:end]),
                    encode)
    assert result == whole(rows, 64)
    assert len(encoded) == 1 and encoded[0][0] <= 500 < encoded[0][1]


def test_bytes_that_are_no_such_file_are_refused():
    good = whole([("a", "x", [])], 4)
    for bad in (b"", b"PAR1PAR1", good[:-8] + b"\xff\xff\xff\x7fPAR1", b"x" + good[1:]):
        with pytest.raises(SpliceError):
            read_parts(bad)
    with pytest.raises(SpliceError):  # keys that do not describe the file
        splice(good, ["a", "b"], ["a"], [0], lambda start, end: True, lambda r: good)
    record = record_of(good, ["a"], [0])
    part = record["groups"][0]["part"]
    for broken in ({}, {"encoding": record["encoding"], "groups": [{"first": 1}]},
                   {**record, "groups": [{**record["groups"][0],
                                          "part": {**part, "size": len(good)}}]},
                   *({**record, "groups": [{**record["groups"][0],
                                           "part": {**part, "places": places}}]}
                     for places in ("AAAAAA==", "////fw==", "AgAAAAAAAAA=", "AA", [1])),
                   {**record, "groups": [{**record["groups"][0],
                                          "part": {**part, "entry": "AA=="}}]}):
        with pytest.raises(SpliceError):  # a record that does not describe the file
            splice_recorded(good, broken, ["a"], [0], lambda start, end: True, lambda r: good)


def test_group_spans_are_the_walked_footers_groups():
    """pyarrow's reading of the footer gives each group where the walk does; bytes that
    are no Parquet file, or truncated, are refused as the walk refuses them."""
    rng = random.Random(7)
    for size in (1, 40, 300):
        rows = [(f"id{i:04d}", "t" * rng.randrange(0, 90), ["a"] * rng.randrange(3))
                for i in range(size)]
        data = whole(rows, 16)
        assert group_spans(data) == [(g.start, g.size, g.rows) for g in read_parts(data).groups]
    good = whole([("a", "x", [])], 4)
    for bad in (b"", b"PAR1PAR1", good[:-8] + b"\xff\xff\xff\x7fPAR1", b"x" + good[1:],
                good[:20] + good[-8:]):
        with pytest.raises(SpliceError):
            group_spans(bad)


def test_a_previous_file_written_otherwise_is_not_spliced():
    """Groups are copied only under a footer with the same schema and writer (another
    pyarrow may encode otherwise); bloom filters, and footers that lie, are refused
    quickly, and the caller writes the file whole."""
    rows = [(f"id{i:03d}", f"text {i}", []) for i in range(50)]
    keys = [r[0] for r in rows]
    starts = spaced_group_starts(keys, 8)
    encode = encoder(rows)
    fewer_columns = parquet_bytes(table(rows).drop_columns(["tags"]), group_starts=starts)
    with pytest.raises(SpliceError):
        splice(fewer_columns, keys, keys, starts, lambda start, end: True, encode)
    older_writer = whole(rows, 8).replace(b"parquet-cpp-arrow version",
                                          b"parquet-cpp-arrow versioN")
    with pytest.raises(SpliceError):
        splice(older_writer, keys, keys, starts, lambda start, end: True, encode)
    sink = pa.BufferOutputStream()
    pq.write_table(table(rows), sink, bloom_filter_options={"id": {"ndv": 50}})
    with pytest.raises(SpliceError):
        read_parts(sink.getvalue().to_pybytes())
    # A footer claiming a list of 2**62 elements in a few bytes: refused, not walked.
    footer = bytes([0x19, 0xF1]) + bytes([0x80] * 8 + [0x40]) + b"\x00"
    hostile = b"PAR1" + footer + len(footer).to_bytes(4, "little") + b"PAR1"
    with pytest.raises(SpliceError):
        read_parts(hostile)


def test_spaced_group_starts_follow_their_definition():
    """A group starts at row 0; at a key whose CRC-32 is a multiple of target / 4 once
    3/4 target rows or more follow the last start; 8 * target rows after the last start
    where no key did; and at each row alone and the row after it. Nowhere else."""
    import zlib

    rng = random.Random(12)
    for case in range(300):
        keys = [str(rng.random()) for _ in range(rng.randint(0, 400))]
        target = rng.choice([1, 2, 3, 8, 16, 32])
        alone = sorted(rng.sample(range(len(keys)), min(len(keys), rng.randint(0, 4))))
        spacing = max(1, target // 4)
        expected: list[int] = []
        for index, key in enumerate(keys):
            since = index - expected[-1] if expected else 0
            if index == 0 or index in alone or index - 1 in alone or since >= 8 * target \
                    or zlib.crc32(key.encode()) % spacing == 0 and since >= target - spacing:
                expected.append(index)
        assert spaced_group_starts(keys, target, alone) == expected, case


def test_spaced_group_starts_before_a_change_stand_and_after_it_meet_the_old_ones():
    """Keys added or removed move no start before them, and once the new starts meet an
    old start (the same key) after them, the rest are the old ones."""
    rng = random.Random(13)
    met_later = 0
    for case in range(400):
        keys = [f"k{rng.randrange(10 ** 9):09d}" for _ in range(rng.randint(1, 600))]
        target = rng.choice([4, 8, 32])
        old = spaced_group_starts(keys, target)
        at = rng.randrange(len(keys) + 1)
        removed = rng.randint(0, min(3, len(keys) - at))
        added = [f"n{rng.randrange(10 ** 9):09d}" for _ in range(rng.randint(0, 3))]
        new_keys = keys[:at] + added + keys[at + removed:]
        new = spaced_group_starts(new_keys, target)
        assert [s for s in new if s < at] == [s for s in old if s < at], case
        shift = len(added) - removed
        old_after = {keys[s] for s in old if s >= at + removed}
        meet = next((s for s in new if s >= at + len(added) and new_keys[s] in old_after),
                    None)
        if meet is not None:
            assert [s for s in new if s >= meet] == \
                [s + shift for s in old if s >= meet - shift], case
            met_later += meet > min((s for s in new if s >= at + len(added)), default=meet)
    assert met_later  # (some changes moved a start past the first one after them)


def test_spaced_groups_hold_about_target_rows_and_a_rows_group_rarely_twice():
    """Groups of about target rows, as groups started at each key whose CRC-32 is a
    multiple of target make, but the group of a row picked at random (the larger groups
    more often) averages near target rows, not twice that."""
    keys = [f"fact-{number}" for number in range(200_000)]
    for spaced in (True, False):
        starts = spaced_group_starts(keys, 2048) if spaced else \
            [0, *natural_starts(keys, 2048)]
        sizes = [end - start for start, end in group_ranges(starts, len(keys))]
        average = len(keys) / len(starts)
        by_row = sum(size * size for size in sizes) / len(keys)
        assert 1500 < average < 2600, (spaced, average)
        if spaced:
            assert by_row < 1.3 * 2048 and max(sizes) < 3 * 2048, (by_row, max(sizes))
        else:
            assert by_row > 1.5 * 2048, by_row


def test_groups_moved_across_a_varint_length_are_the_whole_write():
    """Offsets around 2**21 take three bytes below it and four above: a removed or grown
    group moves the groups after it across that length, and the spliced footer still
    holds the bytes of a whole write."""
    rng = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    rows = [(f"id{i:05d}", "".join(rng.choices(letters, k=900)), []) for i in range(3500)]
    assert len(whole(rows, 32)) > 2 ** 21 + 200_000  # (compressed: some 730 bytes a row)
    for edit in range(4):
        after = [row for row in rows if row[0] != f"id{300 * edit + 5:05d}"]
        grown = rng.randrange(len(after))
        after[grown] = (after[grown][0], after[grown][1] * 20, [])
        result = spliced(rows, after, 32, {after[grown][0]})
        assert result == whole(after, 32), edit
