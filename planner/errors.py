"""One error type for everything a user can get wrong: the CLI prints its message on one line, exit 2."""

from __future__ import annotations

import difflib


class PlannerError(ValueError):
    """Bad input: an unknown id, a malformed file, an impossible value. The message is one line."""


class DoesNotFit(PlannerError):
    """A configuration that does not fit in memory: a verdict to report ("does not fit: needs X GB of Y GB"),
    not a failure of the program."""


def unknown_id(kind: str, name: str, known: list[str], listing: str | None = None) -> PlannerError:
    """'unknown hardware 'h10': did you mean h100-sxm, h100-pcie? (see `planner hardware list`)'. Variants of the
    name come first (ids that start with it: 'rtx-3060' -> rtx-3060-12gb, rtx-3060-8gb), then the closest spellings
    (difflib): 4 names, or up to 6 where the variants alone are more."""
    key = name.strip().lower()
    variants = sorted(k for k in known if key and k.lower().startswith(key))
    close = variants + [k for k in difflib.get_close_matches(name, known, n=4, cutoff=0.4) if k not in variants]
    close = close[:max(4, min(len(variants), 6))]
    hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(sorted(known)[:12])}..."
    return PlannerError(f"unknown {kind} '{name}': {hint} (see `planner {listing or kind} list`)")


def pydantic_one_line(where: str, err) -> PlannerError:
    """Turn a pydantic ValidationError into one line naming the field and what was wrong."""
    parts = []
    for e in err.errors()[:3]:
        loc = ".".join(str(x) for x in e.get("loc", ()))
        msg = str(e.get("msg", "invalid"))
        if e.get("type") == "value_error" and msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]  # a validator's own sentence: no pydantic prefix
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = f" (+{len(err.errors()) - 3} more)" if len(err.errors()) > 3 else ""
    return PlannerError(f"{where}: " + "; ".join(parts) + more)
