"""`qualitycheck replay`: request logs in, a suite out, one `.jsonl` per category and `replay.json` beside them.

The flow, one way and streaming:

    files ─detect─▶ sources ─read (main process)─▶ chunks of raw lines or table rows
      ─parse, redact, case_from_request, validate (worker processes, results in order)─▶ cases
      ─dedup (8-byte digests) ─▶ the stratified sample (--sample) or straight to the files
      ─▶ SUITE_DIR/<category>.jsonl + SUITE_DIR/replay.json

Parsing and redaction are most of the cost, so they run in worker processes
(two by default when the log is large) on chunks of raw bytes, and the main
process keeps only what must see every line in order: the dedup set, the
sample's candidates and the counts. Results come back in submission order with a
bounded number of chunks in flight, so the output and the sample do not
depend on the number of workers, and memory does not grow with the log.

Nothing is written into SUITE_DIR until the whole log was read: cases go to
a staging folder inside it and are moved in at the end, with replay.json
last. A folder holding anything but an earlier replay is refused.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import textwrap
import types
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np
from pydantic import ValidationError

from qualitycheck.core._cases import Case, _loc
from qualitycheck.core._checks import LoadContext, check_registry
from qualitycheck.core._errors import InputError, Problem
from qualitycheck.core._process import few_collections, fork_is_safe
from qualitycheck.traffic._formats import (
    JSON_FORMATS,
    SPAN_BYTES,
    Columns,
    LineSpan,
    Logged,
    LogSource,
    batch_outputs,
    detect,
    json_lines,
    line_spans,
    parse_json_line,
    request_from_row,
    span_lines,
    table_chunks,
    table_columns,
)
from qualitycheck.traffic._manifest import (
    MANIFEST_NAME,
    MAX_SKIP_REASONS,
    CategoryCases,
    LineCounts,
    ReplayManifest,
    ReplayOptionsRecord,
    SkippedLines,
    SourceRecord,
    StratumRecord,
    read_replay_manifest,
)
from qualitycheck.traffic._redact import KINDS, Redactor
from qualitycheck.traffic._rules import Rules, draft_case, redact_case, redact_fields
from qualitycheck.traffic._sample import DigestSet, StratifiedSample, Stratum, prompt_digest, sample_key, stratum_key

__all__ = ["ReplayOptions", "replay", "summary_lines"]

CHUNK = 1000
"""Lines (or table rows) a worker gets at a time: large enough to amortise the hand-over, small enough to keep
the chunks in flight a few megabytes."""
PARALLEL_FROM_BYTES = 8 << 20
"""Logs smaller than this are read in-process: starting workers costs more than it saves."""
MAX_WORKERS = 2


@dataclass(frozen=True)
class ReplayOptions:
    sample: int | None = None
    """Cases to keep (stratified); None keeps every usable request."""
    seed: int = 0
    rules: Rules = field(default_factory=Rules)
    keep_pii: bool = False
    workers: int | None = None
    """Processes that parse and redact; None: two for a large log on a machine with two cores or more, else none."""


# ------------------------------------------------------------------ per line (in the workers)


@dataclass(frozen=True)
class _Setup:
    """What a worker needs, sent once when it starts."""

    rules: Rules
    redactor: Redactor | None
    seed: int
    outputs: dict[str, Logged]
    columns: dict[int, Columns]


_StratumT = tuple[str, str, str, str, bool]
_CaseOut = tuple[int, _StratumT, int, int, str, bytes, dict[str, int] | None, tuple[str, ...], bytes | None]
"""(line, stratum, prompt digest, sampling key, case id, suite line, redactions, check families, logged bytes).

