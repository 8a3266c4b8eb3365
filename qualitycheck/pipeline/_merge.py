"""Combine the run folders of `--shard i/n` jobs into one run folder.

CI jobs or machines each run a shard of a suite (`qualitycheck run --shard
i/n`, a stable hash of case ids). `qualitycheck merge DIR... --out DIR`
copies their cases, responses, scores, judge cache and serving artifacts into
a new folder and rebuilds the summary, sign-off and report from it, exactly
as `qualitycheck score` would on a single run: the merged summary is the
single run's summary. The merged manifest is the one an unsharded run of the
same suite writes, so `qualitycheck run --out MERGED` resumes it.

Shards must measure the same thing: the same targets and repeats, and no
case in two shards. Anything else is refused (exit 2), because a comparison
across different endpoints or a case counted twice would be meaningless.
"""

from __future__ import annotations

import heapq
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from qualitycheck.core._cases import Case
from qualitycheck.core._errors import RunMismatchError, StoreError
from qualitycheck.core._records import ARTIFACT_RECORDS
from qualitycheck.core._store import STORE_NAME, RunStore

__all__ = ["merge_runs"]

_JUDGE_CACHE = "judge_cache.sqlite"
_DERIVED = {"comparisons"}
"""Artifacts that finish() rebuilds from the merged records; copying them would only go stale."""


class _MergedCases:
    """The shards' cases in the order one unsharded run would have stored them, read again on every pass.

    Each shard stores its cases in suite order (suite argument, then file,
    then line), so the merged order is a merge of the shards' streams by that
    key: no shard's cases are ever all in memory.
    """

    def __init__(self, stores: Sequence[RunStore], suite_files: list[str]):
        self._stores = stores
        self._suite_files = suite_files

    def _rank(self, c: Case) -> tuple[int, str, int]:
        f = c.file or ""
        for i, s in enumerate(self._suite_files):
            if f == s or f.startswith(s.rstrip("/") + "/"):
                return i, f, c.line or 0
        return len(self._suite_files), f, c.line or 0

    def __iter__(self) -> Iterator[Case]:
        return heapq.merge(*(s.iter_cases() for s in self._stores), key=self._rank)

    def __len__(self) -> int:
        return sum(s.case_count() for s in self._stores)


def _check_compatible(folders: Sequence[Path], stores: Sequence[RunStore]) -> None:
    first = stores[0].manifest
    problems = []
    for folder, store in zip(folders[1:], stores[1:]):
        m = store.manifest
        if m.get("targets") != first.get("targets"):
            problems.append(f"{folder}: targets differ from {folders[0]}")
        if m.get("repeats") != first.get("repeats"):
            problems.append(f"{folder}: repeats {m.get('repeats')} differ from {first.get('repeats')} in {folders[0]}")
    shards = [s.manifest.get("shard") for s in stores]
    if all(shards):
        ns = {str(s).split("/")[-1] for s in shards}
        if len(ns) > 1:
            problems.append(f"shards split the suite differently: {', '.join(map(str, shards))}")
    owner: dict[str, Path] = {}
    overlaps: list[str] = []
    for folder, store in zip(folders, stores, strict=True):
        for cid in store.case_labels():  # ids only: a few dozen bytes a case, never whole cases
            if cid in owner:
                overlaps.append(cid)
            else:
                owner[cid] = folder
    if overlaps:
        problems.append(f"{len(overlaps)} case(s) appear in more than one shard (e.g. {overlaps[0]!r}); shards must be disjoint")
    if problems:
        raise RunMismatchError("cannot merge these runs:\n  " + "\n  ".join(problems))


def _merged_artifact(name: str, stores: list[RunStore]) -> Any:
    """The merged run's artifact `name`: a typed one as its kind combines (`ArtifactRecord.merged`), the others by shape."""
    kind = ARTIFACT_RECORDS.get(name)
    if kind is not None:
        records = [r for r in (s.record(kind) for s in stores) if r is not None]
        return kind.merged(records).model_dump(mode="json") if records else None
    present = [v for v in (s.artifact(name) for s in stores) if v is not None]
    if not present:
        return None
    if all(isinstance(v, list) for v in present):  # e.g. a shadow proxy's periods: each folder's own, one after another
        return [x for v in present for x in v]
    if all(isinstance(v, dict) for v in present) and name != "config":
        out: dict[str, Any] = {}
        for v in present:
            for k, x in v.items():
                if isinstance(x, (int, float)) and not isinstance(x, bool) and isinstance(out.get(k), (int, float)):
                    out[k] += x
                else:
                    out.setdefault(k, x)
        return out
    return present[0]


