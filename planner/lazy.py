"""numpy imported when first used: the one-configuration path (`planner estimate` on plain floats) never needs it,
and importing it is a quarter of the command's start-up.

    from .lazy import np   # then np.asarray(...) as usual; the first attribute read imports numpy
"""

from __future__ import annotations

import importlib


class _LazyModule:
    def __init__(self, name: str):
        self.__dict__["_name"] = name

    def __getattr__(self, attr: str):
        value = getattr(importlib.import_module(self.__dict__["_name"]), attr)
        self.__dict__[attr] = value  # read directly from now on (__getattr__ runs only for missing names)
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_name']}>"


np = _LazyModule("numpy")
