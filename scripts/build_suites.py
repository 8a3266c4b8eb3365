"""Build suites/ from the public data in ../shared/data plus business cases written here.

Run from anywhere: `python scripts/build_suites.py [--data DIR] [--out DIR]`.
The output is deterministic (seeded, sorted), so re-running on the same data
gives byte-identical files and a diff shows exactly what a change to this
script did to the suites. `--check` rebuilds into a temporary folder and exits
1 when the committed suites differ from what the script produces.

Public data is copied, never rewritten: MBPP tasks and tests verbatim, Spider
questions and gold queries verbatim (with fixture databases generated from
their schemas so the gold query returns rows), Spec-Bench prompts and
references verbatim. Everything else is written as a business would: orders,
invoices, support tickets, config files, policies.
"""

from __future__ import annotations

import argparse
import ast
import filecmp
import json
import random
import re
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data"

Case = dict[str, Any]

SPEC_BENCH = "Spec-Bench (hemingkx/Spec-Bench, data/spec_bench/question.jsonl, Apache-2.0)"
MBPP = "MBPP sanitized (google-research/google-research, mbpp/sanitized-mbpp.json, CC BY 4.0)"
SPIDER = "Spider dev (taoyds/spider, evaluation_examples/examples/dev.json + tables.json, CC BY-SA 4.0)"
AUTHORED = "qualitycheck authors (business case written for this suite)"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def case(cid: str, category: str, messages: list[dict[str, Any]], *, max_tokens: int, checks: dict[str, Any],
         source: str, demo: bool = False, tags: dict[str, str] | None = None,
         params: dict[str, Any] | None = None) -> Case:
    """One case in Contract 1 form; greedy decoding so baseline and candidate are comparable."""
    p = {"temperature": 0, "max_tokens": max_tokens}
    p.update(params or {})
    t = dict(tags or {})
    if demo:
        t["demo"] = "yes"
    out: Case = {"id": cid, "category": category, "messages": messages, "params": p, "checks": checks}
    if t:
        out["tags"] = t
    out["source"] = source
    return out


def user(text: str, system: str | None = None) -> list[dict[str, Any]]:
    msgs = [{"role": "system", "content": system}] if system else []
    return msgs + [{"role": "user", "content": text}]


# ------------------------------------------------------------------ qa

# (Spec-Bench question id, accepted answers). The questions are Natural
# Questions items shipped by Spec-Bench without answers; the answers here were
# written for this suite and kept to facts that do not change over time.
_NQ_ANSWERS: list[tuple[int, list[str]]] = [
    (321, ["Elizabeth Lail"]),
    (322, ["England"]),
    (324, ["hornbill"]),
    (325, ["1967"]),
    (328, ["Italy"]),
    (329, ["counterclockwise", "counter-clockwise", "anticlockwise", "anti-clockwise", "west to east"]),
    (338, ["Deathly Hallows"]),
    (340, ["Barry Humphries"]),
    (342, ["2005"]),
    (346, ["Bernstein", "Sondheim"]),
    (349, ["Timberline", "Oregon"]),
    (356, ["Ringo"]),
    (362, ["acetate"]),
    (366, ["nucleus"]),
    (373, ["spore"]),
    (376, ["180", "antimeridian", "date line"]),
    (386, ["Spanish moss"]),
    (388, ["thylakoid"]),
    (389, ["20", "twenty"]),
    (396, ["1917"]),
]

# Business-flavoured short facts a support or ops assistant is asked daily.
_QA_AUTHORED: list[tuple[str, str, dict[str, Any], bool]] = [
    ("capital-france", "What is the capital of France? Answer in one word.", {"contains": {"any": ["Paris"]}}, True),
    ("http-404", "Which HTTP status code means 'Not Found'? Answer with the number only.",
     {"exact": {"expected": "404", "strip_trailing_punctuation": True}, "contains": {"any": ["404"]}}, True),
    ("https-port", "What is the default TCP port for HTTPS? Answer with the number only.",
     {"exact": {"expected": "443", "strip_trailing_punctuation": True}}, False),
    ("yen-code", "What is the ISO 4217 currency code of the Japanese yen? Answer with the code only.",
     {"exact": {"expected": "JPY", "ignore_case": True, "strip_trailing_punctuation": True}}, False),
    ("vat-acronym", "In invoicing, what does the abbreviation VAT stand for?",
     {"contains": {"all": ["value", "added", "tax"]}}, True),
    ("leap-days", "How many days does a leap year have? Answer with the number only.",
     {"contains": {"any": ["366"]}}, True),
    ("gold-symbol", "What is the chemical symbol for gold?", {"regex": {"pattern": r"\bAu\b"}}, False),
    ("capital-australia", "What is the capital city of Australia?", {"contains": {"any": ["Canberra"]}}, False),
    ("dozen-times", "A customer orders 3 dozen mugs. How many mugs is that? Answer with the number only.",
     {"contains": {"any": ["36"]}}, False),
    ("euro-countries-currency", "Which currency is used in Germany, France and Italy?", {"contains": {"any": ["euro"]}}, False),
]


