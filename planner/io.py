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


# The largest input file read: specs, configs, profiles and record files are kilobytes to a few megabytes; a
# harness record file of a full sweep is under 2 MB. A larger file (or /dev/zero) is refused, not read to exhaustion.
MAX_READ_BYTES = 64 * 1024 * 1024


def read_bytes(path: str | Path, what: str = "", limit: int = MAX_READ_BYTES) -> bytes:
    """At most `limit` bytes of a file; a missing, unreadable or larger file is a one-line PlannerError."""
    p = Path(path)
    where = what + ": " if what else ""
    try:
        with open(p, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise PlannerError(f"{where}cannot read {p}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise PlannerError(f"{where}{p} is larger than the {limit // (1024 * 1024)} MiB read limit")
    return data


def read_text(path: str | Path, what: str = "", limit: int = MAX_READ_BYTES) -> str:
    """A file's UTF-8 text (at most `limit` bytes); a missing, unreadable, oversized or binary file is a one-line
    PlannerError."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PlannerError(f"{what + ': ' if what else ''}{Path(path)} is not UTF-8 text") from None


# Deepest nesting a data file may have. Real specs nest under 10 levels; libyaml's composer recurses in C and
# crashes the interpreter (SIGSEGV, no exception) somewhere between 20,000 and 30,000 levels, so depth is checked
# first on the event stream, which its parser produces without recursion.
MAX_NESTING = 200


def _yaml_depth_ok(text: str, where: str) -> None:
    if len(text) <= MAX_NESTING:  # each level takes at least one character
        return
    depth = 0
    for ev in yaml.parse(text, Loader=_SAFE_LOADER):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_NESTING:
                raise PlannerError(f"{where}: YAML nested more than {MAX_NESTING} levels deep")
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def parse_yaml_text(text: str, where: str) -> dict:
    """The safe loader (C-accelerated where libyaml is present; never executes code) -> a mapping."""
    try:
        _yaml_depth_ok(text, where)
        data = yaml.load(text, Loader=_SAFE_LOADER)
    except RecursionError:
        raise PlannerError(f"{where}: YAML nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        why = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise PlannerError(f"malformed YAML in {where}{line}: {why}") from None
    except ValueError as exc:  # int('1' * 5000): Python's limit on integer digits (sys.int_info)
        raise PlannerError(f"{where}: {_too_long(exc)}") from None
    if not isinstance(data, dict):
        raise PlannerError(f"{where}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _too_long(exc: ValueError) -> str:
    """One line for a number the parser refuses: Python converts integers of at most 4,300 digits."""
    if "digits" in str(exc):
        return "a number has too many digits (more than 4,300); no count or size is that large"
    return " ".join(str(exc).split())[:200]


def parse_json_text(text: str, where: str) -> dict:
    try:
        data = json.loads(text)
    except RecursionError:
        raise PlannerError(f"{where}: JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise PlannerError(f"malformed JSON in {where}: {exc.msg} at line {exc.lineno}") from None
    except ValueError as exc:  # an integer of more digits than Python converts (sys.int_info.str_digits_check_threshold)
        raise PlannerError(f"{where}: {_too_long(exc)}") from None
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


def _new_file_mode(p: Path) -> int:
    """The mode a plain `open(p, "w")` would give: the existing file's, else 0o666 less the process umask."""
    try:
        return p.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def writable_target(path: str | Path, make_dirs: bool = False) -> Path:
    """The path a file may be written to, or a one-line PlannerError: not a folder, and (without make_dirs) in a
    folder that exists. Commands check a typed `--out` with it before their work, so the error comes first."""
    p = Path(path)
    if p.is_dir():
        raise PlannerError(f"cannot write {p}: it is a folder; give a file name")
    if not make_dirs and not p.parent.is_dir():
        raise PlannerError(f"cannot write {p}: folder {p.parent} does not exist")
    return p


def atomic_write_text(path: str | Path, text: str, make_dirs: bool = True) -> None:
    """Write to a temp file in the same folder, fsync, then rename: an interrupted write loses nothing.

    The file gets the mode an ordinary write would (the umask, or the replaced file's mode), not the temp file's 0600.
    `make_dirs` creates the project's own data folders (records/<device>/); a path the user typed (`--out`) is
    written with make_dirs=False, so `--out /typo/x.csv` is a one-line error, never a new folder tree."""
    p = writable_target(path, make_dirs)
    if make_dirs:
        p.parent.mkdir(parents=True, exist_ok=True)
    mode = _new_file_mode(p)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_yaml(path: str | Path, data: dict, make_dirs: bool = True) -> None:
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True), make_dirs)
