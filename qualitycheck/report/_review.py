"""review.html: blinded human spot-checks of a run, and the import of what the reviewers said.

Why it is built this way:
- The page must not tell the sides apart. A reviewer who knows which answer
  is the candidate's judges the label, not the answer. So the page carries
  the prompt and two answers per pair and nothing else: pair ids are an HMAC
  of the case id and repeat under a secret kept in the run folder (opaque,
  yet stable when the page is written again), the answer order is drawn per
  pair from a seeded generator, the pairs are shuffled, and neither the
  markup nor the script names a side. Which side is A (the key) stays in the
  store (`review_key` artifact) with the secret.
- Like report.html, the page is one self-contained file under a CSP that
  allows only its own nonce'd script and style; answers travel only inside
  a JSON data block and reach the screen through `textContent`.
- Which pairs: divergent pairs first, stratified by category, plus a few
  identical pairs as attention checks (a side picked there is noise, and
  measures the reviewers' own floor: `verdict._status.human_check_stats`).
- `--import` checks every file completely (run, reviewer, pair ids, choices)
  before anything is written, then stores all of them in one artifact write:
  a bad file leaves the run exactly as it was.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from qualitycheck.core._cases import Case
from qualitycheck.core._errors import ConfigError, Problem
from qualitycheck.core._store import RunStore
from qualitycheck.report._html import _asset, _env, json_for_script
from qualitycheck.verdict._human import (
    HUMAN_LABELS_ARTIFACT,
    Choice,
    HumanLabel,
    HumanLabels,
    ReviewerLabels,
    read_human_labels,
)
from qualitycheck.verdict._human_summary import REVIEW_KEY_ARTIFACT

__all__ = [
    "LABELS_FORMAT",
    "REVIEW_NAME",
    "KeyPair",
    "ReviewKey",
    "import_labels",
    "write_review",
]

REVIEW_NAME = "review.html"
LABELS_FORMAT = "qualitycheck-review-labels"
DEFAULT_SAMPLE = 40
ATTENTION_SHARE = 0.1
"""Attention checks per divergent pair on the page (at least one when the run has identical pairs)."""

Side = Literal["baseline", "candidate"]


class KeyPair(BaseModel):
    """One pair of the page: which case and repeat, and which side the page shows as A."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    id: str
    case_id: str
    repeat: int = 0
    a: Side
    attention: bool = False
    """Identical answers: an attention check."""


class ReviewKey(BaseModel):
    """The `review_key` artifact: the secret behind the page's ids and every pair's sides. Never on the page."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    version: int = 1
    secret: str
    seed: int = 0
    pairs: list[KeyPair] = Field(default_factory=list)
    """Every pair any written page offered: a page written again keeps earlier pairs, so their exports still import."""

    def mac(self, text: str) -> str:
        return hmac.new(bytes.fromhex(self.secret), text.encode(), hashlib.sha256).hexdigest()[:16]

    @property
    def run(self) -> str:
        """The run's id on the page: opaque, and the same for every page written from this key."""
        return "r" + self.mac("run")

    def pair_id(self, case_id: str, repeat: int) -> str:
        return "p" + self.mac(f"{case_id}\0{repeat}")


# ------------------------------------------------------------------ sampling
@dataclass(frozen=True)
class _Candidate:
    case_id: str
    repeat: int
    category: str


def _sample(store: RunStore, sample: int, per_category: int | None, rng: random.Random) -> tuple[list[_Candidate], list[_Candidate]]:
    """(divergent pairs, attention checks): divergent pairs stratified by category, a few identical ones.

    Walks the store once keeping ids only; the texts of the chosen pairs are
    read afterwards.
    """
    divergent: dict[str, list[_Candidate]] = {}
    identical: list[_Candidate] = []
    for rec in store.by_case(scores=False):
        by_rep: dict[int, dict[str, Any]] = {}
        for r in rec.responses:
            if r.ok:
                by_rep.setdefault(r.repeat, {})[r.target] = r
        for rep, sides in sorted(by_rep.items()):
            b, c = sides.get("baseline"), sides.get("candidate")
            if b is None or c is None:
                continue
            pick = _Candidate(rec.case.id, rep, rec.case.category)
            if b.answer == c.answer:
                identical.append(pick)
            else:
                divergent.setdefault(rec.case.category, []).append(pick)
    for pool in divergent.values():
        rng.shuffle(pool)
    chosen: list[_Candidate] = []
    taken = dict.fromkeys(divergent, 0)
    while len(chosen) < sample:  # round robin over the categories: each gets its share before any gets more
        moved = False
        for cat in sorted(divergent):
            pool = divergent[cat]
            if taken[cat] < len(pool) and (per_category is None or taken[cat] < per_category) and len(chosen) < sample:
                chosen.append(pool[taken[cat]])
                taken[cat] += 1
                moved = True
        if not moved:
            break
    rng.shuffle(identical)
    attention = identical[: max(1, round(len(chosen) * ATTENTION_SHARE))] if identical else []
    return chosen, attention


