"""What the verdict's scipy and statsmodels computations returned, kept with the run so a rebuild imports neither.

Every such computation is a pure function of a few counts or of packed
values (the sign test of discordant counts, the noise allowance, the t-test
effect for N cases, the bootstrap and the signed-rank test of one array), so
a summary rebuilt from an unchanged run asks the same questions again.
Importing scipy and statsmodels costs more than a second, more than
summarising a 10,000-case run: `qualitycheck report` and `gate` on a run
whose statistics are unchanged never import either.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

__all__ = ["StatsMemo", "array_key", "memo_salt", "remembered"]

T = TypeVar("T")

MEMOISED_MODULES = ("_tests.py", "_floor.py", "_drift.py")
"""The modules whose computations go through `remembered`: a change to their code discards every memo."""


class StatsMemo:
    """The results of the memoised computations, keyed by their whole input.

    Active (`active()`), the memo answers those computations from what it
    holds and computes only the rest; `qualitycheck report` and `gate` keep it
    with the run (`to_json`/`from_json`). Arrays enter a key as a digest of
    their bytes (`array_key`). The salt holds the versions of numpy, scipy and
    statsmodels and a digest of the memoised modules' source, so a memo
    written by other code is discarded whole, never half-trusted.
    """

    def __init__(self, entries: Mapping[str, Any] | None = None):
        self.entries: dict[str, Any] = dict(entries or {})
        self.added = 0

    @classmethod
    def from_json(cls, data: Any) -> StatsMemo:
        """The memo as `to_json` wrote it; an empty one when it was written under another salt (or is not one)."""
        if isinstance(data, dict) and data.get("salt") == memo_salt() and isinstance(data.get("entries"), dict):
            return cls(data["entries"])
        return cls()

    def to_json(self) -> dict[str, Any]:
        return {"salt": memo_salt(), "entries": self.entries}

    @contextmanager
    def active(self) -> Iterator[StatsMemo]:
        """Answer the memoised computations from the memo (and record new ones) inside the block."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    def get_or_compute(self, key: str, compute: Callable[[], T]) -> T:
        if key in self.entries:
            return self.entries[key]  # type: ignore[no-any-return]
        value = self.entries[key] = compute()
        self.added += 1
        return value


_ACTIVE: ContextVar[StatsMemo | None] = ContextVar("qualitycheck_stats_memo", default=None)
_SALT: list[str] = []


def memo_salt() -> str:
    """Library versions and the memoised modules' source: what the memo's values depend on besides their keys."""
    if not _SALT:
        from importlib.metadata import PackageNotFoundError, version

        parts = []
        for dist in ("numpy", "scipy", "statsmodels"):
            try:
                parts.append(f"{dist}={version(dist)}")
            except PackageNotFoundError:
                parts.append(f"{dist}=?")
        here = Path(__file__).parent
        source = hashlib.sha256(b"".join((here / name).read_bytes() for name in MEMOISED_MODULES))
        parts.append(source.hexdigest()[:16])
        _SALT.append(";".join(parts))
    return _SALT[0]


def remembered(kind: str, key: Sequence[Any], compute: Callable[[], T]) -> T:
    """`compute()`, or its value from the active memo under (kind, key); computed as is without one."""
    memo = _ACTIVE.get()
    if memo is None:
        return compute()
    return memo.get_or_compute(f"{kind}:{json.dumps(list(key))}", compute)


def array_key(values: np.ndarray) -> str:
    """An array as a memo key: its length and a digest of its float64 bytes."""
    raw = np.ascontiguousarray(values, dtype=np.float64).tobytes()
    return f"{len(values)}/{hashlib.sha256(raw).hexdigest()}"
