"""Per-case comparison of the candidate (and the control) against the baseline.

One `CaseComparison` per (case, repeat): each check's outcome on every
target and whether it flipped, whether the texts are identical, where they
first diverge (characters, and tokens when both sides returned token ids),
how similar they are, and the format features of each side. The records
are persisted in the store (table `comparisons`, one row per case and
repeat) so the statistics, the gate and the HTML report all read the same
comparison, and none of them recomputes text diffs. The stage walks the run
one case at a time and hands each record on as it is made: a 100,000-case
run never holds more than one case's records.
"""

from __future__ import annotations

import difflib
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Literal, NoReturn, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from qualitycheck.core._process import die_with_parent, fork_is_safe, others_running
from qualitycheck.core._records import FORMAT_VERSION, Response, Score
from qualitycheck.core._store import CaseRecords, RunStore

__all__ = [
    "CaseComparison",
    "CaseConsumer",
    "CheckOutcome",
    "SplitTally",
    "compare_case",
    "compare_run",
    "first_divergence",
    "similarity",
]

SIDES = ("baseline", "candidate", "control")
SIMILARITY_BUDGET = 40_000
"""Largest product of the differing middles' lengths compared character by character (≈200 × 200)."""

Flip = Literal["regression", "improvement"]
Features = Callable[..., dict[str, Any]]
"""An answer's format features (`scoring.format_features`): called with its text, finish reason and
completion tokens, and with its tool calls as a fourth argument only when the request declared tools."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CheckOutcome(_Frozen):
    """One check on one (case, repeat): the status on every target and the flip."""

    baseline: str | None = None
    """pass | fail | error | skipped, or None when that target has no score."""
    candidate: str | None = None
    control: str | None = None
    flip: Flip | None = None
    """regression: baseline pass → candidate fail; improvement: fail → pass."""
    control_flip: bool = False
    """The control (same configuration as the baseline) decided differently: noise."""


class CaseComparison(_Frozen):
    """The baseline and the candidate (and control) on one case and repeat."""

    format_version: int = FORMAT_VERSION
    case_id: str
    category: str
    route: str
    repeat: int = 0
    baseline_ok: bool = False
    """The baseline has a response without error."""
    candidate_ok: bool = False
    control_ok: bool | None = None
    """None when the run has no control target."""
    identical: bool | None = None
    """Answers equal (`Response.answer`: text and tool calls); None when either side has no usable response."""
    divergence_char: int | None = None
    """Index of the first differing character (None when identical or missing)."""
    divergence_token: int | None = None
    """Index of the first differing token id, when both sides returned token ids."""
    similarity: float | None = None
    """difflib ratio in [0, 1] of the two texts."""
    similarity_exact: bool = True
    """False when the texts were too long for an exact ratio and an upper bound was used."""
    control_identical: bool | None = None
    """Baseline text equals the control's (the A/A noise floor)."""
    baseline_repeat_identical: bool | None = None
    """For repeats after the first: the baseline's text equals its own text at repeat 0 (noise without a control)."""
    baseline_len: int = 0
    candidate_len: int = 0
    sampled: bool = False
    """The case samples (temperature > 0): its repeats are draws compared as pass rates, its texts differ by design."""
    finish_reasons: dict[str, str | None] = Field(default_factory=dict)
    checks: dict[str, CheckOutcome] = Field(default_factory=dict)
    format: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Side → format features (qualitycheck.scoring._format); empty when unavailable."""

    @property
    def regressions(self) -> list[str]:
        return [n for n, o in self.checks.items() if o.flip == "regression"]

    @property
    def improvements(self) -> list[str]:
        return [n for n, o in self.checks.items() if o.flip == "improvement"]


def first_divergence(a: str | list[int], b: str | list[int]) -> int | None:
    """First index where two sequences differ; None when equal (a prefix differs at its end)."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else n


