"""The store's streaming reads: every post-run stage walks a run one case at a time through them."""

from __future__ import annotations

from qualitycheck.core._records import Response
from tests.unit.verdict.verdict_builders import make_store


def test_by_case_joins_cases_responses_and_scores_by_id(tmp_path):
    rows = [  # suite order deliberately not id order
        {"id": "m", "category": "qa", "checks": {"exact": {"baseline": "pass", "candidate": "fail"}}},
        {"id": "b", "category": "sql", "route": "payments"},
        {"id": "z", "category": "qa", "checks": {"exact": {"baseline": "fail"}}},
    ]
    with make_store(tmp_path, rows) as store:
        store.put_response(Response(case_id="a-stray", target="baseline", fingerprint="f", text="no such case"))
        store._db.execute("DELETE FROM responses WHERE case_id='b'")  # a case nobody answered
        got = list(store.by_case())
        assert [g.case.id for g in got] == ["b", "m", "z"]
        by = {g.case.id: g for g in got}
        assert by["b"].responses == [] and by["b"].scores == []
        assert [(r.target, r.case_id) for r in by["m"].responses] == [("baseline", "m"), ("candidate", "m")]
        assert [(s.target, s.status) for s in by["m"].scores] == [("baseline", "pass"), ("candidate", "fail")]
        assert [s.target for s in by["z"].scores] == ["baseline"]
        assert all(g.scores == [] for g in store.by_case(scores=False))
        assert [c.id for c in store.iter_cases()] == ["m", "b", "z"]
        assert store.case_count() == 3
        assert store.case_labels() == {"m": ("qa", "qa"), "b": ("sql", "payments"), "z": ("qa", "qa")}


def test_comparison_rows_replace_as_a_whole(tmp_path):
    with make_store(tmp_path, [{"id": "a", "category": "qa"}]) as store:
        store.put_artifact("comparisons", [{"case_id": "old"}])
        assert store.replace_comparisons([("b", 0, '{"x":2}'), ("a", 1, '{"x":1}')]) == 2
        assert list(store.comparison_bodies()) == ['{"x":1}', '{"x":2}']
        store.replace_comparisons([("b", 1, '{"r":1}'), ("a", 0, '{"r":0}'), ("b", 0, '{"r":0}')])
        assert list(store.comparisons_by_case()) == [("a", ['{"r":0}']), ("b", ['{"r":0}', '{"r":1}'])]
        store.replace_comparisons([("c", 0, "{}")])
        assert list(store.comparison_bodies()) == ["{}"]
        assert store.artifact("comparisons") is None


def test_walking_the_cases_never_holds_back_a_commit(tmp_path):
    """Generation walks the stored cases while its writer commits responses on the same
    connection: each response must be durable (visible to another connection) at once."""
    import sqlite3

    from qualitycheck.core._store import StoredCases

    rows = [{"id": f"c{i}", "category": "qa"} for i in range(7)]
    with make_store(tmp_path, rows) as store:
        store._db.execute("DELETE FROM responses")
        other = sqlite3.connect(tmp_path / "run.sqlite")
        seen = []
        for case in store.iter_cases():
            store.put_response(Response(case_id=case.id, target="baseline", fingerprint="f", text="x"))
            seen.append(case.id)
            (n,) = other.execute("SELECT COUNT(*) FROM responses").fetchone()
            assert n == len(seen), "a response was not committed while the cases were being read"
        other.close()
        assert seen == [f"c{i}" for i in range(7)]
        cases = StoredCases(store)
        assert len(cases) == 7 and [c.id for c in cases] == seen and [c.id for c in cases] == seen  # re-iterable


def test_walking_the_cases_during_generation_lets_the_write_ahead_log_restart(tmp_path):
    """An open read would pin the WAL: every response of the run would stay in run.sqlite-wal."""
    from qualitycheck.core._cases import Case
    from qualitycheck.core._store import RunStore, StoredCases

    cases = [Case(id=f"c{i}", category="qa", prompt="p") for i in range(1500)]
    store = RunStore.create(tmp_path, {"repeats": 1}, cases)
    try:
        for case in StoredCases(store):
            for target in ("baseline", "candidate"):
                store.put_response(Response(case_id=case.id, target=target, fingerprint="f", text="y" * 3000))
        written = 1500 * 2 * 3000
        assert (tmp_path / "run.sqlite-wal").stat().st_size < written / 2
    finally:
        store.close()


def test_resume_looks_up_what_is_stored_a_case_at_a_time(tmp_path):
    """Resume used to hold (case, target, repeat) → (fingerprint, ok) for every stored response."""
    import tracemalloc

    from qualitycheck.core._cases import Case
    from qualitycheck.core._config import RunOptions, Target
    from qualitycheck.core._store import RunStore, StoredCases
    from qualitycheck.generation._runner import work_items

    targets = {"baseline": Target(url="http://b", model="m"), "candidate": Target(url="http://c", model="m")}
    n = 6000
    store = RunStore.create(tmp_path, {"repeats": 1}, (Case(id=f"case-{i:05d}", category="qa", prompt="p") for i in range(n)))
    try:
        with store._db:
            store._db.execute("BEGIN")
            for i in range(n):
                for t in ("baseline", "candidate"):
                    if (i, t) != (7, "candidate"):
                        ok = i != 9
                        store.put_response(
                            Response(
                                case_id=f"case-{i:05d}",
                                target=t,
                                fingerprint="stale-" + "f" * 58,
                                error=None if ok else {"kind": "timeout", "message": "t"},
                            )
                        )

        def walk() -> tuple[list[tuple[str, list[str]]], int]:
            done = store.stored_outcomes()
            tracemalloc.start()
            try:
                items = [
                    (c.id, need)
                    for c, _, need in work_items(StoredCases(store), targets, RunOptions(), done)
                    if c.id in ("case-00007", "case-00009")
                ]
                return items, tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
                done.close()

        items, resume_peak = walk()
        # every stored request is "stale" (its fingerprint differs), so every case is re-asked; 7 and 9 are checked exactly
        assert items == [("case-00007", ["baseline", "candidate"]), ("case-00009", ["baseline", "candidate"])]
        done = store.stored_outcomes()
        assert done and done.get(("case-00007", "candidate", 0)) is None and done.get(("case-00009", "baseline", 0))[1] is False
        done.close()
        assert resume_peak < 1_500_000, f"resume held {resume_peak} bytes for {2 * n} stored responses"
    finally:
        store.close()