def build_qa(data: Path) -> list[Case]:
    questions = {q["question_id"]: q for q in _read_jsonl(data / "specbench" / "question.jsonl")}
    sys_prompt = "Answer the question briefly and factually."
    out = []
    for qid, answers in _NQ_ANSWERS:
        q = questions[qid]
        assert q["category"] == "qa", qid
        out.append(case(f"qa-nq-{qid}", "qa", user(q["turns"][0], sys_prompt), max_tokens=64,
                        checks={"contains": {"any": answers}}, source=f"{SPEC_BENCH}, question {qid} (Natural Questions); answer list by qualitycheck authors",
                        tags={"origin": "specbench"}))
    for slug, text, checks, demo in _QA_AUTHORED:
        out.append(case(f"qa-{slug}", "qa", user(text, sys_prompt), max_tokens=32, checks=checks,
                        source=AUTHORED, demo=demo, tags={"origin": "authored"}))
    return out


# ------------------------------------------------------------------ code (MBPP)

_MBPP_PICKS = 30


def _entry_point(code: str, tests: list[str]) -> str:
    names = [n.name for n in ast.walk(ast.parse(code)) if isinstance(n, ast.FunctionDef)]
    called = " ".join(tests)
    for name in names:
        if re.search(rf"\b{re.escape(name)}\(", called):
            return name
    return names[0]


def build_code(data: Path) -> tuple[list[Case], dict[str, str]]:
    """MBPP tasks, prompted the MBPP way (task text plus one of its asserts).

    Picks every k-th task for spread, plus the three shortest solutions as demo
    cases a very small model can attempt. Returns the cases and the reference
    solutions (by case id) for the suite's own self-test.
    """
    tasks = sorted(_read_jsonl(data / "mbpp" / "sanitized-mbpp.jsonl"), key=lambda t: t["task_id"])
    by_len = sorted(tasks, key=lambda t: (len(t["code"]), t["task_id"]))
    demo_ids = {t["task_id"] for t in by_len[:3]}
    step = len(tasks) // (_MBPP_PICKS - len(demo_ids))
    picked = {t["task_id"] for t in tasks[::step][: _MBPP_PICKS - len(demo_ids)]} | demo_ids
    system = "You are a careful Python programmer. Reply with one ```python code block holding the complete solution."
    cases, refs = [], {}
    for t in tasks:
        if t["task_id"] not in picked:
            continue
        tests = t["test_list"]
        entry = _entry_point(t["code"], tests)
        cid = f"code-mbpp-{t['task_id']:03d}"
        prompt = f"{t['prompt']}\nThe function must be named `{entry}`. Your code should pass this test:\n{tests[0]}"
        checks = {"unit_tests": {"language": "python", "tests": "\n".join(tests), "entry_point": entry,
                                 "setup": "\n".join(t["test_imports"]), "timeout_s": 10.0}}
        demo = t["task_id"] in demo_ids
        cases.append(case(cid, "code", user(prompt, system), max_tokens=64 if demo else 384, checks=checks,
                          source=f"{MBPP}, task_id {t['task_id']}", demo=demo, tags={"origin": "mbpp"}))
        refs[cid] = t["code"]
    return cases, refs


# ------------------------------------------------------------------ sql (Spider + fixtures)

_FIRST = ["Anna", "Ben", "Carla", "David", "Elena", "Felix", "Grace", "Hugo", "Ines", "Jonas", "Karin", "Liam",
          "Maya", "Noah", "Olga", "Pedro", "Rosa", "Sam", "Tara", "Victor"]
