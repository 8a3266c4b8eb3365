"""The preflight and sweep commands against scripted servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualitycheck.cli._main import main
from qualitycheck.pipeline._sweep import recommend
from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, write_suite

ANSWER = " ".join(f"w{i}" for i in range(8))


def test_preflight_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3))
    with TestServer() as b, TestServer() as same, TestServer(chat_template="[{role}] {content}\n") as drift:
        assert main(["preflight", "--baseline", b.url, "--candidate", same.url, "--model", "test-model", "--suite", str(suite)]) == 0
        assert main(["preflight", "--baseline", b.url, "--candidate", drift.url, "--model", "test-model", "--suite", str(suite)]) == 1
        out = capsys.readouterr().out
        assert "FAIL tokenize: 3/3 cases tokenize differently" in out and "qa-0" in out
        assert main(["preflight", "--baseline", b.url, "--model", "test-model", "--suite", str(suite)]) == 2
        assert (
            main(["preflight", "--baseline", b.url, "--candidate", "http://127.0.0.1:9", "--model", "test-model", "--suite", str(suite)])
            == 3
        )
    assert "--candidate: required" in capsys.readouterr().err


def test_sweep_over_two_scripted_candidates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3))
    out = tmp_path / "sweep"
    # k=2 streams 3 tokens per 20 ms chunk, k=5 one token per chunk: only k=2 beats the baseline's 20 ms per token
    with (
        TestServer(default=ANSWER, itl_s=0.02) as b,
        TestServer(default=ANSWER, itl_s=0.02, tokens_per_chunk=3, speculative={"k": 2, "acceptance": 0.9}) as k2,
        TestServer(default=ANSWER, itl_s=0.02, speculative={"k": 5, "acceptance": 0.2}) as k5,
    ):
        rc = main(
            [
                "sweep",
                "--baseline",
                b.url,
                "--candidate",
                f"2={k2.url}",
                "--candidate",
                f"5={k5.url}",
                "--model",
                "test-model",
                "--suite",
                str(suite),
                "--concurrency",
                "1,2",
                "--out",
                str(out),
            ]
        )
    assert rc == 0
    result = json.loads((out / "sweep.json").read_text())
    cells = {(c["label"], c["concurrency"]): c for c in result["cells"]}
    assert set(cells) == {(lbl, c) for lbl in ("baseline", "k2", "k5") for c in (1, 2)}
    assert cells[("k2", 1)]["acceptance"]["rate"] == pytest.approx(k2.counters["accepted"] / k2.counters["draft_tokens"])
    assert cells[("k5", 1)]["acceptance"]["rate"] < cells[("k2", 1)]["acceptance"]["rate"]
    assert cells[("baseline", 1)]["acceptance"] is None
    assert cells[("k2", 2)]["identical_rate"] == 1.0 and cells[("k2", 2)]["latency"]["requests"] == 3
    assert cells[("k2", 1)]["tpot_speedup"] > 1.5
    assert result["recommendation"]["recommended"] == "k2" and result["recommendation"]["k"] == "2"
    page = (out / "sweep.html").read_text()
    assert (
        page.count("<svg") == 10
        and "Recommended:</b> k2" in page
        and "http" not in page.split("<body>")[1].replace('xmlns="http://www.w3.org/2000/svg"', "")
    )
    assert "k5" in capsys.readouterr().out


def test_recommendation_and_break_even_concurrency() -> None:
    def cell(label: str, c: int, speedup: float | None, err: float = 0.0) -> dict:
        return {
            "label": label,
            "k": label[1:] if label != "baseline" else None,
            "concurrency": c,
            "latency": {"error_rate": err},
            "tpot_speedup": speedup,
        }

    cells = [cell("baseline", c, None) for c in (1, 8, 32)]
    cells += [cell("k3", 1, 1.6), cell("k3", 8, 1.2), cell("k3", 32, 0.9)]
    cells += [cell("k5", 1, 1.9, err=0.05), cell("k5", 8, 1.3), cell("k5", 32, 0.8)]
    cells += [cell("k1", 1, 1.6), cell("k1", 8, 0.95), cell("k1", 32, 0.7)]
    rec = recommend(cells, [1, 8, 32])
    assert rec["recommended"] == "k1"  # ties with k3 at the lowest level: the smaller k wins; k5 has errors
    assert rec["per_candidate"]["k3"] == {"pays_up_to": 8, "stops_paying_at": 32, "excluded": None, "speedup_at_lowest": 1.6}
    assert rec["per_candidate"]["k5"]["excluded"].startswith("error rate 5.0%")
    assert rec["stops_paying_at"] == 8 and rec["pays_up_to"] == 1
    assert recommend([cell("baseline", 1, None), cell("k2", 1, 0.9)], [1])["recommended"] is None


def test_sweep_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(1))
    base = ["sweep", "--baseline", "http://127.0.0.1:9", "--model", "m", "--suite", str(suite)]
    assert main([*base, "--candidate", "nourl"]) == 2
    assert main([*base, "--candidate", "3=http://x", "--concurrency", "1,zero"]) == 2
    assert main([*base, "--launch", "vllm serve {model} --port {port}", "--k", "1,2"]) == 2
    err = capsys.readouterr().err
    assert "expected K=URL" in err and "--concurrency" in err and "has no {k}" in err


def test_sweep_launches_each_candidate_from_the_template_and_stops_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import qualitycheck.engines._launcher as launcher

    started: list[tuple[str, str]] = []
    live: list[TestServer] = []

    def fake_launch(template: str, *, model: str, name: str, **kw: object) -> TestServer:
        started.append((template, name))
        k = int(template.split("tokens=")[1].split()[0])
        srv = TestServer(default=ANSWER, model=model, tokens_per_chunk=k, speculative={"k": k, "acceptance": 0.5})
        srv.start()
        live.append(srv)
        return srv

    monkeypatch.setattr(launcher, "launch_template", fake_launch)
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(2))
    with TestServer(default=ANSWER) as b:
        rc = main(
            [
                "sweep",
                "--baseline",
                b.url,
                "--model",
                "test-model",
                "--suite",
                str(suite),
                "--concurrency",
                "1",
                "--launch",
                "serve {model} --port {port} tokens={k} --json '{{\"k\":{k}}}'",
                "--k",
                "3,1",
                "--out",
                str(tmp_path / "sw"),
            ]
        )
    assert rc == 0
    assert started == [
        ("serve {model} --port {port} tokens=1 --json '{{\"k\":1}}'", "sweep-k1"),
        ("serve {model} --port {port} tokens=3 --json '{{\"k\":3}}'", "sweep-k3"),
    ]
    assert all(s._loop is not None and not s._thread.is_alive() for s in live)  # type: ignore[union-attr]
    result = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert result["labels"] == ["k1", "k3"]


def test_a_sweep_whose_cells_all_fail_says_why_and_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A template serving another model name used to write error-rate-1.0 cells, 'recommended: none' and exit 0."""
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3))
    out = tmp_path / "sweep"
    with TestServer(default=ANSWER) as b, TestServer(default=ANSWER, model="other", strict_model=True) as k3:
        rc = main(
            [
                "sweep",
                "--baseline",
                b.url,
                "--candidate",
                f"3={k3.url}",
                "--model",
                "test-model",
                "--suite",
                str(suite),
                "--concurrency",
                "1,2",
                "--out",
                str(out),
            ]
        )
    assert rc == 3
    result = json.loads((out / "sweep.json").read_text())
    failed = [c for c in result["cells"] if c["failed"]]
    assert result["failed_cells"] == ["k3@1", "k3@2"] and len(failed) == 2
    kinds = failed[0]["failed"]["error_kinds"]
    assert kinds == [{"kind": "http_404", "count": 3, "message": "HTTP 404: The model `test-model` does not exist."}]
    assert result["recommendation"]["recommended"] is None
    assert result["recommendation"]["per_candidate"]["k3"]["excluded"].startswith("cell failed at concurrency 1")
    captured = capsys.readouterr()
    assert "FAILED k3 at concurrency 1" in captured.out and "http_404 × 3" in captured.out
    assert "2 sweep cell(s) failed: k3@1, k3@2" in captured.err


