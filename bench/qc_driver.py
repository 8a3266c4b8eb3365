"""qualitycheck's own runner and client, driven without the CLI around them.

`bench/run.py` uses it where the CLI cannot express the measurement: a
single target at exactly concurrency 1 (the CLI always sends pairs), and
the generation wall/CPU time without interpreter start-up and reports.
Responses go to a real run store, exactly as in `qualitycheck run`.

Run: `python bench/qc_driver.py URL N CONCURRENCY [--timings] [--no-stream]`;
prints a JSON line {wall_s, cpu_s, ok, timings: {id: [t1, t2, ...]}}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qualitycheck.core._cases import Case
from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._store import RunStore, StoredCases
from qualitycheck.generation._runner import generate


def bench_cases(n: int) -> Iterator[Case]:
    """The same prompts the bare client sends; the request id is the prompt's last word."""
    for i in range(n):
        yield Case(id=f"c{i}", category="bench", messages=[{"role": "user", "content": f"Say something r{i}"}], params={"max_tokens": 64})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("n", type=int)
    ap.add_argument("concurrency", type=int)
    ap.add_argument("--timings", action="store_true")
    ap.add_argument("--no-stream", action="store_true")
    a = ap.parse_args()
    targets = {"baseline": Target(url=a.url, model="bench")}
    opts = RunOptions(concurrency=a.concurrency, stream=not a.no_stream, retries=0, preflight=False)
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore.create(Path(tmp), {"cases": a.n, "targets": {}, "repeats": 1}, bench_cases(a.n))
        cases = StoredCases(store)  # as `qualitycheck run` does: read back from the store, never listed
        t0, c0 = time.perf_counter(), time.process_time()
        stats = asyncio.run(generate(store, cases, targets, opts))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        timings = {}
        ok = 0
        for r in store.responses():
            ok += r.ok
            if a.timings and r.ok:
                timings["r" + r.case_id[1:]] = r.chunk_times
        store.close()
    json.dump({"wall_s": wall, "cpu_s": cpu, "ok": ok, "sent": sum(stats.sent.values()), "timings": timings}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
