"""Straight-line replay of the scalar path: the same float operations, without the Python around them.

The one-configuration path of the cost model (planner.ops -> planner.roofline -> planner.latency on plain floats)
spends most of its time in the machinery around the arithmetic: building ~20 OpCost records per step, attribute
look-ups, dispatch on the number type. For a fixed (model, format, KV dtype, device model) that machinery does the
same thing on every call; only the workload numbers (batch, prompt, output) change. So `traced(fn, static, n)`
runs `fn(*static, x0, ..., x{n-1})` once with stand-ins for the workload numbers that record every float
operation done on them (and every comparison whose outcome steered the code: a *guard*), and compiles the record to
one Python function of the n numbers:

    t1 = a0 * a1
    if not (t1 >= t2): return None      # a guard: the reference took the other branch here
    ...
    return (t7, 'compute', t9)

Replayed on new numbers it performs exactly the float operations the reference performs on them, in the same
order (so it returns the same floats, bit for bit), as long as every comparison comes out as it did when
recorded; if one does not, it returns None and the caller runs the reference (and may record that branch too).
Nothing is computed here that the reference does not compute: the physics stays in planner.ops / roofline /
latency, one copy (tests/planner/test_replay.py checks replays against the reference on random configurations).

A stand-in claims its value's class (`x.__class__ is float` holds, so the reference's scalar branches run), and
refuses what it cannot record (float(), int(), hashing, formatting, numpy conversion): a function that needs those
is not traceable, and the caller keeps the reference. Code meant to be replayed converts with `as_float` /
`as_int` (float() / int() that a recording sees).
"""

from __future__ import annotations

import math
import operator
import re
import threading

__all__ = ["Busy", "Replayed", "Untraceable", "as_float", "as_int", "traced"]


class Untraceable(TypeError):
    """The traced function did something with a stand-in that cannot be recorded as float arithmetic."""


class _Tape:
    def __init__(self):
        self.lines: list[str] = []
        self.memo: dict[str, _T] = {}      # expression -> its stand-in (the same expression is computed once)
        self.guards: set[str] = set()
        self.consts: dict[int, tuple[str, object]] = {}
        self.n = 0

    def lit(self, c) -> str:
        k = c.__class__
        if k is int or k is bool or (k is float and math.isfinite(c)):
            return f"({c!r})"
        hit = self.consts.get(id(c))
        if hit is None:
            hit = self.consts[id(c)] = (f"k{len(self.consts)}", c)
        return hit[0]

    def ref(self, x) -> str:
        return x.e if type(x) is _T else self.lit(x)

    def emit(self, v, expr: str) -> _T:
        hit = self.memo.get(expr)
        if hit is not None:
            return hit
        self.n += 1
        name = f"t{self.n}"
        self.lines.append(f"{name} = {expr}")
        t = self.memo[expr] = _T(v, name)
        return t

    def guard(self, cond: str, outcome: bool) -> None:
        line = f"if {'not ' if outcome else ''}({cond}): return None"
        if line not in self.guards:
            self.guards.add(line)
            self.lines.append(line)


_TAPE: _Tape | None = None
_RECORDING = threading.Lock()  # one recording at a time (stand-ins write to the one tape; the UI runs threads)


class Busy(RuntimeError):
    """Another recording is under way (another thread, or fn itself asked for one): run fn instead."""


# x * 1, 1 * x, x / 1 and x - 0.0 are x itself for every float x (signed zeros, infinities and NaN included);
# x + 0.0 is not (-0.0 + 0.0 = 0.0), so it stays
_IDENTITY_RIGHT = {"*": (1, 1.0), "/": (1, 1.0), "-": (0.0,)}
_IDENTITY_LEFT = {"*": (1, 1.0)}


def _is_identity(c, table, sym) -> bool:
    """c is one of the identity constants of `sym`, of the same type and sign (x - -0.0 is not x for x = -0.0)."""
    return c.__class__ in (int, float) and any(
        c.__class__ is u.__class__ and c == u and math.copysign(1.0, c) == math.copysign(1.0, u)
        for u in table.get(sym, ()))