def similarity(a: str, b: str, budget: int = SIMILARITY_BUDGET) -> tuple[float, bool]:
    """difflib ratio of two texts, exact while the differing middle is small enough.

    Common prefix and suffix are matched for free; only the middle goes to
    SequenceMatcher, whose cost grows with the product of the lengths (and
    worse on repetitive text, which runaway answers are). Past `budget`
    (product of the middle lengths) the middle is compared word by word,
    and past it again bounded by `quick_ratio`; both are flagged approximate,
    so a 100 kB answer costs milliseconds, not minutes.
    """
    if a == b:
        return 1.0, True
    total = len(a) + len(b)
    pre = 0
    n = min(len(a), len(b))
    while pre < n and a[pre] == b[pre]:
        pre += 1
    suf = 0
    while suf < n - pre and a[len(a) - 1 - suf] == b[len(b) - 1 - suf]:
        suf += 1
    ma, mb = a[pre : len(a) - suf], b[pre : len(b) - suf]
    mid_total = len(ma) + len(mb)
    exact = len(ma) * len(mb) <= budget
    if exact:
        mid_ratio = difflib.SequenceMatcher(None, ma, mb, autojunk=False).ratio()
    else:
        wa, wb = ma.split(), mb.split()
        sm = difflib.SequenceMatcher(None, wa, wb, autojunk=False)
        mid_ratio = sm.ratio() if len(wa) * len(wb) <= budget else sm.quick_ratio()
    mid_matches = mid_ratio * mid_total / 2 if mid_total else 0.0
    return (2 * (pre + suf) + 2 * mid_matches) / total, exact


def _flip(b: str | None, c: str | None) -> Flip | None:
    if b == "pass" and c == "fail":
        return "regression"
    if b == "fail" and c == "pass":
        return "improvement"
    return None


def compare_pair(
    case_id: str,
    category: str,
    route: str,
    repeat: int,
    responses: dict[str, Response],
    scores: dict[str, dict[str, Score]],
    features: Features | None = None,
    tools: bool = False,
) -> CaseComparison:
    """Compare one (case, repeat); `responses`/`scores` are keyed by target (scores then by check).

    `tools`: the request declared tools, so every side's features include
    its tool calls (none is a value too).
    """
    b, c, k = (responses.get(s) for s in SIDES)
    b_ok, c_ok = bool(b and b.ok), bool(c and c.ok)
    k_ok = bool(k and k.ok) if k is not None or "control" in scores else None
    out: dict[str, Any] = {
        "case_id": case_id,
        "category": category,
        "route": route,
        "repeat": repeat,
        "baseline_ok": b_ok,
        "candidate_ok": c_ok,
        "control_ok": k_ok,
        "baseline_len": len(b.answer) if b else 0,
        "candidate_len": len(c.answer) if c else 0,
        "finish_reasons": {s: r.finish_reason for s, r in responses.items()},
    }
    if b_ok and c_ok:
        assert b is not None and c is not None
        out["identical"] = b.answer == c.answer
        if not out["identical"]:
            out["divergence_char"] = first_divergence(b.answer, c.answer)
            if b.token_ids is not None and c.token_ids is not None:
                out["divergence_token"] = first_divergence(b.token_ids, c.token_ids)
            out["similarity"], out["similarity_exact"] = similarity(b.answer, c.answer)
        else:
            out["similarity"] = 1.0
    if b_ok and k_ok:
        assert b is not None and k is not None
        out["control_identical"] = b.answer == k.answer
    names = sorted({n for per in scores.values() for n in per})
    checks = {}
    for n in names:
        st = {s: (scores.get(s, {}).get(n).status if n in scores.get(s, {}) else None) for s in SIDES}  # type: ignore[union-attr]
        checks[n] = CheckOutcome(
            baseline=st["baseline"],
            candidate=st["candidate"],
            control=st["control"],
            flip=_flip(st["baseline"], st["candidate"]),
            control_flip=st["baseline"] in ("pass", "fail") and st["control"] in ("pass", "fail") and st["baseline"] != st["control"],
        )
    out["checks"] = checks
    if features is not None:
        seen: dict[tuple[str, str | None, int | None], dict[str, Any]] = {}  # greedy sides mostly answer alike
        fmt = {}
        for s, r in responses.items():
            if r.ok:
                key = (r.answer, r.finish_reason, r.usage.completion_tokens)
                if key not in seen:
                    args = (r.text, r.finish_reason, r.usage.completion_tokens)
                    seen[key] = features(*args, r.tool_calls or []) if tools else features(*args)
                fmt[s] = seen[key]
        out["format"] = fmt
    return CaseComparison(**out)


