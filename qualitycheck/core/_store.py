"""The durable run store: one SQLite file per run folder.

Every response is committed the moment it arrives (WAL mode), so a killed run
loses at most the requests that were in flight, and a rerun into the same
folder asks only for what is missing. Later stages (score, compare, gate,
report) read from here and never call an endpoint. Scores are derived data:
`score` replaces them as a whole; responses are never edited, only an error
outcome may be replaced by a later attempt's outcome.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import ValidationError

from qualitycheck.core._cases import Case
from qualitycheck.core._checks import Checks
from qualitycheck.core._config_file import Config
from qualitycheck.core._errors import RunMismatchError, StoreError, first_problem
from qualitycheck.core._records import FORMAT_VERSION, ArtifactRecord, LikelihoodRecord, Response, Score, _Readings

__all__ = [
    "STORE_NAME",
    "CaseRecords",
    "GroupsById",
    "LikelihoodKey",
    "RunStore",
    "StoredCases",
    "StoredOutcomes",
    "load_run",
]

STORE_NAME = "run.sqlite"

R = TypeVar("R", bound=ArtifactRecord)
"""A kind of typed artifact (`RunStore.record`)."""
L = TypeVar("L", bound=_Readings)
"""A kind of artifact that is a list of readings, whose empty record means "none taken" (`RunStore.record_or_empty`)."""
_ROUTE = "COALESCE(json_extract(body, '$.tags.route'), category)"
"""A stored case's route in SQL: `tags.route`, else its category (as `Case.route`)."""
_JUDGED = "json_extract(body, '$.checks.judge') IS NOT NULL"
"""A stored case asks for a judge (`Case.checks.judge`; a family switched off is not stored)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cases (
  idx INTEGER NOT NULL, id TEXT PRIMARY KEY, category TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS responses (
  case_id TEXT NOT NULL, target TEXT NOT NULL, repeat INTEGER NOT NULL,
  fingerprint TEXT NOT NULL, ok INTEGER NOT NULL, body TEXT NOT NULL,
  PRIMARY KEY (case_id, target, repeat));
CREATE TABLE IF NOT EXISTS scores (
  case_id TEXT NOT NULL, target TEXT NOT NULL, repeat INTEGER NOT NULL, "check" TEXT NOT NULL,
  status TEXT NOT NULL, body TEXT NOT NULL,
  PRIMARY KEY (case_id, target, repeat, "check"));
CREATE TABLE IF NOT EXISTS artifacts (name TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS comparisons (
  case_id TEXT NOT NULL, repeat INTEGER NOT NULL, body TEXT NOT NULL,
  PRIMARY KEY (case_id, repeat));
CREATE TABLE IF NOT EXISTS compared (case_id TEXT PRIMARY KEY, inputs TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS likelihoods (
  case_id TEXT NOT NULL, target TEXT NOT NULL, repeat INTEGER NOT NULL,
  fingerprint TEXT NOT NULL, answer TEXT NOT NULL, scorer TEXT NOT NULL, content TEXT NOT NULL,
  status TEXT NOT NULL, body TEXT NOT NULL,
  PRIMARY KEY (case_id, target, repeat));
CREATE INDEX IF NOT EXISTS likelihoods_by_content ON likelihoods (content, scorer);
"""


@dataclass(frozen=True)
class CaseRecords:
    """One case with everything stored for it: the unit every post-run stage streams over."""

    case: Case
    responses: list[Response]
    """Ordered by target, then repeat."""
    scores: list[Score]
    """Ordered by target, repeat, check; empty when not asked for."""
    inputs: str = ""
    """A digest of the stored rows these records were read from (`by_case(inputs=True)`; else empty):
    two walks that see the same digest read the same case, responses and scores."""
    likelihoods: list[LikelihoodRecord] = field(default_factory=list)
    """The likelihood stage's records of the case's answers, ordered by target, then repeat (`by_case(likelihoods=True)`;
    else empty). Current for an answer while their fingerprint and scorer are its own (`LikelihoodRecord`)."""


