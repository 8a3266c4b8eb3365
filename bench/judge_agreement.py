"""The judge machinery's agreement with a known ranking, with scripted judges: one `name: value unit` line each.

    python bench/judge_agreement.py [--pairs N] [--seed S]

No judge model runs here. Each pair's two answers carry a hidden quality
grade (0-9), so the true verdict of every pair is known (the candidate wins,
loses, or ties on equal grades). Scripted judges on the in-process test
server stand in for models with known failure modes, and the real judge
stage (`qualitycheck.judge.score_judge`: both orders, the position rule,
parsing, cache) turns their answers into verdicts:

- `faithful`: always picks the higher grade (the machinery's ceiling);
- `noisy-20%`: picks at random in 20% of calls;
- `first-position`: picks the reply shown first when grades are within 2;
- `lenient-tie`: calls a tie whenever grades are within 2.

Figures per judge: agreement with the known ranking (share of pairs, and
Cohen's kappa), the share of pairs it decided by position (both orders
chose the same position: read as ties by the stage), and the share of its
decisive verdicts that chose the first position (0.5 is unbiased), as
summary.json's `judge_position_bias` reports it.
"""

from __future__ import annotations

import argparse
import random
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qualitycheck.core._cases import Case
from qualitycheck.core._config import JudgeTarget, RunOptions
from qualitycheck.core._records import Response
from qualitycheck.core._store import RunStore
from qualitycheck.judge import JudgeOptions, score_judge
from qualitycheck.testserver import TestServer
from qualitycheck.verdict._human import cohen_kappa
from qualitycheck.verdict._judge_figures import JudgeTally

_REPLY = re.compile(r"<<<reply (A|B) (\w+)>>>\n(.*?)\n<<<end of reply \1 \2>>>", re.S)
_GRADE = re.compile(r"grade (\d)")


def _grades(body: dict[str, Any]) -> tuple[int, int]:
    text = "\n".join(m["content"] for m in body["messages"])
    replies = {m.group(1): m.group(3) for m in _REPLY.finditer(text)}
    return tuple(int(_GRADE.search(replies[k]).group(1)) for k in ("A", "B"))  # type: ignore[union-attr,return-value]


def _judges(seed: int) -> dict[str, Callable[[dict[str, Any]], str]]:
    rng = random.Random(seed)

    def faithful(body: dict[str, Any]) -> str:
        a, b = _grades(body)
        return "[[A]]" if a > b else "[[B]]" if b > a else "[[TIE]]"

    def noisy(body: dict[str, Any]) -> str:
        return rng.choice(["[[A]]", "[[B]]", "[[TIE]]"]) if rng.random() < 0.2 else faithful(body)

    def first_position(body: dict[str, Any]) -> str:
        a, b = _grades(body)
        return "[[A]]" if abs(a - b) <= 2 else faithful(body)

    def lenient(body: dict[str, Any]) -> str:
        a, b = _grades(body)
        return "[[TIE]]" if abs(a - b) <= 2 else faithful(body)

    return {"faithful": faithful, "noisy-20%": noisy, "first-position": first_position, "lenient-tie": lenient}


def _store(folder: Path, pairs: list[tuple[int, int]]) -> RunStore:
    cases = [
        Case(id=f"c{i}", category="bench", messages=[{"role": "user", "content": f"Explain topic {i}."}], checks={"judge": "pairwise"})
        for i in range(len(pairs))
    ]
    store = RunStore.create(folder, {"targets": {}, "repeats": 1, "suite_fingerprint": "bench"}, cases)
    for i, (gb, gc) in enumerate(pairs):
        store.put_response(Response(case_id=f"c{i}", target="baseline", fingerprint="f", text=f"Answer to {i}, grade {gb}, version b."))
        store.put_response(Response(case_id=f"c{i}", target="candidate", fingerprint="f", text=f"Answer to {i}, grade {gc}, version c."))
    return store


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=200)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    rng = random.Random(a.seed)
    pairs = [(rng.randrange(10), rng.randrange(10)) for _ in range(a.pairs)]
    truth = ["win" if c > b else "loss" if c < b else "tie" for b, c in pairs]
    print(f"judge_bench_pairs: {a.pairs} pairs")
    for name, judge in _judges(a.seed).items():
        with tempfile.TemporaryDirectory() as tmp, TestServer(default=judge) as srv:
            store = _store(Path(tmp) / "run", pairs)
            score_judge(store, JudgeTarget(url=srv.url, model="scripted"), JudgeOptions.of_run(RunOptions(retries=0, judge_retries=0)))
            verdicts = {s.case_id: s for s in store.scores() if s.target == "candidate"}
            tally = JudgeTally()
            for s in verdicts.values():
                tally.add_score(s, "bench")
            got = [str(verdicts[f"c{i}"].value) for i in range(a.pairs)]
            store.close()
        agree = sum(g == t for g, t in zip(got, truth, strict=True)) / a.pairs
        kappa = cohen_kappa(got, truth)
        bias = tally.position_bias().get("pairwise")
        print(f"judge_agreement_with_ranking[{name}]: {agree:.3f} share")
        print(f"judge_kappa_with_ranking[{name}]: {kappa if kappa is None else round(kappa, 3)} kappa")
        if bias is not None:
            print(f"judge_decided_by_position[{name}]: {bias.same_position_rate:.3f} share")
            print(f"judge_first_position_rate[{name}]: {bias.first_position_rate:.3f} share")


if __name__ == "__main__":
    main()