def _binary(fn, sym):
    def op(a, b):
        if type(b) is not _T and not _number(b):
            return NotImplemented
        v = fn(a.v, b.v if type(b) is _T else b)
        if type(b) is not _T and a.v.__class__ is float and _is_identity(b, _IDENTITY_RIGHT, sym) and \
                _same(v, a.v):
            return a
        return _TAPE.emit(v, f"{a.e} {sym} {_TAPE.ref(b)}")

    def rop(a, b):
        if not _number(b):
            return NotImplemented
        v = fn(b, a.v)
        if a.v.__class__ is float and _is_identity(b, _IDENTITY_LEFT, sym) and _same(v, a.v):
            return a
        return _TAPE.emit(v, f"{_TAPE.lit(b)} {sym} {a.e}")

    return op, rop


def _same(x, y) -> bool:
    """The same float, bit for bit (the identity held for the recorded value: a check of the rule above)."""
    return x.__class__ is float and (math.copysign(1.0, x) == math.copysign(1.0, y)) and (x == y or x != x and y != y)


def _compare(fn, sym):
    def op(a, b):
        if type(b) is not _T and not _number(b):
            return NotImplemented
        r = fn(a.v, b.v if type(b) is _T else b)
        if r.__class__ is not bool:
            raise Untraceable(f"comparison gave {type(r).__name__}")
        _TAPE.guard(f"{a.e} {sym} {_TAPE.ref(b)}", r)
        return r

    return op


def _number(x) -> bool:
    return x.__class__ in (float, int, bool)


def _refuse(name):
    def f(self, *a, **k):
        raise Untraceable(f"{name}() of a traced number")
    return f


class _T:
    """A stand-in for a float (or int) that records the operations done on it; v is the concrete value."""

    __slots__ = ("v", "e")
    __array_ufunc__ = None  # numpy hands arithmetic with a stand-in back to it, then refuses conversions

    def __init__(self, v, e):
        self.v, self.e = v, e

    @property
    def __class__(self):  # the reference's scalar branches test `x.__class__ is float`
        return self.v.__class__

    __add__, __radd__ = _binary(operator.add, "+")
    __sub__, __rsub__ = _binary(operator.sub, "-")
    __mul__, __rmul__ = _binary(operator.mul, "*")
    __truediv__, __rtruediv__ = _binary(operator.truediv, "/")
    __floordiv__, __rfloordiv__ = _binary(operator.floordiv, "//")
    __mod__, __rmod__ = _binary(operator.mod, "%")
    __pow__, __rpow__ = _binary(operator.pow, "**")
    __lt__ = _compare(operator.lt, "<")
    __le__ = _compare(operator.le, "<=")
    __gt__ = _compare(operator.gt, ">")
    __ge__ = _compare(operator.ge, ">=")
    __eq__ = _compare(operator.eq, "==")
    __ne__ = _compare(operator.ne, "!=")

    def __neg__(self):
        return _TAPE.emit(-self.v, f"-{self.e}")

    def __pos__(self):
        return _TAPE.emit(+self.v, f"+{self.e}")

    def __abs__(self):
        return _TAPE.emit(abs(self.v), f"abs({self.e})")

    def __floor__(self):
        return _TAPE.emit(math.floor(self.v), f"_floor({self.e})")

    def __ceil__(self):
        return _TAPE.emit(math.ceil(self.v), f"_ceil({self.e})")

    def __bool__(self):
        r = bool(self.v)
        _TAPE.guard(self.e, r)
        return r

    __float__ = _refuse("float")
    __int__ = _refuse("int")
    __index__ = _refuse("index")
    __round__ = _refuse("round")
    __trunc__ = _refuse("trunc")
    __hash__ = _refuse("hash")
    __format__ = _refuse("format")
    __str__ = _refuse("str")
    __repr__ = _refuse("repr")
    __array__ = _refuse("numpy.asarray")
    __len__ = _refuse("len")
    __iter__ = _refuse("iter")


_NAME = re.compile(r"\b[tk]\d+\b")
_MAY_RAISE = re.compile(r" (/|//|%|\*\*) |_floor|_ceil")


def _out_expr(tape: _Tape, x) -> str:
    if type(x) is _T:
        return x.e
    if isinstance(x, tuple):
        return "(" + "".join(_out_expr(tape, y) + ", " for y in x) + ")"
    if isinstance(x, list):
        return "[" + ", ".join(_out_expr(tape, y) for y in x) + "]"
    return tape.lit(x)


