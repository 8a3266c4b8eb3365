"""A third-party check family, found through the `qualitycheck.checks` entry point of its .dist-info.

tests/unit/scoring/test_entry_points.py puts this folder on PYTHONPATH of a
subprocess; importlib.metadata then finds `qc_shout_checks-0.1.dist-info`,
and a case naming `shout` loads this module, whose declaration registers it.
"""

from __future__ import annotations

from collections.abc import Sequence

from qualitycheck.core import Case, Response
from qualitycheck.scoring import CheckSpec, Outcome, Scorer, check_family


class ShoutCheck(CheckSpec):
    min_exclamations: int = 1


class ShoutScorer:
    check = "shout"

    def __init__(self, spec: ShoutCheck):
        self.spec = spec

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        n = answer.text.count("!")
        return Outcome("pass" if n >= self.spec.min_exclamations else "fail", n, {"exclamations": n})


@check_family("shout", spec=ShoutCheck, names=("shout",))
def shout(spec: ShoutCheck, case: Case) -> Sequence[Scorer]:
    return [ShoutScorer(spec)]
