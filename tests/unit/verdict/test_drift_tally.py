"""The digest's drift tally holds exactly what `add_drift` on every row would: the same pairs, in the same order."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

from qualitycheck.core._records import ToolCall
from qualitycheck.scoring._format import format_features
from qualitycheck.verdict._drift import DriftSamples, DriftTally, add_drift

TEXTS = ["42", "The answer is **42**.\n\n- one\n- two\n", '```json\n{"a": 1}\n```', "I'm sorry, I can't.", "", "# T\n1. a\n2) b\n" * 4]


def _features(rng: random.Random) -> dict[str, Any]:
    text = rng.choice(TEXTS)
    if rng.random() < 0.2:  # an answer to a request with tools: four more features
        return format_features(text, "stop", rng.randint(1, 9), [ToolCall(name="f", arguments=rng.choice(['{"a": 1}', "{oops"]))])
    f = format_features(text, rng.choice(["stop", "length"]), rng.choice([None, 3]))
    odd = rng.random()
    if odd < 0.05:
        f["chars"] = math.nan  # NaN is no number: the pair is skipped
    elif odd < 0.1:
        f["lines"] = None
    elif odd < 0.15:
        f["tokens"] = np.float64(2.5)  # a float subclass still counts, as in add_drift
    elif odd < 0.2:
        f["label"] = "prose"  # a feature that is no number at all
    elif odd < 0.25:
        f = dict(reversed(list(f.items())))  # same features, other order
    return f


def _as_lists(samples: dict[str, DriftSamples]) -> dict[str, tuple[list[float], ...]]:
    return {name: (list(d.b), list(d.c), list(d.kb), list(d.k)) for name, d in samples.items()}


def test_the_tally_holds_add_drifts_pairs_in_row_order() -> None:
    rng = random.Random(7)
    for trial in range(30):
        tally, expected = DriftTally(), {}
        for _ in range(rng.randint(0, 60)):
            fb, fc = _features(rng), _features(rng)
            if rng.random() < 0.6:
                fc = dict(fb)  # identical answers: the usual case
            fk = None if rng.random() < 0.5 else (_features(rng) if rng.random() < 0.5 else dict(fb))
            tally.add(fb, fc, fk)
            add_drift(expected, fb, fc, fk)
        got = _as_lists(tally.samples())
        want = _as_lists(expected)
        assert got.keys() == want.keys(), trial
        for name in want:  # NaN never reaches either; compare the floats exactly
            assert got[name] == want[name], (trial, name)
