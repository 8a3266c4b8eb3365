"""The paired run on llama.cpp's llama-server: baseline against the same GGUF drafting for itself.

The second real engine: greedy and sampled cases through the real CLI,
acceptance read from llama-server's own `llamacpp:spec_decode_*` counters
(checked against deltas of its /metrics page taken around the run) and
gated, preflight made of what llama-server exposes (`/props`,
`/apply-template` + `/tokenize`), the verdict the engine's measured
behaviour calls for (docs/ENGINE.md), `demo --engine llama.cpp` whole, and
`qualitycheck canary` watching the draft candidate from its own counters.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._store import RunStore
from qualitycheck.generation._metrics import parse_metrics
from tests.e2e.e2e_helpers import (
    MODEL,
    RELAXED_GUARDRAILS,
    SUITES,
    assert_demo_servers_gone,
    assert_no_sampled_loss,
    explain,
    qc,
    summary_of,
    write_config,
)
from tests.e2e.machine import Span
from tests.e2e.test_1e_canary import _watch, open_ended_load

pytestmark = [pytest.mark.e2e, pytest.mark.llama_cpp]

REPO = Path(__file__).resolve().parents[2]

UNTIMED = {k: v for k, v in RELAXED_GUARDRAILS.items() if k != "max_tpot_p95_regression"}
"""Quality, errors and acceptance are gated; speed is not: a draft as large as the target makes the candidate 2-3x
slower here by design, and a loaded machine stretches that much further (speeds are bench/ figures, not test outcomes)."""
GATED = {**UNTIMED, "min_acceptance_rate": 0.5}
"""A model drafting for itself must have most of its greedy drafts accepted."""


def _spec(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        spec = parse_metrics(r.read().decode())["spec"] or {}
    return {k: v for k, v in spec.items() if k != "per_position"}


def _run(
    servers: dict[str, Any], suite: Path, tmp_path: Path, name: str, guardrails: dict[str, Any], concurrency: int = 4, **run: Any
) -> tuple[Any, Path]:
    out = tmp_path / name
    proc = qc(
        "run",
        "-c",
        str(write_config(tmp_path / f"{name}.yaml", guardrails, **run)),
        "--baseline",
        servers["baseline"].url,
        "--candidate",
        servers["draft"].url,
        "--model",
        MODEL,
        "--suite",
        str(suite),
        "--out",
        str(out),
        "--concurrency",
        str(concurrency),
    )
    return proc, out


def _sampled_subset(folder: Path, per_category: int) -> Path:
    """The first cases of each category of the sampled suite (temperature 0.9)."""
    taken: dict[str, int] = {}
    lines = []
    for line in (SUITES / "sampled.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if taken.get(case["category"], 0) < per_category:
            taken[case["category"]] = taken.get(case["category"], 0) + 1
            lines.append(line)
    path = folder / "sampled-subset.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_greedy_pair_on_llama_cpp_reads_and_gates_acceptance_and_preflight(llama_servers: dict[str, Any], tmp_path: Path) -> None:
    before = _spec(llama_servers["draft"].url)
    # one request at a time: with several in flight this engine's greedy answers are not batch-invariant, on the
    # baseline as much as on the candidate (docs/ENGINE.md), and identity below would be a draw, not a property
    proc, out = _run(llama_servers, SUITES / "fp32.jsonl", tmp_path, "greedy", GATED, concurrency=1)
    after = _spec(llama_servers["draft"].url)
    s = summary_of(out)
    assert proc.returncode == 0 and s["verdict"] == "pass", explain(proc)
    # a Q4_1 model drafting for itself, one request at a time: every greedy answer is the baseline's
    assert all(c["identical_rate"] == 1.0 for c in s["categories"].values()), {k: c["identical_rate"] for k, c in s["categories"].items()}

    acc = s["acceptance"]
    assert acc["speculating"] is True and acc["baseline_speculating"] is False, acc
    assert acc["draft_tokens"] == after["draft_tokens"] - before["draft_tokens"] > 0, (acc, before, after)
    assert acc["accepted_tokens"] == after["accepted_tokens"] - before["accepted_tokens"], (acc, before, after)
    assert acc["drafts"] == after["drafts"] - before["drafts"], (acc, before, after)
    # greedy: the model drafting for itself proposes exactly what it then generates
    assert acc["rate"] == 1.0 and acc["mean_accepted_length"] > 2, acc
    assert len(acc["by_position"]) == 3, acc
    rule = next(g for g in s["guardrails"] if g["name"] == "min_acceptance_rate")
    assert rule["passed"] is True and rule["observed"] == pytest.approx(acc["rate"]), rule

    checks = {c["name"]: c for c in s["preflight"]["checks"]}
    assert s["preflight"]["ok"] is True, checks
    assert checks["tokenize"]["passed"] is True, checks["tokenize"]  # through /apply-template + /tokenize, never an empty list
    assert checks["server_props"]["passed"] is True and "chat_template" in checks["server_props"]["detail"], checks["server_props"]
    # what llama-server does not expose is "could not check", never a pass
    assert checks["tokenizer_and_stop_tokens"]["passed"] is None and checks["generation_defaults"]["passed"] is None


def test_sampled_pair_on_llama_cpp_stays_faithful_and_reads_acceptance(llama_servers: dict[str, Any], tmp_path: Path) -> None:
    suite = _sampled_subset(tmp_path, per_category=4)
    proc, out = _run(llama_servers, suite, tmp_path, "sampled", {**UNTIMED, "min_acceptance_rate": 0.05}, max_samples_per_case=4)
    s = summary_of(out)
    assert s["sampling"]["mode"] == "adaptive" and s["sampling"]["mean_samples_per_case"] > 1, s["sampling"]
    assert_no_sampled_loss(s, proc)
    acc = s["acceptance"]
    assert acc["speculating"] is True and acc["draft_tokens"] > 0 and acc["rate"] is not None, acc
    # sampling: the target draws each token itself and keeps a draft token only when it drew the same one
    assert acc["rate"] < 0.99, acc
    # independent samples: the launcher sets no server-wide seed, so the baseline's samples of a case differ
    # (they are its distribution, not a greedy floor: the summary's noise floor leaves them out)
    with RunStore.open(out) as store:
        samples: dict[str, set[str]] = {}
        for r in store.responses():
            if r.target == "baseline" and r.ok:
                samples.setdefault(r.case_id, set()).add(r.text)
    # (a short answer may come out alike in every sample of a case; a server-wide seed makes every case's alike)
    assert any(len(texts) > 1 for texts in samples.values()), {k: len(v) for k, v in samples.items()}

    # the same run gated with an acceptance floor the sampled candidate does not reach fails, naming the rule
    strict = write_config(tmp_path / "strict.yaml", {**UNTIMED, "min_acceptance_rate": 0.99})
    regate = qc("gate", str(out), "-c", str(strict))
    assert regate.returncode == 1 and "min_acceptance_rate" in regate.stderr, explain(regate)
    rule = next(g for g in summary_of(out)["guardrails"] if g["name"] == "min_acceptance_rate")
    assert rule["passed"] is False and rule["observed"] == pytest.approx(acc["rate"]), rule


def test_preflight_on_llama_cpp_names_a_drifted_chat_template(llama_servers: dict[str, Any], tmp_path: Path) -> None:
    from qualitycheck.engines._launcher import launch_llama
    from qualitycheck.engines._model import demo_gguf

    with urllib.request.urlopen(llama_servers["baseline"].url + "/props", timeout=10) as r:
        template = json.loads(r.read())["chat_template"]
    original = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    assert original in template, "the demo model's chat template changed; update this test"
    drifted = tmp_path / "drifted.jinja"
    drifted.write_text(template.replace(original, "You are a terse assistant"), encoding="utf-8")
    with launch_llama(demo_gguf(), served_name=MODEL, name="drifted", core=1, extra_args=("--chat-template-file", str(drifted))) as other:
        proc = qc(
            "preflight",
            "--baseline",
            llama_servers["baseline"].url,
            "--candidate",
            other.url,
            "--model",
            MODEL,
            "--suite",
            str(SUITES / "fp32.jsonl"),
        )
    assert proc.returncode == 1, explain(proc)
    assert "FAIL tokenize" in proc.stdout and "FAIL server_props" in proc.stdout and "chat_template" in proc.stdout, proc.stdout


def test_demo_on_llama_cpp_runs_the_whole_job_and_cleans_up(tmp_path: Path) -> None:
    """`qualitycheck demo --engine llama.cpp` from an unrelated folder: its own two servers, the whole run folder, acceptance
    read from llama-server, judged checks left undecided (it runs without a judge), and both servers gone afterwards.

    The folder holds the repository's suites but the sampled ones (suites/json_sampled.jsonl), so the demo runs its 26
    greedy cases (a folder's own suites/ is what the demo takes, `pipeline._demo.default_suites`): the sampled path on
    llama-server is `test_sampled_pair_on_llama_cpp_stays_faithful_and_reads_acceptance`'s, and here its rounds cost
    most of the demo's time on one thread per server without a finding of their own. test_5_demo runs the whole
    demo suite on vLLM.
    """
    shutil.copytree(REPO / "suites", tmp_path / "suites", ignore=shutil.ignore_patterns("json_sampled.jsonl"))
    out = tmp_path / "demo"
    proc = qc("demo", "--engine", "llama.cpp", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, explain(proc)
    assert f"report: {out / 'report.html'}" in proc.stderr and "no judge on llama.cpp" in proc.stderr, proc.stderr[-3000:]
    for name in ("summary.json", "report.html", "signoff.md", "run.sqlite", "demo-suite.jsonl"):
        assert (out / name).is_file(), name
    s = summary_of(out)
    assert s["verdict"] in ("pass", "fail", "inconclusive") and s["cases"] >= 10
    assert s["preflight"]["ok"] is True
    assert s["acceptance"]["draft_tokens"] and s["acceptance"]["rate"] is not None, s["acceptance"]
    rule = next(g for g in s["guardrails"] if g["name"] == "min_acceptance_rate")
    assert rule["observed"] == pytest.approx(s["acceptance"]["rate"]), rule
    judged = {cat: c["checks"]["judge"] for cat, c in s["categories"].items() if "judge" in c["checks"]}
    assert judged, "the demo suite has judge checks"
    for cat, j in judged.items():  # no judge: nothing decided, so nothing counted as a pass
        assert j["n"] == 0 and j["baseline_pass_rate"] is None and j["candidate_pass_rate"] is None, (cat, j)
    assert_demo_servers_gone(out, "llama")


def test_a_llama_server_candidate_is_watched_from_its_own_counters(llama_servers: dict[str, Any], tmp_path: Path, machine: Span) -> None:
    """llama-server's draft-model candidate (the demo GGUF drafting for itself): acceptance read from its
    `llamacpp:spec_decode_*` counters window by window, above the minimum, so nothing trips."""
    cand = llama_servers["draft"]

    def three_evaluated_or_unread(recs: list[dict[str, Any]]) -> bool:
        unread = any("exposes no speculative-decoding metrics" in (g["result"]["message"] or "") for r in recs for g in r["guardrails"])
        return unread or sum(1 for r in recs if r["guardrails"] and r["guardrails"][0]["result"]["passed"] is not None) >= 3

    with open_ended_load(cand.url) as sent:
        code, recs, ran, err = _watch(
            tmp_path, machine, cand.url + "/metrics", 0.55, three_evaluated_or_unread, limit_s=180, min_drafts=20, window="10s"
        )
    seen = [(g["result"]["observed"], g["result"]["message"], g["evidence"]) for r in recs for g in r["guardrails"]]
    evaluated = [r for r in recs if r["guardrails"][0]["result"]["passed"] is not None]
    assert len(evaluated) >= 3, f"windows (acceptance, message, evidence): {seen}; sent {sent}\n{err[-3000:]}\n{machine.describe()}"
    for r in evaluated:
        g = r["guardrails"][0]
        assert r["sources"][0]["engine"] == "llamacpp", r["sources"]
        assert g["result"]["passed"] is True and 0.55 <= g["result"]["observed"] <= 1.0, seen
    assert not any(r["tripped_now"] for r in recs) and ran == []
    assert code == 0, err[-3000:] + "\n" + machine.describe()
