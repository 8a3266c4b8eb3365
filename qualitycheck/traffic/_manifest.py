"""replay.json as a typed, versioned record: what a replayed suite was made from and what was left out.

Written next to the suite's `.jsonl` files by `qualitycheck replay`, read by
anyone who reviews the suite before it is committed. Its counts add up:
`lines.read = used + skipped + duplicates + not_sampled`. Field names are
only ever added, never renamed; `qualitycheck schema replay` prints the JSON
Schema (docs/schema/replay.schema.json holds the same text).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from qualitycheck.core._errors import StoreError, first_problem

__all__ = [
    "MANIFEST_NAME",
    "REPLAY_FORMAT_VERSION",
    "CategoryCases",
    "LineCounts",
    "ReplayManifest",
    "ReplayOptionsRecord",
    "SkippedLines",
    "SourceRecord",
    "StratumRecord",
    "read_replay_manifest",
    "replay_json_schema",
]

MANIFEST_NAME = "replay.json"
REPLAY_FORMAT_VERSION = 1
MAX_SKIP_REASONS = 100
"""Skipped lines listed one by one; the rest are counted (by reason and in total)."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class SourceRecord(_Record):
    """One file given to replay."""

    path: str
    format: Literal["batch_input", "batch_output", "request_response", "csv", "parquet"]
    compressed: bool = False
    """gzip, recognised by its magic bytes."""
    lines: int = 0
    """Requests read from it (rows of a table; for a Batch API output file, its answer lines)."""
    joined: int | None = None
    """Batch API output only: answers matched to an input line by custom_id."""


class LineCounts(_Record):
    """Every request read ends in exactly one of these: read = used + skipped + duplicates + not_sampled."""

    read: int = 0
    used: int = 0
    """Written as cases."""
    skipped: int = 0
    """Could not be a case (reasons under `skipped`)."""
    duplicates: int = 0
    """Same prompt as an earlier request (after lower-casing and dropping whitespace), in the same category."""
    not_sampled: int = 0
    """Usable and new, but left out by --sample."""


class SkippedLines(_Record):
    count: int = 0
    reasons: list[str] = Field(default_factory=list)
    """The first skipped lines as `file:line: reason` (never quoting the line)."""
    by_reason: dict[str, int] = Field(default_factory=dict)


class StratumRecord(_Record):
    category: str
    output: str
    """Logged answer length: short ≤ 64 tokens, medium ≤ 256, long ≤ 1024, very_long, or unknown (nothing logged)."""
    temperature: str
    """greedy (0), low (≤ 0.7) or high (above, or not given: the API default is 1)."""
    prompt: str
    """Characters of the messages: short ≤ 500, medium ≤ 2000, long ≤ 8000, very_long."""
    system: bool
    """Whether the request has a system (or developer) message."""
    lines: int
    """Usable requests in the stratum (duplicates excluded)."""
    written: int


class CategoryCases(_Record):
    file: str
    cases: int
    checks: dict[str, int] = Field(default_factory=dict)
    """Check family → cases carrying it (`none`: cases without a check)."""


class ReplayOptionsRecord(_Record):
    sample: int | None = None
    seed: int = 0
    rules: str | None = None
    keep_pii: bool = False


class ReplayManifest(_Record):
    """replay.json: the sources, the line counts, the redactions and the strata of one replayed suite."""

    model_config = ConfigDict(title="qualitycheck replay.json")

    format_version: int = REPLAY_FORMAT_VERSION
    sources: list[SourceRecord]
    options: ReplayOptionsRecord
    lines: LineCounts
    skipped: SkippedLines
    redactions: dict[str, int]
    """Values replaced in the written cases, by kind (email, phone, card, iban, ip, secret); all zero with --keep-pii."""
    strata: dict[str, StratumRecord]
    categories: dict[str, CategoryCases]
    cases_without_check: int = 0
    """Written cases no check covers (open-ended requests without a judge in the rules): they can only show divergence."""

    def to_json_text(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"


def read_replay_manifest(path: Path) -> ReplayManifest:
    """Load a replay.json; one that is missing or not a manifest is a StoreError naming the file and field."""
    try:
        return ReplayManifest.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise StoreError(f"{path}: cannot read {MANIFEST_NAME}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        raise StoreError(f"{path}: not a qualitycheck {MANIFEST_NAME}: {first_problem(exc)}") from None


def replay_json_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) every replay.json the tool writes validates against."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **ReplayManifest.model_json_schema()}
