"""Run stores that reach every branch of the quality decision, for the decision's golden test.

Each is built without an endpoint (`make_store`), so its summary.json and
signoff.md are the same on every machine: the golden files under
`golden_decision/` were written by the code before the decision moved into
one function, and the test holds the code after it to them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from qualitycheck.core._config_file import Config
from qualitycheck.core._records import NoiseFloorRecord
from qualitycheck.core._store import RunStore
from tests.unit.verdict.summary_scenarios import SCENARIOS, SEED_BLOCK
from tests.unit.verdict.verdict_builders import make_store

PASS = {"baseline": "pass", "candidate": "pass"}


def _greedy(prefix: str, n: int, category: str = "qa", route: str | None = None) -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}{i}", "category": category, **({"route": route} if route else {}), "checks": {"exact": dict(PASS)}}
        for i in range(n)
    ]


def _regressed(row: dict[str, Any], control: str | None = None) -> dict[str, Any]:
    """The row's candidate fails where the baseline passes (its text differs); `control` asks the baseline again."""
    row["texts"] = {"baseline": "right", "candidate": "wrong", **({"control": "right"} if control else {})}
    row["checks"]["exact"] = {"baseline": "pass", "candidate": "fail", **({"control": control} if control else {})}
    return row


def tolerated_control(folder: Path) -> tuple[RunStore, Config]:
    """A control on every case: 4 of 40 disagree with the baseline, and 2 stable cases regress (the floor explains them)."""
    rows = _greedy("c", 40)
    for r in rows:
        r["checks"]["exact"]["control"] = "pass"
    for i in (0, 1, 2, 3):  # flaky: the control decides differently
        rows[i]["checks"]["exact"]["control"] = "fail"
        rows[i]["texts"] = {"baseline": "a", "candidate": "b", "control": "c"}
    for i in (10, 11):
        _regressed(rows[i], control="pass")
    store = make_store(folder, rows, targets=("baseline", "candidate", "control"))
    return store, Config(speculative_decoding_guardrails={"max_quality_regression_cases": 0})


def _asked_again(rows: list[dict[str, Any]], asked: list[int], disagree: tuple[int, ...] = ()) -> None:
    """The default floor: the baseline asked again for the `asked` rows only (their candidate diverged)."""
    for i in asked:
        r = rows[i]
        r["targets"] = ("baseline", "candidate", "control")
        r.setdefault("texts", {"baseline": "a", "candidate": "b"})["control"] = r["texts"]["baseline"]
        ex = r["checks"]["exact"]
        ex["control"] = ("fail" if ex["baseline"] == "pass" else "pass") if i in disagree else ex["baseline"]


def thin_floor(folder: Path) -> tuple[RunStore, Config]:
    """The baseline asked again for 4 diverged cases, none disagreeing; one of them regressed."""
    rows = _greedy("t", 20)
    _regressed(rows[5])
    for i in (6, 7, 8):
        rows[i]["texts"] = {"baseline": "same words", "candidate": "other words"}
    _asked_again(rows, [5, 6, 7, 8])
    store = make_store(folder, rows, targets=("baseline", "candidate", "control"))
    store.put_record(NoiseFloorRecord(cases=4, requests=4, of_cases=20))
    return store, Config()


def two_per_route(folder: Path) -> tuple[RunStore, Config]:
    """Two designed regressions on each of two routes; the baseline asked again on 10 cases reproduced itself every time."""
    rows = _greedy("a", 15, route="alpha") + _greedy("b", 15, route="beta")
    for i in (0, 1, 15, 16):
        _regressed(rows[i])
    for i in (2, 3, 4, 17, 18, 19):
        rows[i]["texts"] = {"baseline": "one wording", "candidate": "another wording"}
    asked = [0, 1, 2, 3, 4, 15, 16, 17, 18, 19]
    _asked_again(rows, asked)
    store = make_store(folder, rows, targets=("baseline", "candidate", "control"))
    store.put_record(NoiseFloorRecord(cases=len(asked), requests=len(asked), of_cases=30))
    return store, Config(speculative_decoding_guardrails={"max_quality_regression_cases": 0})


def floor_explains(folder: Path) -> tuple[RunStore, Config]:
    """The baseline asked again on 12 diverged cases, 5 of them disagreeing: one regression is within what that noise explains."""
    rows = _greedy("f", 30)
    _regressed(rows[0])
    for i in range(1, 12):
        rows[i]["texts"] = {"baseline": "w1", "candidate": "w2"}
    _asked_again(rows, list(range(12)), disagree=(1, 2, 3, 4, 5))
    store = make_store(folder, rows, targets=("baseline", "candidate", "control"))
    store.put_record(NoiseFloorRecord(cases=12, requests=12, of_cases=30))
    return store, Config(speculative_decoding_guardrails={"max_quality_regression_cases": 0})


def _sampled_rows(prefix: str, category: str, n: int, samples: int, candidate_passes: Callable[[int], int]) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        b = ["pass"] * samples if i % 4 else ["pass"] * (samples - 1) + ["fail"]
        k = candidate_passes(i)
        c = ["pass"] * k + ["fail"] * (samples - k)
        rows.append(
            {
                "id": f"{prefix}{i}",
                "category": category,
                "params": {"temperature": 0.9},
                "repeats": samples,
                "texts": {"baseline": [f"b{j}" for j in range(samples)], "candidate": [f"c{j}" for j in range(samples)]},
                "checks": {"json_parse": {"baseline": b, "candidate": c}},
            }
        )
    return rows


def sampled(folder: Path) -> tuple[RunStore, Config]:
    """Three sampled categories: one whose candidate broke, one unchanged, one too small to tell; beside greedy cases."""
    rows = _sampled_rows("d", "broken", 12, 4, lambda i: 1)
    rows += _sampled_rows("s", "steady", 12, 4, lambda i: 4 if i % 4 else 3)
    rows += _sampled_rows("u", "unsure", 3, 4, lambda i: 3)
    rows += _greedy("g", 6, category="greedy")
    store = make_store(folder, rows)
    return store, Config(speculative_decoding_guardrails=SEED_BLOCK)


def routes(folder: Path) -> tuple[RunStore, Config]:
    """Per-route overrides: one regression on a route that allows one, one on a route that allows none, and a margin."""
    rows = _greedy("x", 10, route="lenient") + _greedy("y", 10, route="strict") + _greedy("z", 10, category="wide", route="wide")
    _regressed(rows[0])
    _regressed(rows[10])
    cfg = Config(
        speculative_decoding_guardrails={"max_quality_regression_cases": 0, "max_error_rate": "5%"},
        routes={"lenient": {"max_quality_regression_cases": 1}},
        non_inferiority_margin={"exact": 0.3},
    )
    return make_store(folder, rows), cfg


def no_floor(folder: Path) -> tuple[RunStore, Config]:
    """No floor measured at all (--no-noise-floor): every flip counts."""
    rows = _greedy("n", 12)
    _regressed(rows[3])
    return make_store(folder, rows), Config(speculative_decoding_guardrails={"max_quality_regression_cases": 1})


DECISION_SCENARIOS: dict[str, Callable[[Path], tuple[RunStore, Config]]] = {
    **SCENARIOS,
    "tolerated_control": tolerated_control,
    "thin_floor": thin_floor,
    "two_per_route": two_per_route,
    "floor_explains": floor_explains,
    "sampled": sampled,
    "routes": routes,
    "no_floor": no_floor,
}
