"""The catalogs indexed once per process: id -> path per folder, and parsed files cached by (path, mtime, size).

`planner estimate` in a loop (the UI on every widget change, `plan` over the catalog, the accuracy fit over
thousands of rows) used to glob and sort a folder on every call. Here a folder is listed again only when its own
mtime changes (a file added, removed or renamed), and a parsed file is parsed again only when its mtime or size
changes (a spec edited in place), so an edit is seen at the next call and nothing else is repeated.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")

_FOLDERS: dict[tuple[str, str], tuple[int, dict[str, Path]]] = {}
_PARSED: dict[tuple[str, str], tuple[tuple[int, int], object]] = {}
_MAX_PARSED = 1024


def folder_index(folder: Path, suffix: str = ".yaml") -> dict[str, Path]:
    """{stem: path} of the files `folder/*suffix` (top level, sorted by name), listed again only when the folder's
    mtime changes."""
    key = (str(folder), suffix)
    try:
        mtime = os.stat(folder).st_mtime_ns
    except OSError:
        return {}
    hit = _FOLDERS.get(key)
    if hit is not None and hit[0] == mtime:
        return hit[1]
    with os.scandir(folder) as it:
        names = sorted(e.name for e in it if e.name.endswith(suffix) and e.is_file())
    index = {n[: -len(suffix)]: folder / n for n in names}
    _FOLDERS[key] = (mtime, index)
    return index


def parsed(path: str | Path, parse: Callable[[str], T], kind: str = "") -> T:
    """parse(path) cached until the file's mtime or size changes. `kind` keeps caches of different parsers of one
    file apart."""
    p = str(path)
    try:
        st = os.stat(p)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        return parse(p)  # let the parser raise its own one-line error
    key = (kind, p)
    hit = _PARSED.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]  # type: ignore[return-value]
    value = parse(p)
    if len(_PARSED) >= _MAX_PARSED:
        _PARSED.clear()
    _PARSED[key] = (stamp, value)
    return value


_BY_IDENTITY: dict[tuple, tuple[tuple, object]] = {}


def by_identity(kind, objs: tuple, make: Callable[[], T]) -> T:
    """make(), remembered while it is asked for with the very same objects (by identity: the entry keeps them
    alive, so their ids cannot be reused while it exists); kind (hashable) tells the derivations apart and carries
    any plain arguments. What is derived from a parsed spec, model or profile is derived once per parse: a file
    edited in place is parsed into new objects (`parsed` above), so it is derived again."""
    key = (kind, *map(id, objs))
    hit = _BY_IDENTITY.get(key)
    if hit is not None:
        return hit[1]  # type: ignore[return-value]
    value = make()
    if len(_BY_IDENTITY) >= 4 * _MAX_PARSED:
        _BY_IDENTITY.clear()
    _BY_IDENTITY[key] = (objs, value)
    return value
