"""The report's case cap is a user setting: `--report-max-cases` and `run.report_max_cases`."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from qualitycheck.cli._main import main


def _copy(stored_run: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(stored_run[0], out)
    return out


def test_report_flag_caps_the_page_and_the_terminal_says_so(stored_run, tmp_path, capsys):
    out = _copy(stored_run, tmp_path)
    assert main(["report", str(out), "--report-max-cases", "3"]) in (0, 1)
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "embeds 3 of 11 cases" in re.search(r'<p id="not-embedded".*?</p>', html, re.S).group(0)  # type: ignore[union-attr]
    assert "report embeds 3 of 11 cases" in " ".join(capsys.readouterr().err.split())
    assert main(["report", str(out)]) in (0, 1)  # without the flag: the run's own setting (5,000)
    assert "not-embedded" not in (out / "report.html").read_text(encoding="utf-8")


def test_config_setting_is_used_by_a_rebuild(stored_run, tmp_path):
    out = _copy(stored_run, tmp_path)
    cfg = tmp_path / "qc.yaml"
    cfg.write_text(yaml.safe_dump({"run": {"report_max_cases": 2}}), encoding="utf-8")
    assert main(["report", str(out), "-c", str(cfg)]) in (0, 1)  # `gate` re-gates only: it leaves report.html alone
    assert "embeds 2 of 11 cases" in (out / "report.html").read_text(encoding="utf-8")


def test_a_cap_below_one_is_a_clear_error(stored_run, tmp_path, capsys):
    out = _copy(stored_run, tmp_path)
    assert main(["report", str(out), "--report-max-cases", "0"]) == 2
    err = capsys.readouterr().err
    assert "--report-max-cases" in err and "at least 1" in err and "Traceback" not in err


def test_run_refuses_a_cap_below_one_before_sending_anything(tmp_path, capsys):
    rc = main(
        [
            "run",
            "--baseline",
            "http://127.0.0.1:9",
            "--candidate",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--suite",
            "suites",
            "--report-max-cases",
            "0",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "report_max_cases" in err and "greater than or equal to 1" in err
    assert not (tmp_path / "run").exists()
