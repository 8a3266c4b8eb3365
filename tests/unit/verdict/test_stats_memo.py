"""The statistics' memo: a summary rebuilt from an unchanged run is the same file and needs neither scipy nor statsmodels."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qualitycheck.core._store import RunStore
from qualitycheck.pipeline._run import summarize
from qualitycheck.verdict._memo import StatsMemo, memo_salt
from qualitycheck.verdict._summary import STATS_MEMO_ARTIFACT
from qualitycheck.verdict._tests import sign_test_p
from tests.unit.verdict.summary_scenarios import SCENARIOS

REPO = Path(__file__).resolve().parents[3]

_REBUILD = """
import json, sys
from qualitycheck.core._config_file import Config
from qualitycheck.core._store import RunStore
from qualitycheck.pipeline._run import summarize
with RunStore.open(sys.argv[1]) as store:
    text = summarize(store, Config.model_validate_json(sys.argv[2])).to_json_text()
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"scipy", "statsmodels", "pandas"})
print(json.dumps({"text": text, "heavy": heavy}))
"""


@pytest.mark.parametrize("name", ["control", "repeats", "serving"])
def test_a_rebuilt_summary_is_the_same_file_without_importing_scipy(name: str, tmp_path: Path) -> None:
    store, cfg = SCENARIOS[name](tmp_path / name)
    with store:
        first = summarize(store, cfg).to_json_text()  # computes the statistics, and keeps what scipy said
        assert store.artifact(STATS_MEMO_ARTIFACT)["entries"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", _REBUILD, str(tmp_path / name), cfg.model_dump_json()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    again = json.loads(out.stdout)
    assert again["text"] == first
    assert again["heavy"] == []


def test_changed_scores_are_computed_afresh_not_read_from_the_memo(tmp_path: Path) -> None:
    store, cfg = SCENARIOS["control"](tmp_path / "run")
    with store:
        summarize(store, cfg)
        flipped = [
            s.model_copy(update={"status": "fail"}) if s.target == "candidate" and s.case_id.startswith("q") else s for s in store.scores()
        ]
        store.replace_scores(flipped)
        with_memo = summarize(store, cfg).to_json_text()
    shutil.copytree(tmp_path / "run", tmp_path / "fresh")
    with RunStore.open(tmp_path / "fresh") as fresh:
        fresh.put_artifact(STATS_MEMO_ARTIFACT, {})
        assert with_memo == summarize(fresh, cfg).to_json_text()
    assert json.loads(with_memo)["categories"]["qa"]["checks"]["exact"]["p_value"] < 0.05  # the flips did change the statistics


def test_the_memo_answers_only_under_its_own_salt() -> None:
    planted = {"sign:[0, 6]": 0.5}
    assert StatsMemo.from_json({"salt": "numpy=0;scipy=0;statsmodels=0;other code", "entries": planted}).entries == {}
    assert StatsMemo.from_json(None).entries == {} and StatsMemo.from_json({"salt": memo_salt()}).entries == {}
    memo = StatsMemo.from_json({"salt": memo_salt(), "entries": planted})
    with memo.active():
        assert sign_test_p(0, 6) == 0.5  # read back, not recomputed
        assert sign_test_p(1, 6) == pytest.approx(0.125)
    assert memo.added == 1 and "sign:[1, 6]" in memo.to_json()["entries"]
    assert sign_test_p(0, 6) == pytest.approx(2 * 0.5**6)  # without an active memo: computed
