"""Paired, bounded-concurrency generation into the run store.

Both (or all three) sides of a pair are sent together, so baseline and
candidate see the same period of server load: a latency or numerics change
that depends on load then shows up in both or neither. Cases are fed lazily
and every outcome is written the moment it arrives, so memory stays flat on
100k-case runs and an interrupted run loses only what was in flight.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass, field
from typing import Any

from qualitycheck.core._cases import Case
from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._errors import RunIncompleteError
from qualitycheck.core._progress import Progress
from qualitycheck.core._records import Response
from qualitycheck.core._store import RunStore, StoredOutcomes
from qualitycheck.generation._client import Endpoint, build_request

__all__ = ["Progress", "RunStats", "Samples", "generate", "in_shard", "work_items"]


@dataclass
class RunStats:
    """Counts per target of what this invocation did (not the whole store)."""

    sent: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    interrupted: bool = False
    wall_s: float = 0.0

    def add(self, other: RunStats) -> None:
        """Fold in the counts of a later stretch of generation (a window, a sampling round)."""
        for name, n in other.sent.items():
            self.sent[name] = self.sent.get(name, 0) + n
        for name, n in other.errors.items():
            self.errors[name] = self.errors.get(name, 0) + n
        self.skipped += other.skipped
        self.interrupted |= other.interrupted
        self.wall_s += other.wall_s


def in_shard(case_id: str, shard: str | None) -> bool:
    """Whether a case belongs to shard "i/n" (every case does without one): for streamed suites."""
    if not shard:
        return True
    i, n = (int(x) for x in shard.split("/"))
    return int(hashlib.sha256(case_id.encode()).hexdigest()[:8], 16) % n == i - 1


Samples = Callable[[Case], int]
"""How many answers (repeats) a case needs per target: `run.repeats` for every case unless a plan says otherwise."""


def work_items(
    cases: Iterable[Case],
    targets: Mapping[str, Target],
    opts: RunOptions,
    done: StoredOutcomes | dict[tuple[str, str, int], tuple[str, bool]],
    samples: Samples | None = None,
) -> Iterable[tuple[Case, int, list[str]]]:
    """(case, repeat, targets still needing an answer) for everything not stored yet.

    A sampled case is not sent to the control: the control measures the
    greedy noise floor, and a sampled case is judged by its own samples on
    both sides (`verdict._sequential`).
    """
    greedy_only = {n: t for n, t in targets.items() if n != "control"}
    for case in cases:
        asked = greedy_only if case.sampled else targets
        for rep in range(samples(case) if samples is not None else opts.repeats):
            need = []
            for name, t in asked.items():
                prev = done.get((case.id, name, rep))
                # the fingerprint is only needed to compare with a stored answer (resume)
                if prev is None or not prev[1] or prev[0] != build_request(case, t, opts, rep).fingerprint:
                    need.append(name)
            if need:
                yield case, rep, need


FAIL_FAST_ANSWERS = 20
FAIL_FAST_STATUSES = frozenset({400, 401, 403, 404, 422})
"""Statuses that retrying cannot fix: a wrong model name, key, path or request shape."""


class _FailFast:
    """Stops a run whose target refuses its first answers all the same way.

    A target that answers the first `FAIL_FAST_ANSWERS` requests with one and
    the same non-retryable status (404 for a model name it does not serve,
    401 for a missing key) is misconfigured, not flaky: sending the rest of
    the suite would only store thousands of identical errors. One answer of
    another kind (a success, another status) clears the target for the run.
    """

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, int | None]] = {}
        """target → (answers seen while all refused alike, their status), until cleared (status None)."""

    def refused(self, r: Response) -> str | None:
        """The reason to stop once `r` completes a run of identical refusals, else None."""
        n, status = self._seen.get(r.target, (0, -1))
        if status is None or n >= FAIL_FAST_ANSWERS:
            return None
        err = r.error
        if err is None or err.kind != "http_status" or err.status not in FAIL_FAST_STATUSES or (n and err.status != status):
            self._seen[r.target] = (n, None)
            return None
        self._seen[r.target] = (n + 1, err.status)
        if n + 1 < FAIL_FAST_ANSWERS:
            return None
        return (
            f"the {r.target} target answered its first {FAIL_FAST_ANSWERS} requests with HTTP {err.status} "
            f"({err.message}); it is misconfigured (model name, key, URL?), so the run stopped"
        )


MAX_UNWRITTEN = 1024
"""Responses received but not yet committed beyond which no new pair is sent.

