"""Package fronts that import their modules on first use.

A stage's package lists its public names once, with the private module
each lives in; the module is imported when a name is first read. Importing
one stage (say `qualitycheck.verdict._gate` for a config check) then never
pulls in the heavy dependencies of its siblings (scipy for the statistics,
jinja2 for the report), which keeps the time before a run's first request
small. Type checkers read the same names from an `if TYPE_CHECKING:` block.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: name → attribute of `package.<homes[name]>`, cached."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(f"{package}.{home}")
        value = getattr(module, name)
        setattr(importlib.import_module(package), name, value)
        return value

    return __getattr__
