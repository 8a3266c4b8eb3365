"""Build tests/e2e/suites/open_ended.jsonl: open-ended sampled traffic, from the bundled suites.

Run from anywhere: `python scripts/build_open_ended.py [--check]`. It takes
the 16 shortest cases (by prompt characters, then id) of each of
`suites/summarization.jsonl`, `suites/qa.jsonl` and `suites/rag.jsonl`,
asks them at `temperature: 0.8` with `max_tokens: 64`, keeps their own
`contains`/`regex`/`exact` checks and drops the judge (a one-sided judge is
skipped on sampled cases by design). The shortest fit the e2e servers'
1,024-token context with their answers. Each case keeps its `source` and
gains the tag `derived_from` naming the suite file and case it was made
from. The output is deterministic; `--check` exits 1 when the committed file
differs from a fresh build.

It is the traffic where checks see least (a `contains` on an open answer at
this temperature rarely passes on either side): the likelihood evidence's
measurements and its end-to-end test run on it (docs/stages/likelihood.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "e2e" / "suites" / "open_ended.jsonl"
CATEGORIES = ("summarization", "qa", "rag")
PER_CATEGORY = 16
PARAMS = {"temperature": 0.8, "max_tokens": 64}


def _chars(case: dict[str, Any]) -> int:
    return sum(len(str(m.get("content", ""))) for m in case.get("messages", []))


def build() -> str:
    lines = []
    for category in CATEGORIES:
        path = ROOT / "suites" / f"{category}.jsonl"
        cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for case in sorted(cases, key=lambda c: (_chars(c), c["id"]))[:PER_CATEGORY]:
            checks = {k: v for k, v in case.get("checks", {}).items() if k != "judge"}
            tags = {**case.get("tags", {}), "derived_from": f"suites/{category}.jsonl#{case['id']}"}
            out = {**case, "params": {**case.get("params", {}), **PARAMS}, "checks": checks, "tags": tags}
            lines.append(json.dumps(out, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed file differs from a fresh build")
    args = ap.parse_args(argv)
    text = build()
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT}: {'up to date' if same else 'differs from a fresh build: run scripts/build_open_ended.py'}")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({text.count(chr(10))} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