def test_the_sweep_table_reads_at_80_columns(tmp_path: Path) -> None:
    """CI logs are 80 columns: no header collapses to 'TT…', every metric and level is shown whole."""
    import io

    from rich.console import Console

    from qualitycheck.pipeline._sweep import _TERMINAL_METRICS, print_table

    suite = write_suite(tmp_path / "s.jsonl", qa_cases(2))
    out = tmp_path / "sweep"
    with TestServer(default=ANSWER) as b, TestServer(default=ANSWER, speculative={"k": 3, "acceptance": 0.5}) as k3:
        assert (
            main(
                [
                    "sweep",
                    "--baseline",
                    b.url,
                    "--candidate",
                    f"3={k3.url}",
                    "--model",
                    "test-model",
                    "--suite",
                    str(suite),
                    "--concurrency",
                    "1,2,4,8,16,32,64",
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
    result = json.loads((out / "sweep.json").read_text())
    buf = io.StringIO()
    print_table(result, Console(file=buf, width=80, force_terminal=False, color_system=None))
    text = buf.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text
    for name, _, _ in _TERMINAL_METRICS:
        assert name in text
    for level in ("1", "2", "4", "8", "16", "32", "64"):
        assert any(f" {level} " in line or line.rstrip().endswith(f" {level}") for line in lines if "concurrency" in line)
