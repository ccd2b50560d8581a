"""Safe reading and atomic writing of the project's data files (YAML, JSON)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import yaml

from .errors import PlannerError

_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | Path) -> dict:
    """yaml.safe_load a mapping; a missing or malformed file is a one-line PlannerError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlannerError(f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)  # the safe loader (C-accelerated where libyaml is present)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise PlannerError(f"malformed YAML in {p}{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise PlannerError(f"{p}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def read_json(path: str | Path) -> dict:
    """json.load a mapping; a missing or malformed file is a one-line PlannerError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlannerError(f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlannerError(f"malformed JSON in {p}: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise PlannerError(f"{p}: expected a JSON object at the top level")
    return data


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, then rename: an interrupted write loses nothing."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_yaml(path: str | Path, data: dict) -> None:
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