Redactions None: the suite line holds the case as logged, to be redacted when
written (`_Writer.write`), with the logged bytes (or None) as the redactor's
hint; a sampled replay sends its candidates this way (`_one`)."""
_Counted = tuple[int, _StratumT, int, int]
"""(line, stratum, prompt digest, sampling key): a case the sample cannot take, only counted."""


@dataclass(frozen=True)
class _Result:
    """One chunk's outcome, compact: most of a log's lines come back as 12 bytes (digest and stratum) each, so
    handing results to the main process and reading them there costs little next to the parsing."""

    src: int
    skips: list[tuple[int, str]]
    """(line, reason) of each line not used."""
    digests: bytes
    """The prompt digest of each usable line, in log order (uint64s)."""
    strata: list[_StratumT]
    """The chunk's distinct strata."""
    stratum_of: bytes
    """Each usable line's stratum, an index into `strata` (uint32s)."""
    cases: list[tuple[int, _CaseOut]]
    """(position among the usable lines, case) of every line the sample may take, or of every line without --sample."""

    @property
    def usable(self) -> int:
        return len(self.digests) // 8


_Job = tuple[int, str, str, list[tuple[int, Any]] | LineSpan]
"""(source index, format, file name, [(line, raw bytes | table row | reason)] or the span of an uncompressed file the
worker reads itself)."""

_setup: _Setup | None = None


_GC_YOUNG, _GC_OLDER = 50_000, (20, 100)
"""A line allocates some twenty containers that die with it: at the default threshold (700) the collector runs
every few dozen lines and walks every young object; this rarely, it still frees cycles but costs little."""


def _start_worker(setup: _Setup) -> None:
    global _setup
    _setup = setup
    gc.freeze()  # the modules imported so far are never garbage: keep the collector from walking them per chunk
    gc.set_threshold(_GC_YOUNG, *_GC_OLDER)


def _case_id(key: str | None, name: str, line: int, redactor: Redactor | None) -> str:
    """The log's own id when it has a usable one (and it holds nothing to redact), else `<file>-<line>`."""
    if key is not None:
        key = key.strip()
        if key and key.isprintable() and (redactor is None or redactor.text(key) == key):
            return key
    return f"{name}-{line}"


_LOAD_CACHE: dict[tuple[str, str], str | None] = {}
"""A family's load-time check per distinct spec: checking a JSON Schema against its meta-schema takes
milliseconds, and a log sends the same few schemas again and again."""
_LOAD_CACHE_MAX = 4096


def _load_problem(key: str, spec: Any) -> str | None:
    load = check_registry[key].load
    if load is None:
        return None
    memo = (key, json.dumps(spec.model_dump(mode="json", by_alias=True), sort_keys=True))
    if memo not in _LOAD_CACHE:
        _import_schema_library()  # before a family's load imports it whole
        ctx = LoadContext(Path.cwd())
        load(spec, ctx)
        if len(_LOAD_CACHE) >= _LOAD_CACHE_MAX:
            _LOAD_CACHE.clear()
        _LOAD_CACHE[memo] = f"not a valid case (checks.{key}.{ctx.problems[0][0]})" if ctx.problems else None
    return _LOAD_CACHE[memo]


def _case_problem(case: dict[str, Any]) -> str | None:
    """Why `qualitycheck validate` would refuse the case (by field, never by value), or None."""
    try:
        c = Case.model_validate(case)
    except ValidationError as exc:
        fields = sorted({_loc(e["loc"]) or "case" for e in exc.errors()})
        return "not a valid case (" + ", ".join(fields[:3]) + ")"
    for key, spec in c.checks.items():
        problem = _load_problem(key, spec)
        if problem:
            return problem
    return None


_IRI_GRAMMAR = "rfc3987_syntax"