The writer thread gets the GIL only when the event loop lets go of it; with
a server faster than a commit (the benchmark's instant one) the loop
receives faster than the thread commits, and an unbounded queue would grow
with the run (docs/ARCHITECTURE.md has the figure). Model servers answer far
slower than a commit, so at their rates the limit is not reached and the
configured load is kept.
"""


async def generate(
    store: RunStore,
    cases: Iterable[Case],
    targets: Mapping[str, Target],
    opts: RunOptions,
    *,
    progress: Progress | None = None,
    http_clients: dict[str, Any] | None = None,
    on_response: Callable[[Response], None] | None = None,
    done: StoredOutcomes | None = None,
    samples: Samples | None = None,
) -> RunStats:
    """Send every missing (case, target, repeat) and store each outcome as it arrives.

    `targets` are the sides to ask, by name (`baseline`, `candidate`,
    `control`: the name is the stored target); `opts` are the run's
    options (repeats, concurrency, the request's defaults, `opts.http`).
    `cases` is iterated twice (counting, then sending), so it must be a
    collection or a re-iterable such as `store.StoredCases`, not a generator.
    `done` is `store.stored_outcomes()` (opened here when not given, and
    then closed here): windows over disjoint cases share one. `samples`
    gives each case its number of repeats (the sampling rounds' plan).
    """
    progress = progress or Progress()
    stats = RunStats()
    own_done = done is None
    done = store.stored_outcomes() if done is None else done
    try:
        return await _generate(store, cases, targets, opts, progress, http_clients, on_response, done, stats, samples)
    finally:
        if own_done:
            done.close()


async def _generate(
    store: RunStore,
    cases: Iterable[Case],
    targets: Mapping[str, Target],
    opts: RunOptions,
    progress: Progress,
    http_clients: dict[str, Any] | None,
    on_response: Callable[[Response], None] | None,
    done: StoredOutcomes,
    stats: RunStats,
    samples: Samples | None,
) -> RunStats:
    totals: dict[str, int] = {}
    wanted = 0
    if not done and samples is None and "control" not in targets and isinstance(cases, Sized):
        # nothing stored yet: all of it is to send, no pass needed to count it
        wanted = len(cases) * opts.repeats * len(targets)
        if wanted:
            totals = {name: len(cases) * opts.repeats for name in targets}
    else:
        for case in cases:  # a counting pass: neither the cases nor the work are ever listed
            n = samples(case) if samples is not None else opts.repeats
            wanted += n * (len(targets) - ("control" in targets and case.sampled))
            for _, _, need in work_items((case,), targets, opts, done, samples):
                for name in need:
                    totals[name] = totals.get(name, 0) + 1
    stats.skipped = wanted - sum(totals.values())
    endpoints = {name: Endpoint(name, t, opts, (http_clients or {}).get(name)) for name, t in targets.items()}
    sems = {name: asyncio.Semaphore(opts.concurrency) for name in endpoints}
    writer = _StoreWriter(store)
    fail_fast = _FailFast()
    refused: list[str] = []
    progress.start(totals)
    t0 = time.perf_counter()

    async def one(name: str, case: Case, rep: int) -> None:
        async with sems[name]:
            r = await endpoints[name].send(case, rep)
        writer.put(r)
        stats.sent[name] = stats.sent.get(name, 0) + 1
        if not r.ok:
            stats.errors[name] = stats.errors.get(name, 0) + 1
        progress.advance(name, r.ok)
        if on_response:
            on_response(r)
        reason = fail_fast.refused(r)
        if reason is not None:
            refused.append(reason)

    async def pair(case: Case, rep: int, need: list[str]) -> None:
        if len(need) == 1:  # no extra task for a lone request
            await one(need[0], case, rep)
        else:
            await asyncio.gather(*(one(n, case, rep) for n in need))

    # at most `concurrency` pairs in flight: each pair holds one slot per target
    window = asyncio.Semaphore(opts.concurrency)
    tasks: set[asyncio.Task[None]] = set()
    try:
        for case, rep, need in work_items(cases, targets, opts, done, samples):
            await window.acquire()
            while writer.backlog() > MAX_UNWRITTEN:  # the store is behind: wait for it rather than queue without bound
                await asyncio.sleep(0.002)
            if refused:
                window.release()
                break
            task = asyncio.create_task(pair(case, rep, need))
            tasks.add(task)
            task.add_done_callback(functools.partial(_finished, tasks, window))
        while tasks and not refused:
            await asyncio.wait(set(tasks), return_when=asyncio.FIRST_COMPLETED)
        if refused:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    except asyncio.CancelledError:
        stats.interrupted = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        writer.close()
        stats.wall_s = time.perf_counter() - t0
        progress.stop()
        await asyncio.gather(*(e.aclose() for e in endpoints.values()), return_exceptions=True)
    writer.raise_failure()
    if refused:
        raise RunIncompleteError(f"{refused[0]}. Everything received is stored; fix the target and run the same command again.")
    return stats


def _finished(tasks: set[asyncio.Task[None]], window: asyncio.Semaphore, task: asyncio.Task[None]) -> None:
    """A pair is done: forget its task and free its slot in the window."""
    tasks.discard(task)
    window.release()


class _StoreWriter:
    """Commits responses from a thread of its own, in arrival order.

    A commit waits on the disk (~0.2 ms, far more on a busy disk); done on
    the event loop, that wait delays reading every other stream and shows up
    as extra TTFT/ITL. The thread commits each response as soon as it is
    handed over (with whatever else is queued by then, in one transaction),
    so durability is unchanged: a killed run loses only what was in flight or
    queued for a fraction of a millisecond. `close` drains the queue before
    generation returns.
    """

    _STOP = object()

    def __init__(self, store: RunStore):
        self._store = store
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="qc-store-writer", daemon=True)
        self._thread.start()

    def put(self, r: Response) -> None:
        self._queue.put(r)

    def backlog(self) -> int:
        """Responses handed over and not yet committed (approximate, as `qsize` is)."""
        return self._queue.qsize()

    def _run(self) -> None:
        """Commit what is queued, all of it in one transaction: whatever arrived while the last commit ran
        goes in the next, so no response waits longer than before, and a busy run pays one commit for several."""
        while True:
            batch = [self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            stop = batch[-1] is self._STOP
            if stop:
                batch.pop()
            if batch and self._failure is None:
                try:
                    self._store.put_responses(batch)
                except BaseException as exc:  # surfaced by raise_failure once generation ends
                    self._failure = exc
            if stop:
                return

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(self._STOP)
            self._thread.join()

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure
