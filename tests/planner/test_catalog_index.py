"""The catalog index: listed once, re-listed when the folder changes, parsed files re-parsed when edited."""

import os
import time

from planner.catalog_index import folder_index, parsed


def _bump(p):
    # mtime resolution of some filesystems is coarse: move the clock explicitly
    t = time.time() + 5
    os.utime(p, (t, t))


def test_index_sees_added_and_removed_files(tmp_path):
    (tmp_path / "b.yaml").write_text("id: b\n")
    (tmp_path / "a.yaml").write_text("id: a\n")
    (tmp_path / "notes.txt").write_text("x")
    assert list(folder_index(tmp_path)) == ["a", "b"]  # sorted, only *.yaml
    assert folder_index(tmp_path) is folder_index(tmp_path)  # cached: the same dict, no new listing
    (tmp_path / "c.yaml").write_text("id: c\n")
    _bump(tmp_path)
    assert list(folder_index(tmp_path)) == ["a", "b", "c"]
    (tmp_path / "a.yaml").unlink()
    _bump(tmp_path)
    assert list(folder_index(tmp_path)) == ["b", "c"]


def test_parsed_file_is_reparsed_after_an_edit(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("1")
    calls = []

    def parse(path):
        calls.append(path)
        return int(open(path).read())

    assert parsed(p, parse) == 1 and parsed(p, parse) == 1
    assert len(calls) == 1  # the second read came from the cache
    p.write_text("22")
    _bump(p)
    assert parsed(p, parse) == 22 and len(calls) == 2