def traced(fn, static: tuple, args: tuple):
    """(fn(*static, *args), replay) where replay(*args') returns fn(*static, *args') or None (a guard failed).

    args are the workload numbers (floats); the static arguments are bound into the replay. Raises Untraceable when
    fn does something a stand-in refuses (the result is then not returned: the caller runs fn itself); any other
    exception of fn propagates as it would from fn."""
    global _TAPE
    if not _RECORDING.acquire(blocking=False):
        raise Busy("a recording is under way")
    tape = _Tape()
    _TAPE = tape
    try:
        xs = tuple(_T(a, f"a{i}") for i, a in enumerate(args))
        out = fn(*static, *xs)
        ret = _out_expr(tape, out)
    finally:
        _TAPE = None
        _RECORDING.release()
    value = _concrete(out)
    # dead code: keep what the result and the guards read
    live = set(_NAME.findall(ret))
    kept = []
    for line in reversed(tape.lines):
        if line.startswith("if "):
            kept.append(line)
            live.update(_NAME.findall(line))
            continue
        name, expr = line.split(" = ", 1)
        if name in live or _MAY_RAISE.search(expr):  # (a division by zero raises in the replay as in fn)
            kept.append(line)
            live.update(_NAME.findall(expr))
    params = ", ".join(f"a{i}" for i in range(len(args)))
    body = "".join(f"    {line}\n" for line in reversed(kept))
    src = f"def replay({params}):\n{body}    return {ret}\n"
    ns = {"_floor": math.floor, "_ceil": math.ceil, **{k: c for k, c in tape.consts.values()}}
    exec(compile(src, f"<replay of {getattr(fn, '__qualname__', fn)}>", "exec"), ns)
    replay = ns["replay"]
    replay.source = src
    return value, replay


def _concrete(x):
    if type(x) is _T:
        return x.v
    if isinstance(x, tuple):
        return tuple(_concrete(y) for y in x)
    if isinstance(x, list):
        return [_concrete(y) for y in x]
    return x


def as_float(x):
    """float(x), recorded when x is a stand-in."""
    if type(x) is _T:
        return _TAPE.emit(float(x.v), f"float({x.e})")
    return float(x)


def as_int(x):
    """int(x), recorded when x is a stand-in."""
    if type(x) is _T:
        return _TAPE.emit(int(x.v), f"int({x.e})")
    return int(x)


class Replayed:
    """fn(*static, *args) with the float work replayed: `r(key, static, args)`.

    key: hashable, names the static arguments (ids of objects, values of plain ones); the entry keeps `static`
    alive, so the ids cannot be reused while it exists. A recording costs some twenty reference calls, so it is
    made only where it pays: the first at the `record_at`-th call for a key (a one-off call, or a configuration
    asked for twice, runs fn alone), another branch pattern (a failed guard) only after `refallback` calls have
    fallen back to fn since the last one, at most max_branches per key. Something a stand-in refuses switches the
    key to fn for good."""

    def __init__(self, fn, max_keys: int = 256, max_branches: int = 8, record_at: int = 3, refallback: int = 50,
                 max_recordings: int = 128):
        self.fn, self.max_keys, self.max_branches = fn, max_keys, max_branches
        self.record_at, self.refallback = record_at, refallback
        self.max_recordings = max_recordings  # ~80 KiB each for a large model: all are dropped beyond this
        self.entries: dict = {}
        self.recordings = 0

    def __call__(self, key, static: tuple, args: tuple):
        e = self.entries.get(key)
        if e is None:
            if len(self.entries) >= self.max_keys:
                self.entries.clear()
                self.recordings = 0
            self.entries[key] = e = [static, [], False, 0]  # static (kept alive), recordings, off, calls to fn
        fns = e[1]
        for i, r in enumerate(fns):
            try:
                out = r(*args)
            except Exception:  # (fn says what is wrong, below)
                out = None
            if out is not None:
                if i:  # the branch pattern in use first
                    try:
                        fns.insert(0, fns.pop(i))
                    except IndexError:  # (another thread reordered the list)
                        pass
                return out
        e[3] += 1
        due = self.record_at if not fns else self.refallback
        if e[2] or e[3] < due or len(fns) >= self.max_branches:
            return self.fn(*static, *args)
        try:
            value, r = traced(self.fn, static, args)
        except TypeError:  # Untraceable, or an operation a stand-in does not support: fn from now on
            e[2] = True
            return self.fn(*static, *args)
        except Exception:  # another recording under way (Busy), or fn itself raises for these numbers: fn
            return self.fn(*static, *args)
        if self.recordings >= self.max_recordings:
            self.entries.clear()
            self.recordings = 0
            self.entries[key] = e
        fns.insert(0, r)
        self.recordings += 1
        e[3] = 0
        return value