_LAST = ["Smith", "Garcia", "Muller", "Rossi", "Dubois", "Novak", "Jensen", "Silva", "Kowalski", "Brown",
         "Tanaka", "Larsen", "Moreau", "Costa", "Weber", "Olsen", "Ivanova", "Fischer", "Keller", "Lopez"]
_COUNTRIES = ["United States", "France", "Netherlands", "Germany", "Japan", "Brazil", "Canada", "Italy", "Spain", "Australia"]
_CITIES = ["Boston", "Denver", "Austin", "Seattle", "Chicago", "Portland", "Miami", "Atlanta", "Phoenix", "Dallas"]
_WORDS = ["North", "Harbor", "Cedar", "Summit", "River", "Maple", "Granite", "Lake", "Sunset", "Pine", "Oak", "Bay"]
_CONTINENTS = ["Africa", "Asia", "Europe", "North America", "Oceania", "South America"]
_LANGUAGES = ["English", "French", "Spanish", "German", "Dutch", "Japanese", "Portuguese", "Italian"]
_CAR_MAKERS = ["ford", "volvo", "toyota", "fiat", "renault", "honda", "bmw", "saab"]
_PERSON_TABLES = {"singer", "teacher", "employee", "people", "conductor", "visitor", "highschooler", "players",
                  "student", "students", "owners", "professionals", "contestants"}