def _import_schema_library() -> None:
    """Import jsonschema with the IRI grammar left for the first check of an `iri` format.

    jsonschema's format checker imports `rfc3987_syntax`, which compiles
    its Earley grammars as it is imported: serial CPU before the
    first line is read, for formats (`iri`, `iri-reference`) that checking a
    schema against its meta-schema never asserts. While jsonschema is
    imported, a stand-in takes that module's place; the checker keeps the
    stand-in's `is_valid_syntax`, which imports the real one when first
    called and answers as it does, so every check behaves the same. The
    stand-in leaves `sys.modules` once jsonschema is in: whoever imports the
    grammar's module later gets the real one. No stand-in is put in when
    the grammar's module is imported already, or not installed (jsonschema
    then checks no IRI format, with or without this).
    """
    if "jsonschema" in sys.modules:
        return
    stand_in = None
    if _IRI_GRAMMAR not in sys.modules and importlib.util.find_spec(_IRI_GRAMMAR) is not None:
        stand_in = types.ModuleType(_IRI_GRAMMAR)
        stand_in.is_valid_syntax = _is_valid_iri_syntax  # type: ignore[attr-defined]
        sys.modules[_IRI_GRAMMAR] = stand_in
    try:
        import jsonschema  # noqa: F401
    finally:
        if stand_in is not None and sys.modules.get(_IRI_GRAMMAR) is stand_in:
            del sys.modules[_IRI_GRAMMAR]


def _is_valid_iri_syntax(term: str, value: str) -> bool:
    """`rfc3987_syntax.is_valid_syntax`, imported on first use."""
    real: Callable[[str, str], bool] = importlib.import_module(_IRI_GRAMMAR).is_valid_syntax
    return real(term, value)


_SHAPE_CACHE: dict[str | bytes, str | None] = {}
_encode = msgspec.json.Encoder().encode


def _shape_key(params: Any, checks: Any) -> str | bytes:
    """A cache key that two shapes share only when they are the same JSON values, types included.

    msgspec's encoding (cheaper than `repr`: docs/PERFORMANCE.md) tells 1 from 1.0
    and from true; only NaN and infinities (which `json.loads` reads) would
    be written as `null` like None, so any `null` falls back to `repr`.
    """
    try:
        key = _encode((params, checks))
    except (TypeError, ValueError, OverflowError):
        return repr((params, checks))
    return repr((params, checks)) if b"null" in key else key


_SHAPE_PROBE = {"id": "probe", "category": "probe", "messages": [{"role": "user", "content": ""}]}


def _shape_problem(case: dict[str, Any]) -> str | None:
    """`_case_problem` for a case `draft_case` made, which checked its messages by Contract 1's rules already.

    What is left to validate is the params and checks, and a log repeats a
    few shapes of those (the same tools, schemas and settings) over and over:
    each distinct shape is validated once.
    """
    memo = _shape_key(case["params"], case.get("checks"))
    if memo not in _SHAPE_CACHE:
        if len(_SHAPE_CACHE) >= _LOAD_CACHE_MAX:
            _SHAPE_CACHE.clear()
        _SHAPE_CACHE[memo] = _case_problem({**_SHAPE_PROBE, "params": case["params"], "checks": case.get("checks", {})})
    return _SHAPE_CACHE[memo]


_Bounds = tuple[int | None, dict[_StratumT, int]]


def _one(
    setup: _Setup, src: int, fmt: str, name: str, stem: str, line: int, item: Any, bounds: _Bounds | None
) -> _CaseOut | _Counted | str:
    if fmt == "unreadable":
        return str(item)
    if fmt in JSON_FORMATS:
        req = parse_json_line(fmt, item, setup.outputs)  # type: ignore[arg-type]
        raw = item
    else:
        req = request_from_row(item, setup.columns[src])
        raw = None
    if isinstance(req, str):
        return req
    case_id = _case_id(req.key, stem, line, setup.redactor)
    d = draft_case(req.body, req.tags, setup.rules, case_id=case_id, logged=req.logged, source=f"replay of {name}:{line}")
    if isinstance(d, str):
        return d
    stratum = stratum_key(d)
    digest, key = prompt_digest(d.case), sample_key(setup.seed, case_id)
    if bounds is not None and _beyond(key, stratum, bounds):  # the sample holds smaller keys: checked, not redacted nor serialised
        return _shape_problem(d.case) or (line, stratum, digest, key)
    pending = bounds is not None and setup.redactor is not None
    if not pending:
        d = redact_case(d, setup.redactor, raw)
    problem = _shape_problem(d.case)  # redaction changes strings, not shapes; the cases written are validated whole
    if problem:
        return problem
    return (
        line,
        stratum,
        digest,
        key,
        case_id,
        _suite_line(d.case),
        None if pending else d.redactions or {},
        tuple(sorted(d.case.get("checks", {}))),
        raw if pending else None,
    )


def _suite_line(case: dict[str, Any]) -> bytes:
    return json.dumps(case, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _beyond(key: int, stratum: _StratumT, bounds: _Bounds) -> bool:
    pool, floors = bounds
    floor = floors.get(stratum)
    return pool is not None and key >= pool and floor is not None and key >= floor


def _work(job: _Job, bounds: _Bounds | None) -> _Result:
    """One chunk of lines. `bounds` (`StratifiedSample.bounds`, None without --sample) tells the lines the
    sample cannot take: those are not serialised. With a sample, the others go back as logged (`_CaseOut`):
    of the thousands a long log offers, the main process redacts the few the sample takes."""
    src, fmt, name, items = job
    if isinstance(items, LineSpan):
        span = items
        try:
            items = span_lines(span)
        except OSError as exc:  # one record for the span, as the main process records the unreadable rest of a file
            reason = f"lines {span.first} to {span.after - 1} cannot be read ({type(exc).__name__}: {exc})"
            return _Result(src, [(span.first, reason)], b"", [], b"", [])
    setup = _setup
    assert setup is not None, "worker started without its setup"
    stem = _stem(name)
    skips: list[tuple[int, str]] = []
    digests = array("Q")
    stratum_of = array("I")
    strata: dict[_StratumT, int] = {}
    cases: list[tuple[int, _CaseOut]] = []
    for line, item in items:
        try:
            out = _one(setup, src, fmt, name, stem, line, item, bounds)
        except RecursionError:
            out = "nested too deeply"
        except Exception as exc:  # a line is counted and reported, never a crash; the type names what went wrong
            out = f"could not be read ({type(exc).__name__})"
        if isinstance(out, str):
            skips.append((line, out))
            continue
        if len(out) > 4:
            cases.append((len(digests), out))
        digests.append(out[2])
        stratum_of.append(strata.setdefault(out[1], len(strata)))
    return _Result(src, skips, _little(digests), list(strata), _little(stratum_of), cases)


def _little(a: array[int]) -> bytes:
    """The array's bytes in little-endian order, what the main process reads them as whatever the machine."""
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


# ------------------------------------------------------------------ reading (main process)


def _stem(name: str) -> str:
    """A file's name without `.gz` and its format suffix: the stem of generated case ids."""
    name = name.removesuffix(".gz")
    return name.rsplit(".", 1)[0] if "." in name else name


def _jobs(requests: Sequence[LogSource], columns: dict[int, Columns]) -> Iterator[_Job]:
    for i, src in enumerate(requests):
        name = src.path.name
        last = 0  # the last line handed out: the unreadable rest starts after it
        chunk: list[tuple[int, Any]] = []
        try:
            if src.format in JSON_FORMATS and not src.compressed:  # the workers read the lines themselves
                for span in line_spans(src.path, SPAN_BYTES):
                    last = span.after - 1
                    yield i, src.format, name, span
            elif src.format in JSON_FORMATS:
                for n, raw in json_lines(src):
                    last = n
                    chunk.append((n, raw))
                    if len(chunk) >= CHUNK:
                        yield i, src.format, name, chunk
                        chunk = []
                if chunk:
                    yield i, src.format, name, chunk
            else:
                for rows in table_chunks(src, columns[i], CHUNK):
                    last = rows[-1][0] if rows else last
                    yield i, src.format, name, rows
        except InputError:
            raise
        except Exception as exc:  # a damaged file (truncated gzip, a CSV row pandas cannot split): the rest is reported once
            if chunk:
                yield i, src.format, name, chunk
            yield i, "unreadable", name, [(last + 1, f"the rest of the file cannot be read ({type(exc).__name__})")]


def _results(jobs: Iterator[_Job], setup: _Setup, workers: int, bounds: Callable[[], _Bounds | None]) -> Iterator[_Result]:
    """Each job's result, in job order; at most a few jobs in flight, so reading never runs ahead of the workers."""
    global _setup
    if workers <= 1:
        before, _setup = _setup, setup
        try:
            for job in jobs:
                yield _work(job, bounds())
        finally:
            _setup = before
        return
    fork = fork_is_safe()
    if fork:  # imported once here rather than in every worker
        _import_schema_library()
    ctx = mp.get_context("fork" if fork else "spawn")
    with ctx.Pool(workers, initializer=_start_worker, initargs=(setup,)) as pool:
        pending: deque[Any] = deque()
        for job in jobs:
            pending.append(pool.apply_async(_work, (job, bounds())))
            if len(pending) >= 2 * workers + 2:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def _workers(requested: int | None, requests: Sequence[LogSource]) -> int:
    if requested is not None:
        return max(1, requested)
    size = sum(s.path.stat().st_size * (5 if s.compressed else 1) for s in requests)
    return MAX_WORKERS if size >= PARALLEL_FROM_BYTES and (os.cpu_count() or 1) >= 2 else 1


def _columns_for(src: LogSource, rules: Rules) -> Columns:
    """The column mapping of a table, checked against its header (a missing column names the rules file's line)."""
    header = table_columns(src)
    if rules.columns is None:
        inferred = Columns.infer(header)
        if inferred is None:
            raise InputError(
                [
                    Problem(
                        str(src.path),
                        None,
                        "",
                        "no `messages` or `prompt` column: map the columns in a rules file (columns: {prompt: COLUMN, ...}, --rules FILE)",
                    )
                ]
            )
        return inferred
    missing = [(f, c) for f, c in rules.columns.used().items() if c not in header]
    if missing:
        raise InputError(
            [
                Problem(rules.source or "rules", rules.column_lines.get(f), f"columns.{f}", f"no column {c!r} in {src.path}")
                for f, c in missing
            ]
        )
    return rules.columns


def _join(answers: Sequence[LogSource], keep_text: bool) -> tuple[dict[str, Logged], list[tuple[int, set[str]]]]:
    """custom_id → logged answer over every Batch API output file, and per file (its lines, its custom_ids)."""
    outputs: dict[str, Logged] = {}
    per_file: list[tuple[int, set[str]]] = []
    for src in answers:
        lines, ids = 0, set()
        for _, key, logged in batch_outputs(src, keep_text):
            lines += 1
            if key is not None and logged is not None:
                outputs[key] = logged
                ids.add(key)
        per_file.append((lines, ids))
    return outputs, per_file


# ------------------------------------------------------------------ writing


class _Staging:
    """SUITE_DIR's new files, kept aside until the log was read whole; an earlier replay there is replaced."""

    def __init__(self, out: Path):
        self.out = out
        if out.exists() and not out.is_dir():
            raise InputError([Problem(str(out), None, "", "exists and is not a folder")])
        self.stale: list[Path] = []
        if out.is_dir():
            entries = [e for e in out.iterdir() if not e.name.startswith(".replay-")]
            if entries:
                manifest = out / MANIFEST_NAME
                if not manifest.is_file():
                    raise InputError(
                        [Problem(str(out), None, "", "is not empty and holds no replay.json: give a new folder (or an earlier replay's)")]
                    )
                old = read_replay_manifest(manifest)
                self.stale = [out / c.file for c in old.categories.values()]
                others = sorted(e.name for e in entries if e not in self.stale and e.name != MANIFEST_NAME)
                if others:
                    raise InputError(
                        [
                            Problem(
                                str(out),
                                None,
                                "",
                                f"holds files an earlier replay did not write ({', '.join(others[:3])}): give a new folder",
                            )
                        ]
                    )
        self.created = not out.exists()
        out.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=".replay-", dir=out))

    def commit(self, manifest: ReplayManifest) -> None:
        for f in self.stale:
            f.unlink(missing_ok=True)
        for f in sorted(self.tmp.iterdir()):
            os.replace(f, self.out / f.name)
        part = self.tmp / MANIFEST_NAME
        part.write_text(manifest.to_json_text(), encoding="utf-8")
        os.replace(part, self.out / MANIFEST_NAME)
        self.tmp.rmdir()

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.created:
            try:
                self.out.rmdir()
            except OSError:
                pass


class _Writer:
    """Appends cases to `<category>.jsonl` and tallies what it wrote.

    A log's own ids can repeat (two Batch API files that both number their
    requests `request-1`, ...): a repeated id becomes `<file>-<line>`, and
    only when that is taken too is the case refused.
    """

    def __init__(self, folder: Path, redactor: Redactor | None):
        self.folder = folder
        self.redactor = redactor
        self.files: dict[str, IO[bytes]] = {}
        self.ids: set[str] = set()
        self.cases: Counter[str] = Counter()
        self.checks: dict[str, Counter[str]] = {}
        self.redactions: Counter[str] = Counter()
        self.no_check = 0
        self.by_stratum: Counter[_StratumT] = Counter()

    def write(self, c: _CaseOut, fallback_id: str) -> str | None:
        """Write the case; None, or why it cannot be written."""
        _, stratum, _, _, case_id, line, redactions, checks, raw = c
        case = json.loads(line)
        if redactions is None:  # a sampled candidate, sent as logged: only the cases the sample takes are redacted
            assert self.redactor is not None, "only a replay that redacts sends cases as logged"
            try:
                case, redactions = redact_fields(case, self.redactor, raw)
            except RecursionError:
                return "nested too deeply"
            except Exception as exc:  # as the workers report a line they cannot turn into a case
                return f"could not be read ({type(exc).__name__})"
            line = b""
        if case_id in self.ids:
            if fallback_id in self.ids:
                return "its id repeats an earlier request's"
            case["id"] = case_id = fallback_id
            line = b""
        if not line:
            line = _suite_line(case)
        problem = _case_problem(case)  # every case written is checked whole, as `qualitycheck validate` will
        if problem:
            return problem
        self.ids.add(case_id)
        category = stratum[0]
        f = self.files.get(category)
        if f is None:
            f = self.files[category] = (self.folder / f"{category}.jsonl").open("wb")
        f.write(line)
        self.cases[category] += 1
        tally = self.checks.setdefault(category, Counter())
        for name in checks or ("none",):
            tally[name] += 1
        self.no_check += not checks
        self.redactions.update(redactions)
        self.by_stratum[stratum] += 1
        return None

    def close(self) -> None:
        for f in self.files.values():
            f.close()


