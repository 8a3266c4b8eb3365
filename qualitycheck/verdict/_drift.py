"""Format drift: per feature of the answers (length, JSON-ness, markdown, ...), paired values per category and a test of the change.

A feature's values are paired per (case, repeat) like every other number of
the verdict, and tested against the control's own change (the A/A noise):
McNemar's exact test (the sign test) for booleans, Wilcoxon's signed-rank
test for numbers.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from typing import Any, Literal, TypeGuard

import numpy as np

from qualitycheck.verdict._memo import array_key, remembered
from qualitycheck.verdict._tests import ALPHA, sign_test_p

__all__ = ["WILCOXON_EXACT_MAX", "DriftSamples", "DriftTally", "add_drift", "format_drift", "wilcoxon_method"]


class DriftSamples:
    """One format feature's paired values in one category, as packed doubles (8 bytes a value).

    `b`/`c` pair the baseline with the candidate on every case both answered;
    `kb`/`k` pair the baseline with the control where the control answered.
    """

    __slots__ = ("b", "c", "k", "kb")

    def __init__(self) -> None:
        self.b, self.c, self.kb, self.k = array("d"), array("d"), array("d"), array("d")


def add_drift(into: dict[str, DriftSamples], fb: Mapping[str, Any], fc: Mapping[str, Any], fk: Mapping[str, Any] | None) -> None:
    """Add one (case, repeat)'s format features of each side; non-numeric features are not compared."""
    for name, vb in fb.items():
        vc = fc.get(name)
        if not _numeric(vb) or not _numeric(vc):
            continue
        d = into.get(name)
        if d is None:
            d = into[name] = DriftSamples()
        d.b.append(float(vb))
        d.c.append(float(vc))
        if fk is not None and _numeric(fk.get(name)):
            d.kb.append(float(vb))
            d.k.append(float(fk[name]))


_PLAIN_NUMBERS = frozenset((bool, int, float))


class _Block:
    """Rows of one feature layout: every side's values appended whole, in the layout's order."""

    __slots__ = ("b", "c", "k", "keys", "rows")

    def __init__(self, keys: tuple[str, ...], control: bool):
        self.keys = keys
        self.rows: array[int] = array("q")
        self.b: array[float] = array("d")
        self.c: array[float] = array("d")
        self.k: array[float] | None = array("d") if control else None


class DriftTally:
    """One category's paired feature values, exactly as `add_drift` on each of its rows would hold them.

    `add_drift` pays a few Python steps per feature per row (thirty features,
    every case). Here a row's sides are appended whole: rows whose sides
    have the same features in the same order, all plain numbers (every
    answer's `format_features` has), go into the block of that layout in
    one call per side, and `samples()` cuts each feature's pairs out of
    the blocks at the end, dropping the pairs `add_drift` skips (a side not
    a number, or NaN) and keeping row order. Any other row goes through
    `add_drift` itself, numbered, and is merged back in that order.
    """

    __slots__ = ("_blocks", "_loose", "_loose_rows", "rows")

    def __init__(self) -> None:
        self.rows = 0
        self._blocks: dict[tuple[tuple[str, ...], bool], _Block] = {}
        self._loose: list[dict[str, DriftSamples]] = []
        self._loose_rows: list[int] = []

    def add(self, fb: Mapping[str, Any], fc: Mapping[str, Any], fk: Mapping[str, Any] | None) -> None:
        """One (case, repeat)'s format features of each side (`fk`: the control's, or None)."""
        row = self.rows
        self.rows += 1
        keys = tuple(fb)
        plain = _PLAIN_NUMBERS
        if (
            tuple(fc) == keys
            and (fk is None or tuple(fk) == keys)
            and plain.issuperset(map(type, fb.values()))
            and plain.issuperset(map(type, fc.values()))
            and (fk is None or plain.issuperset(map(type, fk.values())))
        ):
            block = self._blocks.get((keys, fk is not None))
            if block is None:
                block = self._blocks[keys, fk is not None] = _Block(keys, fk is not None)
            block.rows.append(row)
            block.b.fromlist(list(fb.values()))  # a list converts in one C loop; extend(values) goes item by item
            block.c.fromlist(list(fc.values()))
            if block.k is not None and fk is not None:
                block.k.fromlist(list(fk.values()))
            return
        into: dict[str, DriftSamples] = {}
        add_drift(into, fb, fc, fk)
        if into:
            self._loose.append(into)
            self._loose_rows.append(row)

    def merge(self, later: DriftTally) -> None:
        """Fold in the rows of the cases after this tally's, numbered after its own (blocks of a layout it has continue)."""
        offset = self.rows
        for key, block in later._blocks.items():
            mine = self._blocks.get(key)
            if mine is None:
                mine = self._blocks[key] = _Block(block.keys, block.k is not None)
            mine.rows.frombytes((np.frombuffer(block.rows, dtype=np.int64) + offset).tobytes())
            mine.b.extend(block.b)
            mine.c.extend(block.c)
            if mine.k is not None and block.k is not None:
                mine.k.extend(block.k)
        self._loose.extend(later._loose)
        self._loose_rows.extend(row + offset for row in later._loose_rows)
        self.rows += later.rows

    def samples(self) -> dict[str, DriftSamples]:
        """feature → its paired values in row order (features without a single pair are absent, as with `add_drift`)."""
        parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {}
        for block in self._blocks.values():
            width = len(block.keys)
            rows = np.frombuffer(block.rows, dtype=np.int64)
            b = np.frombuffer(block.b, dtype=np.float64).reshape(-1, width)
            c = np.frombuffer(block.c, dtype=np.float64).reshape(-1, width)
            k = np.frombuffer(block.k, dtype=np.float64).reshape(-1, width) if block.k is not None else None
            for j, name in enumerate(block.keys):
                ok = ~(np.isnan(b[:, j]) | np.isnan(c[:, j]))
                with_k = ok & ~np.isnan(k[:, j]) if k is not None else np.zeros(len(rows), dtype=bool)
                kcol = k[with_k, j] if k is not None else np.empty(0)
                parts.setdefault(name, []).append((rows[ok], b[ok, j], c[ok, j], rows[with_k], b[with_k, j], kcol))
        for row, into in zip(self._loose_rows, self._loose, strict=True):
            for name, d in into.items():
                r = np.full(len(d.b), row, dtype=np.int64)
                rk = np.full(len(d.k), row, dtype=np.int64)
                parts.setdefault(name, []).append((r, np.asarray(d.b), np.asarray(d.c), rk, np.asarray(d.kb), np.asarray(d.k)))
        out: dict[str, DriftSamples] = {}
        for name, pieces in parts.items():
            rows_bc, b, c, rows_k, kb, k = (np.concatenate([p[i] for p in pieces]) for i in range(6))
            if not len(rows_bc):
                continue
            if len(pieces) > 1:
                order, korder = np.argsort(rows_bc, kind="stable"), np.argsort(rows_k, kind="stable")
                b, c, kb, k = b[order], c[order], kb[korder], k[korder]
            d = out[name] = DriftSamples()
            d.b.frombytes(np.ascontiguousarray(b, dtype=np.float64).tobytes())
            d.c.frombytes(np.ascontiguousarray(c, dtype=np.float64).tobytes())
            d.kb.frombytes(np.ascontiguousarray(kb, dtype=np.float64).tobytes())
            d.k.frombytes(np.ascontiguousarray(k, dtype=np.float64).tobytes())
        return out