def compare_case(rec: CaseRecords, features: Features | None = None) -> list[CaseComparison]:
    """One case's comparisons, one per repeat that has any response; none when nothing was answered."""
    case = rec.case
    by_repeat: dict[int, dict[str, Response]] = {}
    for r in rec.responses:
        by_repeat.setdefault(r.repeat, {})[r.target] = r
    scores: dict[int, dict[str, dict[str, Score]]] = {}
    for s in rec.scores:
        scores.setdefault(s.repeat, {}).setdefault(s.target, {})[s.check] = s
    first = by_repeat.get(0, {}).get("baseline")
    out = []
    for rep, sides in sorted(by_repeat.items()):
        comp = compare_pair(
            case.id, case.category, case.route, rep, sides, scores.get(rep, {}), features, tools=bool(case.params.get("tools"))
        )
        b = sides.get("baseline")
        if rep > 0 and first is not None and first.ok and b is not None and b.ok:
            comp = comp.model_copy(update={"baseline_repeat_identical": b.answer == first.answer})
        if case.sampled:
            comp = comp.model_copy(update={"sampled": True})
        out.append(comp)
    return out


CaseConsumer = Callable[[CaseRecords, list[CaseComparison]], None]
"""What a walk of the store hands each case to: its records (as read) and its comparisons (as made)."""


@runtime_checkable
class SplitTally(Protocol):
    """A consumer of the walk whose work on a later range of cases folds into its own: what lets the walk use two processes.

    `add` takes each case as `CaseConsumer` does. `part()` is what the tally
    gathered, picklable (the second process sends it back); `merge(part)`
    folds in the part of a tally that walked the cases after this one's, so
    that the result equals one tally that walked them all in order.
    """

    def add(self, rec: CaseRecords, comps: list[CaseComparison]) -> None: ...

    def part(self) -> Any: ...

    def merge(self, part: Any) -> None: ...


SPLIT_MIN_CASES = 1_000
"""Cases from which the walk is split over two processes (below it the fork and the merge cost more than they save)."""
SECOND_HALF_GRACE_S = 60.0
"""How long past four times this process's own half the fork may take before it is taken for stuck (and its half walked here)."""

_Item = tuple[str, str, list[tuple[int, str]] | None]
"""(case id, inputs digest, fresh records or None): what `RunStore.update_comparisons` takes per case."""


def compare_run(
    store: RunStore,
    consume: Callable[[list[CaseComparison]], None] | None = None,
    *,
    each: Sequence[CaseConsumer | SplitTally] = (),
    workers: int | None = None,
) -> int:
    """Compare every stored (case, repeat), store the records, and hand each case on as it is compared.

    Streams: one case is in memory at a time, the records go to the store's
    `comparisons` table as they are made (the table is brought up to date
    in one transaction) and to `consume` (cases with records only) and every
    one of `each` (every case, with its records and its comparisons,
    possibly none) in case-id order. This is the one walk of the store after
    scoring: the summary's digest, latency, slices and judge figures and the
    report's rows are all fed from it. Returns how many records were stored.

    A case whose stored rows (case, responses, scores) are those its stored
    records were made from, by this same code (`comparison_salt`), is not
    compared again: its records are read back, equal to what comparing
    would make, and nothing is written. `report` and `gate` of a finished
    run therefore compare only what changed since the last summary.

    Reading and parsing the records is most of a report's time, so a run of
    `SPLIT_MIN_CASES` or more is walked by two processes when every one of
    `each` is a `SplitTally` (`_split_walk`); `workers=1` keeps it in one,
    `workers=2` splits any run where a fork is possible.
    """
    from qualitycheck.scoring._format import format_features  # the scoring package loads every check family: only when comparing

    salt = comparison_salt(format_features)
    counted = [0]
    tallies = [f for f in each if isinstance(f, SplitTally)]
    second = (
        _SecondHalf.start(store, salt, tallies) if consume is None and len(tallies) == len(each) and _may_split(store, workers) else None
    )
    if second is not None:
        try:
            store.update_comparisons(_split_walk(store, salt, tallies, counted, second))
        finally:
            second.close()
    else:
        store.update_comparisons(_walk(store, salt, each, consume, counted))
    return counted[0]


def _walk(
    store: RunStore,
    salt: str,
    each: Sequence[CaseConsumer | SplitTally],
    consume: Callable[[list[CaseComparison]], None] | None,
    counted: list[int],
    start: str | None = None,
    stop: str | None = None,
) -> Iterator[_Item]:
    """The walk of the cases whose id is in [start, stop): each compared (or its records read back) and handed on."""
    from qualitycheck.scoring._format import format_features

    calls = [f.add if isinstance(f, SplitTally) else f for f in each]
    comparison_of = CaseComparison.__pydantic_validator__.validate_json  # without `model_validate_json`'s Python call per record
    stored = store.comparisons_with_inputs(start, stop)
    for rec in store.by_case(inputs=True, likelihoods=True, start=start, stop=stop):
        inputs = f"{salt}:{rec.inputs}"
        kept = stored.take(rec.case.id)
        fresh: list[tuple[int, str]] | None = None
        if kept and kept[0] == inputs:
            comps = [comparison_of(b) for b in kept[1:]]
        else:
            comps = compare_case(rec, format_features)
            fresh = [(c.repeat, c.model_dump_json()) for c in comps]
        for f in calls:
            f(rec, comps)
        counted[0] += len(comps)
        if comps and consume is not None:
            consume(comps)
        yield rec.case.id, inputs, fresh


def _may_split(store: RunStore, workers: int | None) -> bool:
    """Whether this walk can use a second process: asked for (or a run large enough, with a second core free), and a safe fork.

    With other threads running the walk stays in one process
    (`fork_is_safe`). Linux only: elsewhere system libraries numpy may
    load (macOS's Accelerate) are not safe to use after a fork. Unless asked
    for, a second core must be free now (`others_running` at most
    `cores - 2`; where the kernel gives no such count, the 1-minute load
    average below `cores - 0.5`): on a busy machine the two halves share a
    core, and the fork's extra work (rows it builds that the merge drops,
    the pickled parts) makes the report slower, not faster.
    """
    if workers == 1 or sys.platform != "linux" or not fork_is_safe():
        return False
    if workers is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if cores < 2 or store.case_count() < SPLIT_MIN_CASES:
            return False
        others = others_running()
        return others <= cores - 2 if others is not None else os.getloadavg()[0] < cores - 0.5
    return store.case_count() >= 2


class _Done:
    """The last thing the second process sends: how many records it walked, and each tally's part."""

    def __init__(self, count: int, parts: list[Any]):
        self.count, self.parts = count, parts