# ------------------------------------------------------------------ the tally


class _Tally:
    """Everything the main process sees of each line, in log order."""

    def __init__(self, requests: Sequence[LogSource], options: ReplayOptions, writer: _Writer):
        self.requests = requests
        self.writer = writer
        self.read = [0] * len(requests)
        self.usable = [0] * len(requests)
        self.first_reason: dict[int, str] = {}
        self.skipped = 0
        self.reasons: list[str] = []
        self.by_reason: Counter[str] = Counter()
        self.duplicates = 0
        self.new = 0
        self.digests = DigestSet()
        self.strata: Counter[_StratumT] = Counter()
        self.sampler: StratifiedSample[_StratumT, tuple[int, _CaseOut]] | None = (
            StratifiedSample(options.sample, options.rules.min_per_stratum) if options.sample else None
        )
        self.seq = 0

    def _fallback_id(self, src: int, line: int) -> str:
        return f"{_stem(self.requests[src].path.name)}-{line}"

    def skip(self, src: int, line: int, reason: str) -> None:
        self.skipped += 1
        self.by_reason[reason] += 1
        where = f"{self.requests[src].path}:{line}: {reason}"
        self.first_reason.setdefault(src, where)
        if len(self.reasons) < MAX_SKIP_REASONS:
            self.reasons.append(where)

    def add(self, result: _Result) -> None:
        src = result.src
        n = result.usable
        self.read[src] += len(result.skips) + n
        for line, reason in result.skips:
            self.skip(src, line, reason)
        self.usable[src] += n
        if not n:
            return
        new = self.digests.add_array(np.frombuffer(result.digests, dtype="<u8"))
        fresh = int(np.count_nonzero(new))
        self.duplicates += n - fresh
        self.new += fresh
        stratum_of = np.frombuffer(result.stratum_of, dtype="<u4")
        for i, k in enumerate(np.bincount(stratum_of[new], minlength=len(result.strata)).tolist()):
            if k:
                self.strata[result.strata[i]] += k
        seq = np.cumsum(new)
        first_seq = self.seq
        self.seq += fresh
        if self.sampler is not None:  # the lines that came back counted only (the sample cannot take them)
            counted = new.copy()
            counted[[pos for pos, _ in result.cases]] = False
            for i, k in enumerate(np.bincount(stratum_of[counted], minlength=len(result.strata)).tolist()):
                if k:
                    self.sampler.count(result.strata[i], k)
        for pos, c in result.cases:
            if not new[pos]:
                continue
            if self.sampler is not None:
                self.sampler.offer(c[1], c[3], first_seq + int(seq[pos]), (src, c))
            elif problem := self.writer.write(c, self._fallback_id(src, c[0])):
                self.skip(src, c[0], problem)

    def finish(self) -> int:
        """Write the sample (with --sample); the number of usable new requests not written."""
        if self.sampler is None:
            return 0
        taken = self.sampler.take()
        for _, (src, c) in taken:
            if problem := self.writer.write(c, self._fallback_id(src, c[0])):
                self.skip(src, c[0], problem)
        return self.new - len(taken)

    def bounds(self) -> _Bounds | None:
        return self.sampler.bounds() if self.sampler is not None else None

    def unusable(self) -> list[Problem]:
        return [
            Problem(
                str(src.path),
                None,
                "",
                f"nothing usable: all {self.read[i]:,} requests were skipped (first: {self.first_reason.get(i, 'no requests')})"
                if self.read[i]
                else "nothing usable: no requests",
            )
            for i, src in enumerate(self.requests)
            if not self.usable[i]
        ]


