"""SQL answers: parse with the case's dialect, and run against a fixture database.

sqlglot is lenient (it accepts `SELECT a FROM t,` and reads trailing words as
aliases), so a parse check alone misses damaged SQL. `sql_result` therefore
executes the answer and the reference on the same fixture database and
compares result sets; the real engine rejects what sqlglot let through.

Engines: SQLite for the `sqlite` dialect (the default), DuckDB for every
other dialect, after sqlglot transpiles the statement to DuckDB's. Answers
run read-only (SQLite: an authorizer that allows only reads; DuckDB: a fresh
in-memory database per answer with external access disabled) and under a
time limit, so a cross join of big tables cannot stall scoring.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response, ScoreStatus
from qualitycheck.scoring._base import BASELINE, BrokenScorer, CheckSpec, LoadContext, Outcome, Scorer, check_family
from qualitycheck.scoring._extract import fences

__all__ = ["SqlCheck", "SqlParseScorer", "SqlResultScorer", "extract_sql", "normalised_tree"]


class SqlCheck(CheckSpec):
    """`sql_parse` always; `sql_result` too when both `db` and `reference` are given."""

    dialect: str = "sqlite"
    db: str | None = None
    """Path of a .sql fixture (schema + rows), relative to the suite file."""
    reference: str | None = None
    ordered: bool | None = None
    """Compare row order; default: only when the reference has ORDER BY."""


QUERY_TIMEOUT_S = 5.0
MAX_ROWS = 100_000
DIFF_ROWS = 5
_SQL_LANGS = {"sql", "sqlite", "postgresql", "postgres", "mysql", "duckdb", "tsql", "plsql", ""}


def extract_sql(text: str) -> tuple[str, str]:
    """(sql, where): a fenced SQL block if there is one, else the whole answer."""
    for f in fences(text):
        if f.lang in _SQL_LANGS:
            return f.body.strip(), "fenced"
    return text.strip(), "strict"


def _parse_one(sql: str, dialect: str) -> Any:
    """Exactly one statement, or ValueError/ParseError saying why not."""
    import sqlglot
    from sqlglot import exp

    trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None]
    if len(trees) != 1:
        raise ValueError(f"expected one SQL statement, found {len(trees)}")
    # sqlglot reads prose ("hello world" → an alias) and JSON ({"a": 1} → a struct)
    # as bare expressions; an answer to a SQL question must be a statement.
    if not isinstance(trees[0], (exp.Query, exp.DML, exp.DDL, exp.Command, exp.Pragma, exp.Transaction)):
        raise ValueError(f"not a SQL statement (parsed as a bare {type(trees[0]).__name__.lower()} expression)")
    return trees[0]


def normalised_tree(sql: str, dialect: str) -> str | None:
    """The statement after identifier normalisation, regenerated; None if it does not parse.

    Two answers that differ only in keyword case, spacing, quoting of plain
    identifiers or a trailing semicolon give the same string.
    """
    from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

    try:
        tree = normalize_identifiers(_parse_one(sql, dialect), dialect=dialect)
    except Exception:
        return None
    return str(tree.sql(dialect=dialect, normalize=True, comments=False))


class SqlParseScorer:
    """`sql_parse`: one statement that sqlglot parses with the case's dialect.

    Records `same_as_baseline`: whether this answer and the baseline's are
    the same tree after normalisation (None when either does not parse).
    """

    check = "sql_parse"

    def __init__(self, spec: SqlCheck):
        self.dialect = spec.dialect

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        sql, where = extract_sql(answer.text)
        detail: dict[str, Any] = {"dialect": self.dialect, "found_in": where}
        try:
            _parse_one(sql, self.dialect)
        except Exception as exc:  # sqlglot's ParseError/TokenError, or our statement count
            detail["error"] = str(exc).splitlines()[0][:300]
            detail["truncated"] = answer.finish_reason == "length"
            status: ScoreStatus = "fail"
        else:
            status = "pass"
        if answer.target != BASELINE and baseline is not None and baseline.error is None:
            mine = normalised_tree(sql, self.dialect)
            theirs = normalised_tree(extract_sql(baseline.text)[0], self.dialect)
            detail["same_as_baseline"] = None if mine is None or theirs is None else mine == theirs
        return Outcome(status, status == "pass", detail)


# ------------------------------------------------------------ execution


def _cell(v: Any) -> Any:
    """Values that compare as a person would: 2 == 2.0, Decimal → float, bytes → hex, floats to 6 places."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, Decimal):
        v = float(v)
    if isinstance(v, float):
        if v != v:  # NaN
            return "NaN"
        r = round(v, 6)
        return int(r) if r.is_integer() and abs(r) < 2**53 else r
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, (int, str)) or v is None:
        return v
    return str(v)