class _SecondHalf:
    """The fork that walks the cases from the middle id on (`_walk_second`), the file it writes to, and its temporary folder.

    Forked while this process's connection holds no statement and no
    transaction open. The fork opens a connection of its own and never
    touches the copy of this one; SQLite's record of this process's locks
    is copied with it, so the fork's own connection may rely on locks that
    this process holds. Hence the rule: this process keeps its connection
    open until the fork has ended (`close` comes before the store's), and
    the fork dies with it (`die_with_parent`).
    """

    def __init__(self, store: RunStore, salt: str, tallies: Sequence[SplitTally]):
        self.middle = store.case_id_at(store.case_count() // 2)
        self.tmp = tempfile.mkdtemp(prefix="qc-walk-")
        """The fork's temporary files (a spill of rows) go here, and go with it whatever becomes of the fork."""
        self.out = tempfile.TemporaryFile(dir=self.tmp)  # noqa: SIM115  (closed by `close`, after the walk that reads it)
        parent = os.getpid()
        self.pid: int | None = None
        try:
            self.pid = os.fork()
        except BaseException:
            self._remove()
            raise
        if self.pid == 0:  # pragma: no cover  (the fork: the tests check what it sends)
            die_with_parent(signal.SIGKILL, parent)
            tempfile.tempdir = self.tmp
            _walk_second(store.folder, salt, tallies, self.middle, self.out)

    @classmethod
    def start(cls, store: RunStore, salt: str, tallies: Sequence[SplitTally]) -> _SecondHalf | None:
        """The fork, or None when the system refuses one (a process limit, memory): the walk then stays in one process."""
        try:
            return cls(store, salt, tallies)
        except OSError:
            return None

    def finished(self, timeout_s: float) -> bool:
        """Wait for the fork, at most `timeout_s`; True when it wrote everything (it exits 0 only then).

        A fork still running then is stopped: this process walks its half
        itself, as it does when the fork failed.
        """
        assert self.pid is not None
        deadline = time.monotonic() + timeout_s
        pause = 0.001
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid != 0:
                self.pid = None
                return os.waitstatus_to_exitcode(status) == 0
            if time.monotonic() >= deadline:
                self.close()
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def close(self) -> None:
        """Stop the fork if it is still running (the walk failed or was interrupted), and drop its files."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = None
        self._remove()

    def _remove(self) -> None:
        self.out.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _split_walk(store: RunStore, salt: str, tallies: Sequence[SplitTally], counted: list[int], second: _SecondHalf) -> Iterator[_Item]:
    """The walk over two processes: this one takes the cases before the middle id, the fork the rest.

    The fork walks its range with its copies of the tallies (still empty)
    and writes its items, a batch at a time, and then its tallies' parts to
    a temporary file, so neither process holds more than a batch of cases.
    Once this process has walked its range, it reads the fork's items in
    order (the store's transaction writes them as its own) and merges the
    parts into its tallies. If the fork failed in any way, this process
    walks the second range itself: the same result, one core's time.
    """
    began = time.monotonic()
    yield from _walk(store, salt, tallies, None, counted, stop=second.middle)
    # the fork's half is as large as this one: a fork that takes several times as long is stuck, not slow
    if not second.finished(timeout_s=SECOND_HALF_GRACE_S + 4 * (time.monotonic() - began)):
        yield from _walk(store, salt, tallies, None, counted, start=second.middle)
        return
    out = second.out
    out.seek(0)
    while not isinstance(got := pickle.load(out), _Done):
        yield from got
    counted[0] += got.count
    for tally, part in zip(tallies, got.parts, strict=True):
        tally.merge(part)


def _walk_second(folder: Path, salt: str, tallies: Sequence[SplitTally], start: str | None, out: IO[bytes]) -> NoReturn:
    """The fork's side of `_split_walk`: walk [start, end), write the items and the parts, and exit at once.

    `os._exit`: nothing of the parent's (its connection, its temporary
    files, atexit handlers, buffered output) is closed or flushed twice.
    """
    code = 1
    try:
        counted = [0]
        with RunStore.open(folder) as own:
            batch: list[_Item] = []
            for item in _walk(own, salt, tallies, None, counted, start=start):
                batch.append(item)
                if len(batch) >= 256:
                    pickle.dump(batch, out, pickle.HIGHEST_PROTOCOL)
                    batch = []
            pickle.dump(batch, out, pickle.HIGHEST_PROTOCOL)
            pickle.dump(_Done(counted[0], [t.part() for t in tallies]), out, pickle.HIGHEST_PROTOCOL)
            out.flush()
        code = 0
    except BaseException:  # whatever failed, the parent walks this range itself
        code = 1
    finally:
        os._exit(code)


def comparison_salt(features: Features) -> str:
    """What a comparison record depends on besides its case's stored rows: the code that makes it.

    A digest of the sources of this module, the format-feature function's
    module (and its name: tests swap in their own), the answer extraction
    and the records, with pydantic's version (it writes the JSON): an
    upgrade or an edit of any of them makes every case compared afresh.
    """
    import hashlib

    import pydantic

    h = hashlib.blake2b(f"{features.__module__}.{features.__qualname__};pydantic {pydantic.VERSION}".encode(), digest_size=8)
    for name in (__name__, features.__module__, "qualitycheck.scoring._extract", "qualitycheck.core._records"):
        path = getattr(sys.modules.get(name), "__file__", None)
        h.update(Path(path).read_bytes() if path else name.encode())
    return h.hexdigest()