# ------------------------------------------------------------------ replay


def replay(logs: Sequence[str | Path], out: str | Path, options: ReplayOptions | None = None) -> ReplayManifest:
    """Turn request logs into a suite in `out`; returns the manifest it wrote as `out/replay.json`.

    Bad input (a missing or unknown file, a file with nothing usable, a
    column mapping the file does not fit) is an InputError (exit 2) and
    leaves `out` as it was.
    """
    options = options or ReplayOptions()
    out = Path(out)
    problems: list[Problem] = []
    sources: list[LogSource] = []
    for p in logs:
        try:
            sources.append(detect(Path(p)))
        except InputError as exc:
            problems += exc.problems
    if problems:
        raise InputError(problems)
    if options.sample is not None and options.sample < 1:
        raise InputError([Problem("command line", None, "--sample", "expected a whole number of at least 1")])
    requests = [s for s in sources if s.format != "batch_output"]
    answers = [s for s in sources if s.format == "batch_output"]
    if not requests:
        raise InputError(
            [Problem(str(answers[0].path), None, "", "holds Batch API answers only: give the batch's input file too (joined by custom_id)")]
        )
    rules = options.rules
    columns = {i: _columns_for(s, rules) for i, s in enumerate(requests) if s.format not in JSON_FORMATS}
    outputs, joined = _join(answers, keep_text=rules.judge is not None and rules.judge.mode == "reference")
    setup = _Setup(rules, None if options.keep_pii else Redactor(), options.seed, outputs, columns)

    staging = _Staging(out)
    writer = _Writer(staging.tmp, setup.redactor)
    tally = _Tally(requests, options, writer)
    # every line allocates: the collector would otherwise walk every imported module's objects, often
    with few_collections(_GC_YOUNG, _GC_OLDER):
        try:
            for result in _results(_jobs(requests, columns), setup, _workers(options.workers, requests), tally.bounds):
                tally.add(result)
            unusable = tally.unusable()
            if unusable:
                raise InputError(unusable)
            not_sampled = tally.finish()
            writer.close()
            used = sum(writer.cases.values())
            matched = {k for k in outputs}
            manifest = ReplayManifest(
                sources=[
                    SourceRecord(path=str(s.path), format=s.format, compressed=s.compressed, lines=tally.read[i])
                    for i, s in enumerate(requests)
                ]
                + [
                    SourceRecord(path=str(s.path), format=s.format, compressed=s.compressed, lines=lines, joined=len(ids & matched))
                    for s, (lines, ids) in zip(answers, joined)
                ],
                options=ReplayOptionsRecord(sample=options.sample, seed=options.seed, rules=rules.source, keep_pii=options.keep_pii),
                lines=LineCounts(
                    read=sum(tally.read), used=used, skipped=tally.skipped, duplicates=tally.duplicates, not_sampled=not_sampled
                ),
                skipped=SkippedLines(count=tally.skipped, reasons=tally.reasons, by_reason=dict(tally.by_reason.most_common())),
                redactions={k: writer.redactions.get(k, 0) for k in KINDS},
                strata={
                    Stratum(*s).key(): StratumRecord(
                        category=s[0], output=s[1], temperature=s[2], prompt=s[3], system=s[4], lines=n, written=writer.by_stratum[s]
                    )
                    for s, n in sorted(tally.strata.items())
                },
                categories={
                    c: CategoryCases(file=f"{c}.jsonl", cases=n, checks=dict(sorted(writer.checks[c].items())))
                    for c, n in sorted(writer.cases.items())
                },
                cases_without_check=writer.no_check,
            )
            staging.commit(manifest)
        except BaseException:
            writer.close()
            staging.abort()
            raise
    return manifest