def format_drift(samples: Mapping[str, Mapping[str, DriftSamples]], alpha: float = ALPHA) -> dict[str, dict[str, dict[str, Any]]]:
    """category → feature → rates on each side, the paired p-value and a drift flag.

    Each feature's kind is the one declared next to it (`FEATURE_KINDS` in
    scoring): booleans are rates, numbers means, in every category alike,
    whatever values a category happens to hold; a feature not declared there
    is a mean. A feature is flagged when the paired
    test (McNemar exact for booleans, Wilcoxon signed-rank for numbers) is
    significant at `alpha` and the change exceeds the control's own change
    (the A/A noise floor; zero without a control).
    """
    from qualitycheck.scoring._format import FEATURE_KINDS  # the scoring package loads every check family: only when needed

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for cat, feats in sorted(samples.items()):
        for name, d in sorted(feats.items()):
            b, c = np.frombuffer(d.b, dtype=np.float64), np.frombuffer(d.c, dtype=np.float64)
            boolean = FEATURE_KINDS.get(name, "mean") == "rate"
            noise = abs(float(np.mean(d.k) - np.mean(d.kb))) if d.k else 0.0
            delta = float(c.mean() - b.mean())
            p = _paired_feature_p(b, c, boolean)
            entry: dict[str, Any] = {
                "baseline": float(b.mean()),
                "candidate": float(c.mean()),
                "delta": delta,
                "kind": "rate" if boolean else "mean",
                "p_value": p,
                "noise": noise if d.k else None,
                "flag": bool(p is not None and p < alpha and abs(delta) > noise),
            }
            if d.k:
                entry["control"] = float(np.mean(d.k))
            out.setdefault(cat, {})[name] = entry
    return out


def _numeric(v: Any) -> TypeGuard[float]:
    return isinstance(v, (bool, int, float)) and not (isinstance(v, float) and np.isnan(v))


def _paired_feature_p(b: np.ndarray, c: np.ndarray, boolean: bool) -> float | None:
    if len(b) == 0:
        return None
    if boolean:
        down = int(np.sum((b == 1) & (c == 0)))
        up = int(np.sum((b == 0) & (c == 1)))
        if down + up == 0:
            return 1.0
        return sign_test_p(down, up)
    d = c - b
    if np.all(d == 0):
        return 1.0
    method = wilcoxon_method(d)

    def compute() -> float:
        from scipy import stats as sps

        return float(sps.wilcoxon(b, c, zero_method="wilcox", method=method).pvalue)

    return remembered("wilcoxon", (method, array_key(b), array_key(c)), compute)


WILCOXON_EXACT_MAX = 50
"""Largest number of pairs the signed-rank test is computed exactly for (scipy's own bound for "auto")."""


def wilcoxon_method(d: np.ndarray) -> Literal["exact", "asymptotic"]:
    """The signed-rank test's method for paired differences `d`, chosen explicitly.

    The exact null distribution is valid only without zero differences and
    without ties among the absolute differences, and cheap for small n: use
    it there. Everywhere else the normal approximation with scipy's tie
    correction. scipy's "auto" would run a permutation test for 13 pairs or
    fewer with ties (seconds per feature, every format feature of every
    small category), whose answer the approximation gives in microseconds.
    """
    nonzero = np.abs(d[d != 0])
    if len(nonzero) == len(d) and len(d) <= WILCOXON_EXACT_MAX and len(np.unique(nonzero)) == len(nonzero):
        return "exact"
    return "asymptotic"