def _rows(raw: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(_cell(v) for v in row) for row in raw]


_READ_ONLY_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}


def _sqlite_read_only(action: int, *args: Any) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ONLY_ACTIONS else sqlite3.SQLITE_DENY


class _SqliteFixture:
    """The fixture script loaded once; each answer runs on its own copy, read-only."""

    def __init__(self, script: str):
        self._template = sqlite3.connect(":memory:", check_same_thread=False)
        self._template.executescript(script)
        self._lock = threading.Lock()

    def run(self, sql: str) -> tuple[list[tuple[Any, ...]], int, bool]:
        conn = sqlite3.connect(":memory:")
        try:
            with self._lock:
                self._template.backup(conn)
            conn.set_authorizer(_sqlite_read_only)
            deadline = time.monotonic() + QUERY_TIMEOUT_S
            conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
            try:
                cur = conn.execute(sql)
                raw = cur.fetchmany(MAX_ROWS + 1)
            except sqlite3.OperationalError as exc:
                if str(exc) == "interrupted":
                    raise TimeoutError(f"query ran longer than {QUERY_TIMEOUT_S:g} s") from None
                raise
            ncols = len(cur.description or ())
            return _rows(raw[:MAX_ROWS]), ncols, len(raw) > MAX_ROWS
        finally:
            conn.close()


class _DuckdbFixture:
    """DuckDB has no cheap in-memory copy, so each answer gets a freshly loaded database."""

    def __init__(self, script: str):
        self._script = script
        self.run("SELECT 1")  # fail at set-up, not per answer, when the fixture does not load

    def run(self, sql: str) -> tuple[list[tuple[Any, ...]], int, bool]:
        import duckdb

        con = duckdb.connect(":memory:")
        try:
            con.execute(self._script)
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            timer = threading.Timer(QUERY_TIMEOUT_S, con.interrupt)
            timer.start()
            try:
                cur = con.execute(sql)
                raw = cur.fetchmany(MAX_ROWS + 1)
            except duckdb.InterruptException:
                raise TimeoutError(f"query ran longer than {QUERY_TIMEOUT_S:g} s") from None
            finally:
                timer.cancel()
            ncols = len(cur.description or ())
            return _rows(raw[:MAX_ROWS]), ncols, len(raw) > MAX_ROWS
        finally:
            con.close()


def _has_order_by(sql: str, dialect: str) -> bool:
    try:
        tree = _parse_one(sql, dialect)
    except Exception:
        return False
    return tree.args.get("order") is not None


def _show(row: tuple[Any, ...]) -> list[Any]:
    return [v if not isinstance(v, str) or len(v) <= 80 else v[:77] + "..." for v in row]