def summary_lines(m: ReplayManifest, out: str | Path, width: int = 80) -> list[str]:
    """The terminal summary: what was read, what was kept, what was redacted, where it went."""
    n = m.lines
    files = sum(1 for s in m.sources if s.format != "batch_output")
    paras = [
        f"replay: {n.read:,} requests from {files} file{'s' if files != 1 else ''} → {n.used:,} cases in "
        f"{len(m.categories)} categor{'ies' if len(m.categories) != 1 else 'y'}",
        f"skipped {n.skipped:,} · duplicates {n.duplicates:,} · not sampled {n.not_sampled:,}",
        "redacted: "
        + ("off (--keep-pii)" if m.options.keep_pii else " · ".join(f"{k} {v:,}" for k, v in m.redactions.items() if v) or "nothing found"),
        "cases: " + " · ".join(f"{c} {cc.cases:,}" for c, cc in m.categories.items()),
    ]
    if m.cases_without_check:
        paras.append(f"{m.cases_without_check:,} cases have no check (open-ended, and no judge in the rules)")
    paras += [f"first skipped: {r}" for r in m.skipped.reasons[:3]]
    paras.append(f"written to {out} ({MANIFEST_NAME} lists sources, counts and strata)")
    lines: list[str] = []
    for i, p in enumerate(paras):
        lines += textwrap.wrap(p, width, initial_indent="" if i == 0 else "  ", subsequent_indent="    ", break_on_hyphens=False)
    return lines