def _merge_judge_caches(folders: Sequence[Path], out: Path) -> None:
    """Union of the shards' judge caches, so re-scoring the merged run calls no judge."""
    caches = [f / _JUDGE_CACHE for f in folders if (f / _JUDGE_CACHE).is_file()]
    if not caches:
        return
    db = sqlite3.connect(out / _JUDGE_CACHE)
    try:
        for i, path in enumerate(caches):
            db.execute("ATTACH DATABASE ? AS shard", (str(path),))
            tables = db.execute("SELECT name, sql FROM shard.sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'").fetchall()
            for name, sql in tables:
                if i == 0 or not db.execute("SELECT 1 FROM main.sqlite_master WHERE name=?", (name,)).fetchone():
                    db.execute(sql.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1))
                db.execute(f'INSERT OR IGNORE INTO main."{name}" SELECT * FROM shard."{name}"')
            db.commit()
            db.execute("DETACH DATABASE shard")
    finally:
        db.close()


def merge_runs(folders: Sequence[str | Path], out: str | Path) -> int:
    """Merge shard run folders into `out` and rebuild its summary; returns the verdict's exit code."""
    from qualitycheck.pipeline._run import finish, manifest_for

    paths = [Path(f) for f in folders]
    out = Path(out)
    if len(set(map(str, (f.resolve() for f in paths)))) != len(paths):
        raise RunMismatchError("the same run folder is given twice")
    if (out / STORE_NAME).exists():
        raise RunMismatchError(f"{out} already holds a run; merge into a new folder")
    if any(out.resolve() == f.resolve() for f in paths):
        raise RunMismatchError(f"{out} is one of the shards; merge into a new folder")
    stores = [RunStore.open(f) for f in paths]
    try:
        _check_compatible(paths, stores)
        raw_cfg = stores[0].artifact("config")
        if raw_cfg is None:
            raise StoreError(f"{paths[0]}: run has no stored config; was it started by `qualitycheck run`?")
        first = stores[0].config()  # a damaged config refuses the merge, naming the folder and the field (a StoreError)
        cfg = first.model_copy(update={"run": first.run.model_copy(update={"shard": None})})
        raw_cfg = dict(raw_cfg)
        raw_cfg["run"] = {**(raw_cfg.get("run") or {}), "shard": None}
        suite_files: list[str] = []
        for s in stores:
            for f in s.manifest.get("suite_files", []):
                if f not in suite_files:
                    suite_files.append(f)
        cases = _MergedCases(stores, suite_files)
        manifest = manifest_for(cases, cfg, suite_files)
        manifest["targets"] = stores[0].manifest.get("targets", manifest["targets"])
        manifest["merged_from"] = [str(f) for f in paths]
        names = sorted({n for s in stores for n in s.artifact_names()} - {"config"} - _DERIVED)
        # combined (and the typed ones validated) before `out` exists: a shard's damaged record refuses the merge
        # without leaving a half-built folder that the next attempt would refuse as "already holds a run"
        artifacts = {name: value for name in names if (value := _merged_artifact(name, stores)) is not None}
        merged = RunStore.create(out, manifest, cases)
        try:
            merged.put_artifact("config", raw_cfg)
            for name, value in artifacts.items():
                merged.put_artifact(name, value)
            for s in stores:
                for r in s.responses():
                    merged.put_response(r)
            merged.replace_scores(sc for s in stores for sc in s.scores())
            merged.put_likelihoods(row for s in stores for row in s.likelihood_rows())
            _merge_judge_caches(paths, out)
            print(f"qualitycheck: merged {len(paths)} runs, {len(cases)} cases → {out}", file=sys.stderr)
            return finish(merged, cfg)
        finally:
            merged.close()
    finally:
        for s in stores:
            s.close()