class SqlResultScorer:
    """`sql_result`: the answer returns the reference's rows on the fixture database.

    Order matters only when the reference has a top-level ORDER BY (the
    case's `ordered` overrides). Column names are not compared, values are
    (see `_cell`). A failing score lists up to DIFF_ROWS rows found only in
    the answer and only in the reference, with their counts.
    """

    check = "sql_result"

    def __init__(self, spec: SqlCheck):
        import sqlglot

        assert spec.db and spec.reference
        self.dialect = spec.dialect
        self.engine = "sqlite" if spec.dialect == "sqlite" else "duckdb"
        script = Path(spec.db).read_text(encoding="utf-8")
        self._fixture: _SqliteFixture | _DuckdbFixture = (_SqliteFixture if self.engine == "sqlite" else _DuckdbFixture)(script)
        self._transpile = self.engine == "duckdb" and spec.dialect != "duckdb"
        self._sqlglot = sqlglot
        self.ordered = spec.ordered if spec.ordered is not None else _has_order_by(spec.reference, spec.dialect)
        try:
            self._want, self._want_cols, _ = self._fixture.run(self._for_engine(spec.reference))
        except Exception as exc:
            raise ValueError(f"the reference query fails on {Path(spec.db).name}: {exc}") from None

    def _for_engine(self, sql: str) -> str:
        if not self._transpile:
            return sql
        return ";\n".join(self._sqlglot.transpile(sql, read=self.dialect, write="duckdb"))

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        sql, where = extract_sql(answer.text)
        detail: dict[str, Any] = {"engine": self.engine, "ordered": self.ordered, "found_in": where}
        try:
            got, ncols, capped = self._fixture.run(self._for_engine(sql))
        except TimeoutError as exc:
            return Outcome("fail", None, {**detail, "error": str(exc), "timeout": True})
        except Exception as exc:  # the engine's own error: syntax, unknown column, denied write ...
            return Outcome("fail", None, {**detail, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        detail.update(rows=len(got), reference_rows=len(self._want))
        if capped:
            detail["rows_capped_at"] = MAX_ROWS
        if ncols != self._want_cols:
            return Outcome("fail", False, {**detail, "error": f"{ncols} columns, the reference has {self._want_cols}"})
        if (got == self._want) if self.ordered else (Counter(got) == Counter(self._want)):
            return Outcome("pass", True, detail)
        extra = Counter(got) - Counter(self._want)
        missing = Counter(self._want) - Counter(got)
        if not extra and not missing:
            detail["error"] = "same rows in a different order"
        detail["only_in_answer"] = [_show(r) for r in list(extra.elements())[:DIFF_ROWS]]
        detail["only_in_reference"] = [_show(r) for r in list(missing.elements())[:DIFF_ROWS]]
        detail["only_in_answer_count"] = sum(extra.values())
        detail["only_in_reference_count"] = sum(missing.values())
        return Outcome("fail", False, detail)


# ------------------------------------------------------------ the family


def _sql_names(spec: SqlCheck) -> list[str]:
    return ["sql_parse", "sql_result"] if spec.db and spec.reference else ["sql_parse"]


def _load_sql(spec: SqlCheck, ctx: LoadContext) -> SqlCheck:
    """The dialect must be one sqlglot knows; `db` is resolved against the suite file's folder."""
    import sqlglot

    try:
        sqlglot.Dialect.get_or_raise(spec.dialect)
    except ValueError as exc:
        ctx.problem("dialect", str(exc))
    if spec.db is not None:
        f = ctx.folder / spec.db
        if not f.is_file():
            ctx.problem("db", f"fixture {f} does not exist")
        else:
            spec = spec.model_copy(update={"db": str(f.resolve())})
    return spec


@check_family("sql", spec=SqlCheck, names=("sql_parse", "sql_result"), produces=_sql_names, load=_load_sql)
def sql_family(spec: SqlCheck, case: Case) -> Sequence[Scorer]:
    out: list[Scorer] = [SqlParseScorer(spec)]
    if spec.db and spec.reference:
        try:
            out.append(SqlResultScorer(spec))
        except Exception as exc:  # the fixture or reference is broken; parsing can still be judged
            out.append(BrokenScorer("sql_result", f"cannot set up the sql_result check: {type(exc).__name__}: {exc}"))
    return out