class RunStore:
    """A run folder's store. Use `create` to generate into it, `open` to read it."""

    def __init__(self, folder: Path, conn: sqlite3.Connection):
        self.folder = folder
        self._db = conn

    # ------------------------------------------------------------ opening
    @classmethod
    def _connect(cls, path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=10000")
        conn.executescript(_SCHEMA)
        return conn

    @classmethod
    def open(cls, folder: str | Path) -> RunStore:
        folder = Path(folder)
        path = folder / STORE_NAME
        if not path.is_file():
            raise StoreError(f"{folder}: not a qualitycheck run folder (no {STORE_NAME})")
        try:
            store = cls(folder, cls._connect(path))
            version = store.meta("format_version")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path}: unreadable run store ({exc})") from None
        if version is None:
            raise StoreError(f"{path}: run store has no manifest; was the run started?")
        if int(version) > FORMAT_VERSION:
            raise StoreError(f"{path}: written by a newer qualitycheck (format {version} > {FORMAT_VERSION})")
        return store

    @classmethod
    def create(cls, folder: str | Path, manifest: dict[str, Any], cases: Iterable[Case]) -> RunStore:
        """Start a run, or resume one whose manifest matches; refuse any other run."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        store = cls(folder, cls._connect(folder / STORE_NAME))
        old = store.meta("manifest")
        if old is not None:
            diff = _manifest_diff(old, manifest)
            if diff:
                raise RunMismatchError(f"{folder} holds a different run ({'; '.join(diff)}); choose another --out or delete it")
            store.set_meta("resumed_at", time.time())
            return store
        with store._db:
            store._db.execute("BEGIN")
            store.set_meta("format_version", FORMAT_VERSION)
            store.set_meta("manifest", manifest)
            store.set_meta("created_at", time.time())
            store._db.executemany(
                "INSERT INTO cases VALUES (?,?,?,?)",
                ((i, c.id, c.category, json.dumps(_case_body(c))) for i, c in enumerate(cases)),
            )
        return store

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ meta
    def meta(self, key: str) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def set_meta(self, key: str, value: Any) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta VALUES (?,?)", (key, json.dumps(value)))

    @property
    def manifest(self) -> dict[str, Any]:
        return self.meta("manifest") or {}

    # ------------------------------------------------------------ cases
    def cases(self) -> list[Case]:
        """Every case in suite order. Holds them all: stages that stream use `iter_cases` or `by_case`."""
        return list(self.iter_cases())

    def iter_cases(self, *, by_id: bool = False, page: int = 500, judged_only: bool = False) -> Iterator[Case]:
        """Cases one at a time, in suite order or (`by_id`) in the order responses and scores are read.

        Read a page per query, never through one statement left open: the
        runner walks the cases while its writer commits responses, and SQLite
        cannot restart its write-ahead log past an open read, so the log grew
        by every response of the run (178 MB for 5,000 cases of 3 kB answers).
        """
        for body in self._case_bodies(by_id=by_id, page=page, judged_only=judged_only):
            yield _case_of(body)

    def _case_bodies(
        self, *, by_id: bool, page: int = 500, judged_only: bool = False, start: str | None = None, stop: str | None = None
    ) -> Iterator[str]:
        """The cases' stored JSON, a page per query (see `iter_cases`); `by_id` from id `start` (inclusive) to `stop` (exclusive)."""
        key = "id" if by_id else "idx"
        last: Any = "" if by_id else -1
        where = f" AND {_JUDGED}" if judged_only else ""
        args: tuple[Any, ...] = ()
        if start is not None:
            where += " AND id >= ?"
            args += (start,)
        if stop is not None:
            where += " AND id < ?"
            args += (stop,)
        while True:
            rows = self._db.execute(
                f"SELECT {key}, body FROM cases WHERE {key} > ?{where} ORDER BY {key} LIMIT ?", (last, *args, page)
            ).fetchall()
            for last, body in rows:  # noqa: B007  (`last` is the page key the next query starts after)
                yield body
            if len(rows) < page:
                return

    def case_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM cases").fetchone()[0])

    def case_id_at(self, rank: int) -> str | None:
        """The id of the case at 0-based `rank` in id order (the order `by_case` walks); None past the last."""
        row = self._db.execute("SELECT id FROM cases ORDER BY id LIMIT 1 OFFSET ?", (rank,)).fetchone()
        return str(row[0]) if row else None

    def judged_case_count(self) -> int:
        """Cases that ask for a judge (`checks.judge`), counted by SQLite without parsing a case."""
        return int(self._db.execute(f"SELECT COUNT(*) FROM cases WHERE {_JUDGED}").fetchone()[0])

    def case_labels(self) -> dict[str, tuple[str, str]]:
        """case id → (category, route), without parsing whole cases (a few dozen bytes per case)."""
        q = f"SELECT id, category, {_ROUTE} FROM cases ORDER BY idx"
        return {i: (c, r) for i, c, r in self._db.execute(q)}

    def case_locations(self, ids: Iterable[str]) -> dict[str, tuple[str | None, int | None]]:
        """case id → (suite file, line) it was read from, for these ids (None, None: a case with no suite line, as a shadow's).

        Read by SQLite from the stored bodies without parsing a case: CI
        annotations point a regression at its suite line from the store
        alone (`qualitycheck gate DIR`). Stores written before cases kept
        their line read as (None, None).
        """
        wanted = list(dict.fromkeys(ids))
        out: dict[str, tuple[str | None, int | None]] = {}
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            q = f"SELECT id, json_extract(body, '$._file'), json_extract(body, '$._line') FROM cases WHERE id IN ({','.join('?' * len(chunk))})"
            out.update({cid: (f, int(n) if n is not None else None) for cid, f, n in self._db.execute(q, chunk)})
        return out

    def category_routes(self) -> dict[str, dict[str, int]]:
        """category → route → number of cases, counted by SQLite."""
        q = f"SELECT category, {_ROUTE}, COUNT(*) FROM cases GROUP BY 1, 2 ORDER BY 1, 2"
        out: dict[str, dict[str, int]] = {}
        for cat, route, n in self._db.execute(q):
            out.setdefault(cat, {})[route] = n
        return out

    def by_case(
        self,
        *,
        scores: bool = True,
        judged_only: bool = False,
        inputs: bool = False,
        likelihoods: bool = False,
        start: str | None = None,
        stop: str | None = None,
    ) -> Iterator[CaseRecords]:
        """Every case with its responses (and scores), one case in memory at a time.

        A merge of three reads ordered by case id, so a 100,000-case run costs
        what its largest case costs. Cases without any response come too
        (with empty lists): a stage decides what a missing answer means.
        `judged_only` walks only the cases that ask for a judge: the other
        cases' rows are skipped unparsed. `inputs` adds a digest of the rows
        read (`CaseRecords.inputs`), for a stage that keeps what it derived
        from them (`comparisons_with_inputs`). `start` and `stop` walk only
        the cases whose id is in [start, stop) (`case_id_at` finds a split).
        `likelihoods` adds the likelihood stage's records (a fourth read in
        the same order); they are not part of `inputs`, which the comparisons
        do not depend on.
        """
        where, args = _id_range("case_id", start, stop)
        resp = GroupsById(self._response_groups(where, args))
        sc = GroupsById(
            _grouped(self._db.execute(f'SELECT case_id, body FROM scores{where} ORDER BY case_id, target, repeat, "check"', args))
            if scores
            else iter(())
        )
        lk = GroupsById(
            _grouped(self._db.execute(f"SELECT case_id, body FROM likelihoods{where} ORDER BY case_id, target, repeat", args))
            if likelihoods
            else iter(())
        )
        # the validators themselves: `model_validate_json` adds a Python call per record to what they do
        response_of, score_of = Response.__pydantic_validator__.validate_json, Score.__pydantic_validator__.validate_json
        likelihood_of = LikelihoodRecord.__pydantic_validator__.validate_json
        for body in self._case_bodies(by_id=True, judged_only=judged_only, start=start, stop=stop):
            case = _case_of(body)
            r_bodies, s_bodies = resp.take(case.id), sc.take(case.id)
            yield CaseRecords(
                case,
                list(map(response_of, r_bodies)),
                list(map(score_of, s_bodies)),
                _digest_of(body, r_bodies, s_bodies) if inputs else "",
                list(map(likelihood_of, lk.take(case.id))) if not lk.empty else [],
            )

    def put_case(self, case: Case, idx: int, responses: Iterable[Response] = ()) -> None:
        """Add one case at position `idx`, with its answers, in one transaction: for a run whose cases arrive as it goes."""
        self.put_cases([(case, idx, responses)])

    def put_cases(self, items: Iterable[tuple[Case, int, Iterable[Response]]]) -> None:
        """Add cases (each at its position, with its answers) in one transaction.

        The shadow proxy stores mirrored requests this way as their answers
        come in (whatever arrived while the last commit ran goes in the next),
        so a killed proxy never leaves a case without its pair. The caller
        numbers the cases (from `case_count()`): looking the next position up
        here would scan the table on every insert.
        """
        with self._db:
            self._db.execute("BEGIN")
            for case, idx, responses in items:
                self._db.execute("INSERT INTO cases VALUES (?,?,?,?)", (idx, case.id, case.category, json.dumps(_case_body(case))))
                for r in responses:
                    self.put_response(r)

    # ------------------------------------------------------------ responses
    def put_response(self, r: Response) -> None:
        """Store one outcome durably; a success is never replaced by a later error."""
        body = r.model_dump_json()
        if r.ok:
            self._db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?,?,?,?,?,?)",
                (r.case_id, r.target, r.repeat, r.fingerprint, 1, body),
            )
        else:
            self._db.execute(
                "INSERT INTO responses VALUES (?,?,?,?,?,?) ON CONFLICT(case_id, target, repeat) "
                "DO UPDATE SET fingerprint=excluded.fingerprint, ok=0, body=excluded.body WHERE ok=0",
                (r.case_id, r.target, r.repeat, r.fingerprint, 0, body),
            )

    def put_responses(self, rs: Iterable[Response]) -> None:
        """Store several outcomes in one transaction (one commit, one WAL sync point), each as `put_response` does."""
        with self._db:
            self._db.execute("BEGIN")
            for r in rs:
                self.put_response(r)

    def stored_outcomes(self) -> StoredOutcomes:
        """What is stored per (case, target, repeat), for resume: looked up a case at a time. Close it after use."""
        return StoredOutcomes(self.folder / STORE_NAME)

    def responses(self, case_id: str | None = None) -> Iterator[Response]:
        q = "SELECT body FROM responses"
        args: tuple[Any, ...] = ()
        if case_id is not None:
            q += " WHERE case_id=?"
            args = (case_id,)
        for (body,) in self._db.execute(q + " ORDER BY case_id, target, repeat", args):
            yield Response.model_validate_json(body)

    def responses_by_case(self) -> Iterator[tuple[str, list[Response]]]:
        """Stream responses grouped by case without loading the whole run."""
        for cid, bodies in self._response_groups():
            yield cid, [Response.model_validate_json(b) for b in bodies]

    def _response_groups(self, where: str = "", args: tuple[str, ...] = ()) -> Iterator[tuple[str, list[str]]]:
        return _grouped(self._db.execute(f"SELECT case_id, body FROM responses{where} ORDER BY case_id, target, repeat", args))

    def answered_repeats(self, target: str) -> dict[str, int]:
        """case id → how many of its first repeats hold a success of `target` (repeats 0, 1, ... up to the first gap).

        What a stored side can give a later run of each case: the samples it
        holds without a hole (`pipeline._stored`). One int per case.
        """
        out: dict[str, int] = {}
        q = "SELECT case_id, repeat FROM responses WHERE target=? AND ok=1 ORDER BY case_id, repeat"
        for cid, rep in self._db.execute(q, (target,)):
            if out.get(cid, 0) == rep:
                out[cid] = rep + 1
        return out

    def count_responses(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for t, ok, n in self._db.execute("SELECT target, ok, COUNT(*) FROM responses GROUP BY target, ok"):
            d = out.setdefault(t, {"requests": 0, "errors": 0})
            d["requests"] += n
            if not ok:
                d["errors"] += n
        return out

    # ------------------------------------------------------------ scores
    def replace_scores(self, scores: Iterable[Score], checks: Iterable[str] | None = None, *, exclude: Iterable[str] = ()) -> int:
        """Swap in a stage's scores atomically.

        `checks` limits the replacement to those check names (the judge stage
        replaces only `judge`); `exclude` keeps those checks (the scorers keep
        the judge's). With neither, every score is replaced.
        """
        n = 0
        with self._db:
            self._db.execute("BEGIN")
            if checks is not None:
                names = list(checks)
                self._db.execute(f'DELETE FROM scores WHERE "check" IN ({",".join("?" * len(names))})', names)
            else:
                keep = list(exclude)
                self._db.execute(f'DELETE FROM scores WHERE "check" NOT IN ({",".join("?" * len(keep))})', keep)
            for s in scores:
                self._db.execute(
                    "INSERT OR REPLACE INTO scores VALUES (?,?,?,?,?,?)",
                    (s.case_id, s.target, s.repeat, s.check, s.status, s.model_dump_json()),
                )
                n += 1
        return n

    def scores(self) -> Iterator[Score]:
        for (body,) in self._db.execute('SELECT body FROM scores ORDER BY case_id, target, repeat, "check"'):
            yield Score.model_validate_json(body)

    # ------------------------------------------------------------ comparisons
    def replace_comparisons(self, rows: Iterable[tuple[str, int, str]]) -> int:
        """Swap in the compare stage's records: (case id, repeat, JSON body), streamed in one transaction."""
        n = 0
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM comparisons")
            for row in rows:
                self._db.execute("INSERT OR REPLACE INTO comparisons VALUES (?,?,?)", row)
                n += 1
            self._db.execute("DELETE FROM artifacts WHERE name='comparisons'")  # the single-blob form of older runs
        return n

    def comparisons_with_inputs(self, start: str | None = None, stop: str | None = None) -> GroupsById:
        """The stored comparison records by case (`take(case_id)`), each group led by the digest they were made from ("" if none).

        `start` and `stop`: only the cases whose id is in [start, stop), as `by_case`.
        """
        where, args = _id_range("c.case_id", start, stop)
        q = (
            "SELECT c.case_id, COALESCE(d.inputs, ''), c.body FROM comparisons c LEFT JOIN compared d ON d.case_id = c.case_id"
            f"{where} ORDER BY c.case_id, c.repeat"
        )
        return GroupsById(_grouped(_led(self._db.execute(q, args))))

    def update_comparisons(self, cases: Iterable[tuple[str, str, list[tuple[int, str]] | None]]) -> None:
        """Bring the compare stage's records up to date, case by case, in one transaction.

        Each item is (case id, inputs digest, records): the records as
        (repeat, JSON body) replace the case's stored ones, or None keeps
        them (they were made from the same inputs). Cases not walked lose
        their records, so the table ends exactly as `replace_comparisons` of
        every case's records would leave it, having written only what changed.
        """
        walked: list[tuple[str]] = []
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("CREATE TEMP TABLE IF NOT EXISTS walked (case_id TEXT PRIMARY KEY)")
            self._db.execute("DELETE FROM walked")
            for case_id, inputs, records in cases:
                walked.append((case_id,))
                if len(walked) >= 1024:
                    self._db.executemany("INSERT OR IGNORE INTO walked VALUES (?)", walked)
                    walked.clear()
                if records is None:
                    continue
                self._db.execute("DELETE FROM comparisons WHERE case_id=?", (case_id,))
                self._db.executemany("INSERT OR REPLACE INTO comparisons VALUES (?,?,?)", ((case_id, rep, body) for rep, body in records))
                self._db.execute("INSERT OR REPLACE INTO compared VALUES (?,?)", (case_id, inputs))
            self._db.executemany("INSERT OR IGNORE INTO walked VALUES (?)", walked)
            self._db.execute("DELETE FROM comparisons WHERE case_id NOT IN (SELECT case_id FROM walked)")
            self._db.execute("DELETE FROM compared WHERE case_id NOT IN (SELECT case_id FROM walked)")
            self._db.execute("DELETE FROM walked")
            self._db.execute("DELETE FROM artifacts WHERE name='comparisons'")  # the single-blob form of older runs

    def comparisons_by_case(self) -> Iterator[tuple[str, list[str]]]:
        """The compare stage's JSON records grouped by case (repeats in order), one case at a time."""
        return _grouped(self._db.execute("SELECT case_id, body FROM comparisons ORDER BY case_id, repeat"))

    def comparison_bodies(self) -> Iterator[str]:
        """The compare stage's JSON records, ordered by case id and repeat: one at a time."""
        for (body,) in self._db.execute("SELECT body FROM comparisons ORDER BY case_id, repeat"):
            yield body

    # ------------------------------------------------------------ likelihoods
    def put_likelihoods(self, rows: Iterable[tuple[LikelihoodRecord, str]]) -> None:
        """Store the likelihood stage's records, each with its content key, in one transaction; each replaces its answer's record.

        The content key names what was scored (prompt and answer tokens), so
        an identical answer met later is copied rather than scored again
        (`likelihood_by_content`).
        """
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO likelihoods VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    (r.case_id, r.target, r.repeat, r.fingerprint, r.answer, r.scorer, content, r.status, r.model_dump_json())
                    for r, content in rows
                ),
            )

    def likelihood_keys(self, case_id: str) -> dict[tuple[str, int], LikelihoodKey]:
        """(target, repeat) → what the stored record of that answer was made from: resume compares it with the response."""
        q = "SELECT target, repeat, fingerprint, answer, scorer, status FROM likelihoods WHERE case_id=?"
        return {(t, int(rep)): LikelihoodKey(fp, a, sc, st) for t, rep, fp, a, sc, st in self._db.execute(q, (case_id,))}

    def likelihood_by_content(self, content: str, scorer: str) -> LikelihoodRecord | None:
        """A scored record of the same prompt and answer tokens by the same scorer, if any (any case, target or repeat)."""
        row = self._db.execute(
            "SELECT body FROM likelihoods WHERE content=? AND scorer=? AND status='scored' LIMIT 1", (content, scorer)
        ).fetchone()
        return LikelihoodRecord.model_validate_json(row[0]) if row else None

    def likelihoods(self, case_id: str | None = None) -> Iterator[LikelihoodRecord]:
        """The likelihood records, ordered by case, target and repeat (of one case, or of the run, streamed)."""
        q, args = "SELECT body FROM likelihoods", cast("tuple[str, ...]", ())
        if case_id is not None:
            q, args = q + " WHERE case_id=?", (case_id,)
        for (body,) in self._db.execute(q + " ORDER BY case_id, target, repeat", args):
            yield LikelihoodRecord.model_validate_json(body)

    def likelihood_rows(self) -> Iterator[tuple[LikelihoodRecord, str]]:
        """Every record with its content key: what `merge` copies into the merged folder."""
        for body, content in self._db.execute("SELECT body, content FROM likelihoods ORDER BY case_id, target, repeat"):
            yield LikelihoodRecord.model_validate_json(body), content

    def likelihoods_by_case(self) -> Iterator[tuple[str, list[LikelihoodRecord]]]:
        """The records grouped by case id (in the order `by_case` walks), one case in memory at a time."""
        rows = self._db.execute("SELECT case_id, body FROM likelihoods ORDER BY case_id, target, repeat")
        for cid, bodies in _grouped(rows):
            yield cid, [LikelihoodRecord.model_validate_json(b) for b in bodies]

    def likelihood_counts(self, scorer: str) -> dict[str, int]:
        """Records of this scorer by status (`scored`, `too_long`, `error`), counted by SQLite."""
        q = "SELECT status, COUNT(*) FROM likelihoods WHERE scorer=? GROUP BY status"
        return {st: int(n) for st, n in self._db.execute(q, (scorer,))}

    def ok_response_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM responses WHERE ok=1").fetchone()[0])

    # ------------------------------------------------------------ artifacts
    def put_artifact(self, name: str, value: Any) -> None:
        """Stage outputs that are not per response: metrics scrapes, preflight, comparisons."""
        self._db.execute("INSERT OR REPLACE INTO artifacts VALUES (?,?)", (name, json.dumps(value, default=str)))

    def artifact(self, name: str, default: Any = None) -> Any:
        body = self._artifact_body(name)
        return json.loads(body) if body is not None else default

    def _artifact_body(self, name: str) -> str | None:
        row = self._db.execute("SELECT body FROM artifacts WHERE name=?", (name,)).fetchone()
        return row[0] if row else None

    def config(self) -> Config:
        """The config the run was made with, as stored (header values redacted), validated; the defaults when none was stored.

        What later stages read of it (the seed, the GPU price) comes from
        here, so a damaged config is a `StoreError` naming the folder and the
        field, never a default quietly taken in its place.
        """
        try:
            return Config.model_validate(self.artifact("config") or {})
        except ValidationError as exc:
            raise StoreError(f"{self.folder}: artifact 'config' is not a valid config: {first_problem(exc)}") from None

    def put_record(self, record: ArtifactRecord) -> None:
        """A typed artifact, stored under its kind's name (`ArtifactRecord.ARTIFACT`)."""
        self.put_artifact(record.ARTIFACT, record.model_dump(mode="json"))

    def record(self, kind: type[R]) -> R | None:
        """The run's artifact of this kind, validated; None when the run has none.

        One that does not validate, or that a newer qualitycheck wrote, is a
        `StoreError` naming the folder and the artifact: a reader never
        guesses at a record's fields.
        """
        body = self._artifact_body(kind.ARTIFACT)
        if body is None:
            return None
        raw = json.loads(body)
        version = raw.get("format_version") if isinstance(raw, dict) else None
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            raise StoreError(
                f"{self.folder}: artifact {kind.ARTIFACT!r} written by a newer qualitycheck (format {version} > {FORMAT_VERSION})"
            )
        try:  # strict: a count stored as "3" or true is damage, not a value to coerce
            return kind.model_validate_json(body, strict=True)
        except ValidationError as exc:
            raise StoreError(f"{self.folder}: artifact {kind.ARTIFACT!r} is not a valid {kind.__name__}: {first_problem(exc)}") from None

    def record_or_empty(self, kind: type[L]) -> L:
        """The run's list of readings of this kind, validated; the empty record when the run has none.

        Only list kinds have an empty record that means "none taken"; a kind
        with required fields (a preflight, a noise floor) has no such value,
        so its absence stays `record`'s None.
        """
        return self.record(kind) or kind()

    def artifact_names(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT name FROM artifacts ORDER BY name")]


@dataclass(frozen=True)
class LikelihoodKey:
    """What a stored likelihood record was made from (`RunStore.likelihood_keys`)."""

    fingerprint: str
    answer: str
    scorer: str
    status: str


class StoredCases:
    """The run's cases as the store holds them, re-read on every iteration: what generation walks.

    Generation reads the cases back from the store rather than from the suite
    files: they are exactly what the manifest fingerprinted (also on resume),
    and a suite edited while a run is going cannot change what is sent.
    """

    def __init__(self, store: RunStore, ids: Iterable[str] | None = None):
        self._store = store
        self._ids = frozenset(ids) if ids is not None else None
        """Only these cases (a round of sampling, the baseline asked again), or all of them."""
        self._count: int | None = None if ids is None else len(self._ids)  # type: ignore[arg-type]

    def __len__(self) -> int:
        if self._count is None:
            self._count = self._store.case_count()
        return self._count

    def __iter__(self) -> Iterator[Case]:
        if self._ids is None:
            return self._store.iter_cases()
        ids = self._ids
        return (c for c in self._store.iter_cases() if c.id in ids)


class StoredOutcomes:
    """(case, target, repeat) → (fingerprint, ok) of the stored responses, read one case at a time.

    Resume needs to know, per case, which answers exist and for which exact
    request. A dict of every stored response cost ~400 bytes each (80 MB to
    resume a 200,000-response run); this keeps one case's rows. The lookups
    use a connection of their own, so they never wait on, or hold open a
    read against, the writer's connection. Generation looks a case up before
    sending it, so what this invocation stores meanwhile is never seen.
    """

    def __init__(self, path: Path):
        self._db = RunStore._connect(path)
        self._any = self._db.execute("SELECT 1 FROM responses LIMIT 1").fetchone() is not None
        self._case: str | None = None
        self._rows: dict[tuple[str, int], tuple[str, bool]] = {}

    def __bool__(self) -> bool:
        """Whether anything was stored when generation began (a fresh run skips every lookup)."""
        return self._any

    def get(self, key: tuple[str, str, int], default: tuple[str, bool] | None = None) -> tuple[str, bool] | None:
        case_id, target, rep = key
        if not self._any:
            return default
        if case_id != self._case:
            q = "SELECT target, repeat, fingerprint, ok FROM responses WHERE case_id=?"
            self._rows = {(t, int(r)): (fp, bool(ok)) for t, r, fp, ok in self._db.execute(q, (case_id,))}
            self._case = case_id
        return self._rows.get((target, rep), default)

    def close(self) -> None:
        self._db.close()


class GroupsById:
    """Groups read in case-id order, taken by a merge that walks the cases in the same order.

    Groups of ids the walk never asks for (rows of a case no longer in the
    store) are skipped; an id without a group gets an empty list.
    """

    def __init__(self, groups: Iterator[tuple[str, list[str]]]):
        self._groups = groups
        self._next = next(groups, None)
        self.empty = self._next is None

    def take(self, case_id: str) -> list[str]:
        while self._next is not None and self._next[0] < case_id:
            self._next = next(self._groups, None)
        if self._next is None or self._next[0] != case_id:
            return []
        bodies = self._next[1]
        self._next = next(self._groups, None)
        return bodies


def _id_range(column: str, start: str | None, stop: str | None) -> tuple[str, tuple[str, ...]]:
    """A WHERE clause (and its arguments) keeping the rows whose `column` is in [start, stop); empty for the whole run."""
    terms = [(f"{column} >= ?", start), (f"{column} < ?", stop)]
    kept = [(t, v) for t, v in terms if v is not None]
    return (" WHERE " + " AND ".join(t for t, _ in kept), tuple(v for _, v in kept)) if kept else ("", ())


def _grouped(rows: Iterable[tuple[str, str]]) -> Iterator[tuple[str, list[str]]]:
    """(case id, body) rows ordered by case id → (case id, bodies), one group at a time.

    A plain loop: `itertools.groupby` with a list per group costs more per
    row (docs/PERFORMANCE.md), and every walk of the store groups every row it reads.
    """
    current: str | None = None
    bodies: list[str] = []
    for cid, body in rows:
        if cid == current:
            bodies.append(body)
            continue
        if current is not None:
            yield current, bodies
        current, bodies = cid, [body]
    if current is not None:
        yield current, bodies


def _case_of(body: str) -> Case:
    """A stored case (its body as `_case_body` wrote it), with the suite file and line it was read from.

    Not validated again: it was validated before it was stored, and its
    body is that case dumped. Its checks are validated when first read
    (`Checks.deferred`), which the walks after scoring never do.
    """
    d = json.loads(body)
    d["file"], d["line"] = d.pop("_file", None), d.pop("_line", None)
    if not _CASE_FIELDS.issuperset(d):  # not a body this version wrote: validated, so it fails as it always did
        return Case.model_validate(d)
    d["checks"] = Checks.deferred(d.get("checks") or {})
    return Case.model_construct(**d)


_CASE_FIELDS = frozenset(Case.model_fields)


def _digest_of(case_body: str, responses: list[str], scores: list[str]) -> str:
    """What one case's stored rows hold, as a short digest (JSON bodies never contain the separators)."""
    h = hashlib.blake2b(case_body.encode(), digest_size=16)
    for sep, bodies in ((b"\x01", responses), (b"\x02", scores)):
        h.update(sep)
        for b in bodies:
            h.update(b.encode())
            h.update(b"\x00")
    return h.hexdigest()


def _led(rows: Iterable[tuple[str, str, str]]) -> Iterator[tuple[str, str]]:
    """(case id, lead, body) rows → (case id, item) rows whose first item per case is its lead, then its bodies."""
    cur: str | None = None
    for cid, lead, body in rows:
        if cid != cur:
            cur = cid
            yield cid, lead
        yield cid, body


def _case_body(c: Case) -> dict[str, Any]:
    d = c.model_dump(mode="json", by_alias=True, exclude_none=True)
    d["_file"], d["_line"] = c.file, c.line
    return d


def _manifest_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    diff = []
    if old.get("suite_fingerprint") != new.get("suite_fingerprint"):
        diff.append(
            f"suites differ: stored {old.get('suite_files')} ({old.get('cases')} cases), now {new.get('suite_files')} ({new.get('cases')} cases)"
        )
    if old.get("targets") != new.get("targets"):
        diff.append(f"targets differ: stored {_brief(old.get('targets'))}, now {_brief(new.get('targets'))}")
    if old.get("repeats") != new.get("repeats"):
        diff.append(f"repeats differ: stored {old.get('repeats')}, now {new.get('repeats')}")
    if "sampling" in old and "sampling" in new and old["sampling"] != new["sampling"]:  # folders written before it have none
        diff.append(f"sampling settings differ: stored {old['sampling']}, now {new['sampling']}")
    if old.get("stored") != new.get("stored"):  # the stored runs a side's answers were copied from (`pipeline._stored`)
        diff.append(f"the stored runs answers were taken from differ: stored {old.get('stored')}, now {new.get('stored')}")
    return diff


def _brief(targets: Any) -> str:
    if not isinstance(targets, dict):
        return str(targets)
    return ", ".join(f"{n}={t.get('url')} ({t.get('model')})" for n, t in targets.items())


def load_run(folder: str | Path) -> dict[str, Any]:
    """The run as pandas DataFrames: `cases`, `responses`, `scores` (one row per record)."""
    import pandas as pd

    with RunStore.open(folder) as store:
        cases = pd.DataFrame(
            [{"id": c.id, "category": c.category, "route": c.route, **{f"tag.{k}": v for k, v in c.tags.items()}} for c in store.cases()]
        )
        responses = pd.DataFrame(
            [
                {
                    **r.model_dump(exclude={"usage", "error", "chunk_times", "chunk_tokens", "token_ids"}),
                    "prompt_tokens": r.usage.prompt_tokens,
                    "completion_tokens": r.usage.completion_tokens,
                    "error_kind": r.error.kind if r.error else None,
                    "error": r.error.message if r.error else None,
                    "chunks": len(r.chunk_times),
                }
                for r in store.responses()
            ]
        )
        scores = pd.DataFrame([s.model_dump() for s in store.scores()])
    return {"cases": cases, "responses": responses, "scores": scores}
