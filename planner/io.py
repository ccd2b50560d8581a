"""Safe reading and atomic writing of the project's data files (YAML, JSON)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import yaml

from .errors import PlannerError

_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_text(path: str | Path, what: str = "") -> str:
    """A file's UTF-8 text; a missing or unreadable file is a one-line PlannerError."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlannerError(f"{what + ': ' if what else ''}cannot read {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PlannerError(f"{what + ': ' if what else ''}{p} is not UTF-8 text") from None


def parse_yaml_text(text: str, where: str) -> dict:
    """The safe loader (C-accelerated where libyaml is present; never executes code) -> a mapping."""
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise PlannerError(f"malformed YAML in {where}{line}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise PlannerError(f"{where}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def parse_json_text(text: str, where: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlannerError(f"malformed JSON in {where}: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise PlannerError(f"{where}: expected a JSON object at the top level, got {type(data).__name__}")
    return data


def read_yaml(path: str | Path) -> dict:
    """A YAML mapping from a file; missing or malformed files are one-line PlannerErrors."""
    return parse_yaml_text(read_text(path), str(path))


def read_json(path: str | Path) -> dict:
    """A JSON object from a file; missing or malformed files are one-line PlannerErrors."""
    return parse_json_text(read_text(path), str(path))


def validated(model_cls, data: dict, where: str):
    """pydantic validation with a one-line PlannerError naming the fields."""
    from pydantic import ValidationError

    from .errors import pydantic_one_line

    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise pydantic_one_line(where, exc) from None


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