class _Gen:
    """Plausible values for one Spider column, from its name, type and the query literals."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def number(self, table: str, col: str, i: int) -> int | float:
        r, c = self.rng, col.lower()
        t = table.lower()
        if "pet_age" in c or (c == "age" and t in ("dogs", "pets")):
            return r.randint(1, 14)
        if c.endswith("age") or c == "age":
            return r.randint(19, 64)
        if "year" in c or c in ("indepyear",):
            return r.randint(1950, 2022)
        if "population" in c:
            return r.randint(5_000, 9_000_000)
        if any(k in c for k in ("price", "amount", "cost", "earnings", "spent", "bonus", "worth", "gnp", "sales", "points", "surface")):
            return round(r.uniform(10, 90_000), 2)
        if "capacity" in c or "attendance" in c:
            return r.randint(1_000, 80_000)
        if any(k in c for k in ("rank", "position", "finish", "seed")):
            return r.randint(1, 60)
        if any(k in c for k in ("weight", "percentage", "share", "rating", "accelerate", "expectancy", "edispl", "height", "ht")):
            return round(r.uniform(1, 99), 1)
        if "cylinders" in c:
            return r.choice([4, 6, 8])
        if "grade" in c:
            return r.randint(9, 12)
        return r.randint(1, 99)

    def text(self, table: str, col: str, i: int) -> str:
        r, c, t = self.rng, col.lower(), table.lower()
        if "first" in c or c == "fname":
            return r.choice(_FIRST)
        if "last" in c or c == "lname" or c == "middle_name":
            return r.choice(_LAST)
        if "email" in c:
            return f"{r.choice(_FIRST).lower()}.{r.choice(_LAST).lower()}@example.com"
        if "phone" in c or "mobile" in c or "cell" in c:
            return f"+1-555-{r.randint(100, 999)}-{r.randint(1000, 9999)}"
        if any(k in c for k in ("date", "created", "time", "staring")) or c in ("start_from",):
            return f"{r.randint(1995, 2022)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
        if any(k in c for k in ("country", "nationality", "citizenship")) and "code" not in c and "abbrev" not in c:
            return r.choice(_COUNTRIES)
        if c == "continent":
            return r.choice(_CONTINENTS)
        if c == "language":
            return r.choice(_LANGUAGES)
        if c in ("maker", "make", "model") or (t == "car_makers" and c == "fullname"):
            return r.choice(_CAR_MAKERS) + ("" if c == "maker" else f" {r.choice(_WORDS).lower()}")
        if (t in ("country", "countries") and c in ("name", "countryname", "localname")):
            return r.choice(_COUNTRIES + ["Kenya", "Chile", "Norway", "India", "Egypt", "Poland"])
        if any(k in c for k in ("city", "hometown", "location", "district")):
            return r.choice(_CITIES)
        if c in ("sex", "gender", "hand", "loser_hand", "winner_hand"):
            return r.choice(["M", "F"] if c in ("sex", "gender") else ["R", "L"])
        if c.startswith(("is_", "if_")) or c.endswith("_yn") or c == "isofficial":
            return r.choice(["T", "F"])
        if "year" in c or c in ("age",):
            return str(r.randint(1990, 2022) if "year" in c else r.randint(1, 14) if t in ("dogs", "pets") else r.randint(19, 64))
        if "code" in c or "abbrev" in c or c.endswith("ioc"):
            return f"{chr(65 + i % 26)}{chr(65 + (i * 7) % 26)}{chr(65 + (i * 3) % 26)}"
        if "name" in c or c in ("title", "model", "make", "maker", "fullname", "airline", "orchestra", "course", "series_name", "song_name", "continent", "language"):
            if t in _PERSON_TABLES or c.endswith(("commander", "directed_by", "written_by", "manager_name", "loser_name", "winner_name")):
                return f"{r.choice(_FIRST)} {r.choice(_LAST)}"
            return f"{r.choice(_WORDS)} {table.replace('_', ' ').title()} {i + 1}"
        if any(k in c for k in ("description", "details", "text", "note", "content")):
            return f"{r.choice(_WORDS)} {col.replace('_', ' ')} {i + 1}"
        return f"{col}_{i + 1}"


def _literals_by_column(queries: list[str]) -> dict[str, list[Any]]:
    """Values the gold queries compare columns with, so fixtures can contain them."""
    import sqlglot
    from sqlglot import exp

    found: dict[str, list[Any]] = {}

    def add(col: exp.Column, lit: exp.Literal, like: bool = False) -> None:
        v: Any = lit.this
        if like:
            v = v.strip("%") or "x"
        elif not lit.is_string:
            v = float(v) if "." in v else int(v)
        found.setdefault(col.name.lower(), [])
        if v not in found[col.name.lower()]:
            found[col.name.lower()].append(v)

    for q in queries:
        tree = sqlglot.parse_one(q, read="sqlite")
        for node in tree.find_all(exp.EQ, exp.NEQ, exp.Like, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In):
            if isinstance(node, exp.In):
                if isinstance(node.this, exp.Column):
                    for e in node.expressions:
                        if isinstance(e, exp.Literal):
                            add(node.this, e)
                continue
            a, b = node.left, node.right
            if isinstance(b, exp.Column) and isinstance(a, exp.Literal):
                a, b = b, a
            if isinstance(a, exp.Column) and isinstance(b, exp.Literal) and isinstance(node, (exp.EQ, exp.NEQ, exp.Like)):
                add(a, b, like=isinstance(node, exp.Like))
    return found


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_value(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, (int, float)):
        return repr(v)
    return "'" + str(v).replace("'", "''") + "'"


def build_fixture(db: dict[str, Any], queries: list[str], rows_per_table: int = 12) -> tuple[str, str]:
    """(DDL, full fixture SQL) for one Spider database, seeded by its name."""
    rng = random.Random(db["db_id"])
    gen = _Gen(rng)
    literals = _literals_by_column(queries)
    tables = db["table_names_original"]
    cols = [(t, name, ty) for (t, name), ty in zip(db["column_names_original"], db["column_types"]) if t >= 0]
    pks = set(db["primary_keys"]) if db["primary_keys"] else set()
    pk_flat = {p for p in pks} if all(isinstance(p, int) for p in pks) else {x for p in pks for x in (p if isinstance(p, list) else [p])}
    fk = {child: parent for child, parent in db["foreign_keys"]}
    col_index = {i + 1: c for i, c in enumerate(cols)}  # Spider column ids count '*' as 0
    skip = {"sqlite_sequence"}

    # parents first, so child keys can be drawn from generated parent values
    order: list[int] = []
    deps = {ti: {col_index[p][0] for c, p in fk.items() if col_index[c][0] == ti and col_index[p][0] != ti} for ti in range(len(tables))}
    while len(order) < len(tables):
        ready = [ti for ti in range(len(tables)) if ti not in order and deps[ti] <= set(order)]
        if not ready:  # a cycle: break it at the lowest table index
            ready = [min(ti for ti in range(len(tables)) if ti not in order)]
        order.extend(ready)

    values: dict[int, list[Any]] = {}
    ddl_parts, insert_parts = [], []
    for ti in order:
        tname = tables[ti]
        if tname in skip:
            continue
        tcols = [(ci, name, ty) for ci, (t, name, ty) in col_index.items() if t == ti]
        n = rows_per_table
        data: dict[int, list[Any]] = {}
        for ci, name, ty in tcols:
            lits = literals.get(name.lower(), [])
            if ci in fk and fk[ci] in values:
                parent = values[fk[ci]]
                col = [parent[i % len(parent)] if i < len(parent) else rng.choice(parent) for i in range(n)]
                rng.shuffle(col)
                if ci in pk_flat:
                    col = parent[:n] + [rng.choice(parent) for _ in range(n - len(parent))]
            elif ci in pk_flat and ty == "number":
                col = list(range(1, n + 1))
            elif ci in pk_flat:
                col = list(dict.fromkeys([str(v) for v in lits] + [gen.text(tname, name, i) for i in range(n * 3)]))[:n]
                while len(col) < n:
                    col.append(f"{name}_{len(col) + 1}")
            else:
                col = [gen.number(tname, name, i) if ty == "number" else gen.text(tname, name, i) for i in range(n)]
                # every literal the gold queries compare with appears in some rows
                for k, lit in enumerate(lits[: n // 2]):
                    for j in (k, k + n // 2):
                        if isinstance(lit, str) and not isinstance(col[j], str):
                            col[j] = lit if not lit.lstrip("-").replace(".", "", 1).isdigit() else (float(lit) if "." in lit else int(lit))
                        else:
                            col[j] = lit
                if lits and len(lits) > n // 2:
                    for j in range(n):
                        if rng.random() < 0.3:
                            col[j] = rng.choice(lits)
            data[ci] = col
            values[ci] = col
        def coltype(ty: str, col: list[Any]) -> str:
            if ty == "number":
                return "REAL" if any(isinstance(v, float) for v in col) else "INTEGER"
            return "TEXT"
        defs = []
        table_pks = [name for ci, name, _ in tcols if ci in pk_flat]
        for ci, name, ty in tcols:
            d = f"  {_ident(name)} {coltype(ty, data[ci])}"
            if ci in fk:
                pt, pname, _ = col_index[fk[ci]]
                d += f" REFERENCES {_ident(tables[pt])}({_ident(pname)})"
            defs.append(d)
        if table_pks:
            defs.append(f"  PRIMARY KEY ({', '.join(_ident(p) for p in table_pks)})")
        ddl_parts.append(f"CREATE TABLE {_ident(tname)} (\n" + ",\n".join(defs) + "\n);")
        seen_keys: set[tuple[Any, ...]] = set()
        rows = []
        for i in range(n):
            row = [data[ci][i] for ci, _, _ in tcols]
            key = tuple(data[ci][i] for ci, _, _ in tcols if ci in pk_flat)
            if table_pks and key in seen_keys:
                continue
            seen_keys.add(key)
            rows.append(row)
        insert_parts.append("\n".join(f"INSERT INTO {_ident(tname)} VALUES ({', '.join(_sql_value(v) for v in row)});" for row in rows))
    # keep the DDL in the schema's own table order for the prompt
    by_name = {re.match(r'CREATE TABLE "([^"]+)"', d).group(1): d for d in ddl_parts}
    ddl = "\n\n".join(by_name[t] for t in tables if t in by_name)
    body = f"-- Fixture for Spider database {db['db_id']}: schema from Spider tables.json, rows generated by scripts/build_suites.py\n"
    return ddl, body + ddl + "\n\n" + "\n\n".join(insert_parts) + "\n"


def _run_sql(fixture_sql: str, query: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(":memory:")
    try:
        con.executescript(fixture_sql)
        return con.execute(query).fetchall()
    finally:
        con.close()


_SQL_PICKS = 32
_SQL_DEMO = {0, 5, 10}  # concert_singer: count, aggregates, group by — short schema, short answers


def build_sql(data: Path, out: Path) -> list[Case]:
    dbs = {d["db_id"]: d for d in json.loads((data / "spider" / "spider_dev_tables.json").read_text(encoding="utf-8"))}
    questions = _read_jsonl(data / "spider" / "spider_dev_sample.jsonl")
    fixtures_dir = out / "fixtures" / "sql"
    fixtures_dir.mkdir(parents=True, exist_ok=True)
    ddl_of, sql_of = {}, {}
    for db_id in sorted(dbs):
        ddl_of[db_id], sql_of[db_id] = build_fixture(dbs[db_id], [q["query"] for q in questions if q["db_id"] == db_id])
        (fixtures_dir / f"{db_id}.sql").write_text(sql_of[db_id], encoding="utf-8")

    usable = []
    for q in questions:
        rows = _run_sql(sql_of[q["db_id"]], q["query"])
        meaningful = [r for r in rows if any(v not in (None, 0, 0.0) for v in r)]
        if meaningful:
            usable.append(q)
    # spread the picks over databases and hardness levels, demo questions first
    picks = [q for q in usable if q["dev_index"] in _SQL_DEMO]
    per_db: dict[str, list[dict[str, Any]]] = {}
    for q in usable:
        if q["dev_index"] not in _SQL_DEMO:
            per_db.setdefault(q["db_id"], []).append(q)
    levels = ["medium", "hard", "easy", "extra"]
    for k, db_id in enumerate(sorted(per_db)):  # each database leads with another hardness level
        rank = {h: (i - k) % len(levels) for i, h in enumerate(levels)}
        per_db[db_id].sort(key=lambda q: (rank[q["hardness"]], q["dev_index"]))
    while len(picks) < _SQL_PICKS and any(per_db.values()):
        for db_id in sorted(per_db):
            if per_db[db_id] and len(picks) < _SQL_PICKS:
                picks.append(per_db[db_id].pop(0))
    system = "You translate questions into SQL for SQLite. Reply with a single SQL query and nothing else."
    out_cases = []
    for q in sorted(picks, key=lambda q: q["dev_index"]):
        demo = q["dev_index"] in _SQL_DEMO
        prompt = f"Database schema:\n{ddl_of[q['db_id']]}\n\nQuestion: {q['question']}"
        out_cases.append(case(
            f"sql-spider-{q['dev_index']:04d}", "sql", user(prompt, system), max_tokens=64 if demo else 200,
            checks={"sql": {"dialect": "sqlite", "db": f"fixtures/sql/{q['db_id']}.sql", "reference": q["query"]}},
            source=f"{SPIDER}, dev example {q['dev_index']} ({q['db_id']}); fixture rows generated",
            demo=demo, tags={"origin": "spider", "db": q["db_id"], "hardness": q["hardness"]}))
    return out_cases


# ------------------------------------------------------------------ writing


def write_suite(out: Path, category: str, cases: list[Case]) -> None:
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), f"duplicate ids in {category}"
    lines = [json.dumps(c, ensure_ascii=False, sort_keys=False) for c in cases]
    (out / f"{category}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def build(data: Path, out: Path) -> dict[str, int]:
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    code_cases, code_refs = build_code(data)
    (out / "fixtures").mkdir(exist_ok=True)
    (out / "fixtures" / "mbpp_reference.json").write_text(json.dumps(code_refs, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    suites = {
        "qa": build_qa(data),
        "code": code_cases,
        "sql": build_sql(data, out),
    }
    for category, cases in suites.items():
        write_suite(out, category, cases)
        counts[category] = len(cases)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"public data folder (default {DEFAULT_DATA})")
    ap.add_argument("--out", type=Path, default=ROOT / "suites", help="suite folder to write (default suites/)")
    ap.add_argument("--check", action="store_true", help="exit 1 if --out differs from a fresh build")
    a = ap.parse_args(argv)
    if not (a.data / "mbpp" / "sanitized-mbpp.jsonl").is_file():
        print(f"error: {a.data} does not hold the public data (mbpp/, spider/, specbench/)", file=sys.stderr)
        return 2
    if a.check:
        with tempfile.TemporaryDirectory() as tmp:
            build(a.data, Path(tmp))
            cmp = filecmp.dircmp(tmp, a.out)
            diffs = _diff_tree(cmp)
        for d in diffs:
            print(f"differs: {d}")
        return 1 if diffs else 0
    counts = build(a.data, a.out)
    for k, v in counts.items():
        print(f"{k:24s} {v:4d} cases")
    return 0


def _diff_tree(cmp: filecmp.dircmp) -> list[str]:
    generated = [f for f in cmp.left_only]
    out = [f"{cmp.right}/{f} (missing)" for f in generated]
    out += [f"{cmp.right}/{f}" for f in cmp.diff_files]
    for sub in cmp.subdirs.values():
        out += _diff_tree(sub)
    return out


if __name__ == "__main__":
    sys.exit(main())