def _messages(case: Case) -> list[dict[str, str]]:
    """The conversation as role/content text (a completions prompt is one user turn)."""
    if case.messages is None:
        return [{"role": "user", "content": case.prompt or ""}]
    out = []
    for m in case.messages:
        content = m.get("content")
        out.append(
            {"role": str(m.get("role", "")), "content": content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)}
        )
    return out


def _load_key(store: RunStore) -> ReviewKey | None:
    body = store.artifact(REVIEW_KEY_ARTIFACT)
    if body is None:
        return None
    try:
        return ReviewKey.model_validate(body)
    except ValidationError:
        return None


def write_review(store: RunStore, *, sample: int = DEFAULT_SAMPLE, per_category: int | None = None, seed: int = 0) -> tuple[Path, int, int]:
    """Write DIR/review.html and keep its key in the store; returns (path, divergent pairs, attention checks)."""
    for flag, value in (("--sample", sample), ("--per-category", per_category)):
        if value is not None and value < 1:
            raise ConfigError([Problem("command line", None, flag, f"expected a whole number of at least 1, got {value}")])
    key = _load_key(store) or ReviewKey(secret=secrets.token_hex(32), seed=seed)
    # Seeded by the secret too: the page's order cannot be rebuilt from the run's contents and the seed alone.
    rng = random.Random(f"{key.secret}:{seed}")
    chosen, attention = _sample(store, sample, per_category, rng)
    known = {(p.case_id, p.repeat): p for p in key.pairs}
    page: list[KeyPair] = []
    for pick, is_attention in [*((c, False) for c in chosen), *((c, True) for c in attention)]:
        side: Side = rng.choice(("baseline", "candidate"))  # drawn for every pair, so a page written again draws alike
        kp = known.get((pick.case_id, pick.repeat)) or KeyPair(
            id=key.pair_id(pick.case_id, pick.repeat), case_id=pick.case_id, repeat=pick.repeat, a=side, attention=is_attention
        )
        known[(kp.case_id, kp.repeat)] = kp
        page.append(kp)
    rng.shuffle(page)
    key = key.model_copy(update={"pairs": list(known.values())})
    want = {(p.case_id, p.repeat): p for p in page}
    items: dict[tuple[str, int], dict[str, Any]] = {}
    for rec in store.by_case(scores=False):
        for r in rec.responses:
            shown = want.get((rec.case.id, r.repeat))
            if shown is None or r.target not in ("baseline", "candidate") or not r.ok:
                continue
            item = items.setdefault((rec.case.id, r.repeat), {"category": rec.case.category, "messages": _messages(rec.case)})
            item["a" if r.target == shown.a else "b"] = r.answer
    # Every pair object is written with the same keys in the same order: the order in which the store
    # read the sides must not show through (a JSON object's key order is on the page too).
    pairs = [
        {"id": p.id, "category": it["category"], "messages": it["messages"], "a": it["a"], "b": it["b"]}
        for p in page
        if (it := items.get((p.case_id, p.repeat))) is not None and "a" in it and "b" in it
    ]
    store.put_artifact(REVIEW_KEY_ARTIFACT, key.model_dump(mode="json"))
    nonce = secrets.token_urlsafe(18)
    html = (
        _env()
        .get_template("review.html.j2")
        .render(
            nonce=nonce,
            data=json_for_script({"run": key.run, "pairs": pairs}),
            pairs=len(pairs),
            css=_review_asset("review.css"),
            js=_review_asset("review.js"),
        )
    )
    path = store.folder / REVIEW_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(path)
    return path, len(chosen), len(attention)


def _review_asset(name: str) -> Any:
    from markupsafe import Markup

    return Markup(_asset(name))


# ------------------------------------------------------------------ import
_CHOICES: dict[str, str] = {"A": "a", "B": "b", "tie": "tie", "both_wrong": "both_wrong"}


def _unblind(choice: str, a: Side) -> Choice:
    if choice == "A":
        return a
    if choice == "B":
        return "candidate" if a == "baseline" else "baseline"
    return "tie" if choice == "tie" else "both_wrong"


def _read_file(path: str, key: ReviewKey) -> ReviewerLabels:
    """One reviewer's export, checked completely; every problem names the file and field."""
    src = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError([Problem(src, None, "", f"cannot read labels file: {exc.strerror or exc}")]) from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        line = getattr(exc, "lineno", None)
        raise ConfigError([Problem(src, line, "", f"not a JSON labels file: {exc}")]) from None
    if not isinstance(data, dict):
        raise ConfigError([Problem(src, 1, "", "expected a JSON object exported by review.html")])
    problems: list[Problem] = []
    if data.get("format") != LABELS_FORMAT:
        problems.append(
            Problem(src, None, "format", f"expected {LABELS_FORMAT!r} (a file exported by review.html), got {data.get('format')!r}")
        )
    if data.get("run") != key.run:
        problems.append(
            Problem(src, None, "run", f"these labels are for another run ({data.get('run')!r}); this run's review page is {key.run!r}")
        )
    reviewer = data.get("reviewer")
    if not isinstance(reviewer, str) or not reviewer.strip():
        problems.append(Problem(src, None, "reviewer", "required: the reviewer's name"))
    labels = data.get("labels")
    if not isinstance(labels, list):
        problems.append(Problem(src, None, "labels", "expected a list of {pair, choice, note}"))
        labels = []
    by_id = {p.id: p for p in key.pairs}
    out: list[HumanLabel] = []
    seen: set[str] = set()
    for i, lab in enumerate(labels):
        where = f"labels[{i}]"
        if not isinstance(lab, dict):
            problems.append(Problem(src, None, where, "expected an object {pair, choice, note}"))
            continue
        pid, choice, note = lab.get("pair"), lab.get("choice"), lab.get("note", "")
        kp = by_id.get(pid) if isinstance(pid, str) else None
        if kp is None:
            problems.append(Problem(src, None, f"{where}.pair", f"unknown pair id {pid!r}: not on this run's review page"))
            continue
        if pid in seen:
            problems.append(Problem(src, None, f"{where}.pair", f"pair {pid!r} is labelled twice"))
            continue
        seen.add(kp.id)
        if choice not in _CHOICES:
            problems.append(Problem(src, None, f"{where}.choice", f"expected one of {', '.join(_CHOICES)}, got {choice!r}"))
            continue
        if not isinstance(note, str):
            problems.append(Problem(src, None, f"{where}.note", "expected text"))
            continue
        out.append(
            HumanLabel(
                pair_id=kp.id, case_id=kp.case_id, repeat=kp.repeat, attention=kp.attention, choice=_unblind(choice, kp.a), note=note
            )
        )
    if problems:
        raise ConfigError(problems)
    return ReviewerLabels(reviewer=str(reviewer).strip(), source=Path(path).name, sha256=hashlib.sha256(raw).hexdigest(), labels=out)


def import_labels(store: RunStore, paths: Sequence[str]) -> HumanLabels:
    """Un-blind every file and fold them into the run's `human_labels`, all or nothing.

    Every file is checked before the one write; a problem in any of them
    raises `ConfigError` (exit 2) naming the file and field, and the store
    is left as it was. Two files of one reviewer are refused (which one
    would count?); a reviewer imported again replaces their earlier labels.
    """
    key = _load_key(store)
    if key is None:
        raise ConfigError(
            [Problem(str(store.folder), None, "review", "no review page was written for this run: run `qualitycheck review DIR` first")]
        )
    files = [_read_file(p, key) for p in paths]
    names = [f.reviewer for f in files]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError([Problem(", ".join(paths), None, "reviewer", f"several files from the same reviewer: {', '.join(twice)}")])
    merged = (read_human_labels(store.artifact(HUMAN_LABELS_ARTIFACT)) or HumanLabels()).merged(files)
    store.put_artifact(HUMAN_LABELS_ARTIFACT, merged.model_dump(mode="json"))
    return merged
