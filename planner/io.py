"""Safe reading and atomic writing of the project's data files (YAML, JSON)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import yaml

from .errors import PlannerError


class _DecimalLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The safe loader with numbers read as plain decimals only. PyYAML's YAML 1.1 resolver reads `12:30` as 750
    (base 60) and `012` as 10 (octal); here both stay strings, so a schema that expects a number refuses them
    with one line naming the field. `1e3` and `1.5e-3` are floats (YAML 1.2); `.inf`/`.nan` still parse, and
    the schemas refuse them (allow_inf_nan=False)."""


_DECIMAL = {
    "tag:yaml.org,2002:int": re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$"),
    "tag:yaml.org,2002:float": re.compile(
        r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+)$"
        r"|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"),
}
_DecimalLoader.yaml_implicit_resolvers = {
    first: [(tag, _DECIMAL.get(tag, rx)) for tag, rx in resolvers]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_SAFE_LOADER = _DecimalLoader


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
