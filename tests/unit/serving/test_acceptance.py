"""Acceptance from scripted /metrics counters: deltas, per position, other traffic, missing metrics."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from qualitycheck.core._config import HttpPolicy, Target
from qualitycheck.core._records import MetricsSnapshot, Response, SpecCounters, Usage
from qualitycheck.generation import SentTally, parse_metrics, scrape, scrape_all, window
from qualitycheck.serving import acceptance_from_windows, acceptance_rates
from qualitycheck.testserver import TestServer

VLLM_PAGE = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 50.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 999.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 450.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 300.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 140.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 100.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 60.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 750.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 7.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 3.0
"""


def test_parse_sums_engines_and_keeps_only_the_model():
    p = parse_metrics(VLLM_PAGE, "m")
    assert p["spec"]["drafts"] == 150.0
    assert p["spec"]["draft_tokens"] == 450.0
    assert p["spec"]["per_position"] == {"0": 140.0, "1": 100.0, "2": 60.0}
    assert p["generation_tokens"] == 750.0 and p["requests_finished"] == 10.0


def test_parse_plain_server_has_no_spec():
    assert parse_metrics("# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 5.0\n")["spec"] is None


def _snap(drafts: float, draft_tokens: float, accepted: float, per_pos: dict[str, float], gen: float, fin: float) -> MetricsSnapshot:
    spec = SpecCounters(drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted, per_position=per_pos)
    return MetricsSnapshot(url="http://s/metrics", t=0.0, ok=True, spec=spec, generation_tokens=gen, requests_finished=fin)


def _plain(gen: float, fin: float) -> MetricsSnapshot:
    return MetricsSnapshot(url="http://s/metrics", t=0.0, ok=True, generation_tokens=gen, requests_finished=fin)


def _tally(n: int, tokens_each: int) -> SentTally:
    t = SentTally()
    for side in ("baseline", "candidate"):
        for i in range(n):
            t(Response(case_id=f"c{i}", target=side, fingerprint="f", usage=Usage(completion_tokens=tokens_each)))
    return t


def test_rates_from_scripted_deltas():
    before = {"baseline": _plain(0, 0), "candidate": _snap(10, 30, 20, {"0": 9, "1": 7, "2": 4}, 100, 2)}
    after = {"baseline": _plain(40, 4), "candidate": _snap(30, 90, 60, {"0": 27, "1": 21, "2": 12}, 140, 6)}
    a = acceptance_from_windows([window(before, after, _tally(4, 10))])
    assert a["draft_tokens"] == 60 and a["accepted_tokens"] == 40 and a["drafts"] == 20
    assert a["rate"] == pytest.approx(40 / 60)
    assert a["mean_accepted_length"] == pytest.approx(1 + 40 / 20)
    assert a["by_position"] == pytest.approx([18 / 20, 14 / 20, 8 / 20])
    assert a["speculating"] is True and a["baseline_speculating"] is False
    assert a["warnings"] == []


def test_other_traffic_and_speculating_baseline_are_reported():
    before = {"baseline": _snap(0, 0, 0, {}, 0, 0), "candidate": _snap(0, 0, 0, {}, 0, 0)}
    after = {"baseline": _snap(5, 15, 10, {"0": 5}, 40, 4), "candidate": _snap(20, 60, 40, {"0": 20}, 90, 9)}
    a = acceptance_from_windows([window(before, after, _tally(4, 10))])
    assert a["baseline_speculating"] is True
    assert any("other traffic" in w and "finished 9 requests" in w for w in a["warnings"])
    assert any("baseline is speculating" in w for w in a["warnings"])


def test_missing_metrics_gives_none_and_a_warning():
    bad = MetricsSnapshot(url="http://s/metrics", t=0.0, ok=False, error="HTTP 404")
    a = acceptance_from_windows(
        [window({"baseline": _plain(0, 0), "candidate": bad}, {"baseline": _plain(0, 0), "candidate": bad}, _tally(2, 5))]
    )
    assert a["rate"] is None and a["mean_accepted_length"] is None and a["draft_tokens"] is None
    assert any("/metrics unavailable (HTTP 404)" in w for w in a["warnings"])


def test_per_category_windows_and_resume_windows_without_requests():
    w1 = window({"candidate": _snap(0, 0, 0, {}, 0, 0)}, {"candidate": _snap(10, 30, 30, {"0": 10}, 40, 4)}, _tally(4, 10), "json")
    w2 = window(
        {"candidate": _snap(10, 30, 30, {"0": 10}, 40, 4)}, {"candidate": _snap(20, 60, 30, {"0": 10}, 80, 8)}, _tally(4, 10), "sql"
    )
    idle = window({"candidate": _snap(20, 60, 30, {}, 80, 8)}, {"candidate": _snap(20, 60, 30, {}, 80, 8)}, SentTally())
    a = acceptance_from_windows([w1, w2, idle])
    assert a["rate"] == pytest.approx(0.5)
    assert a["by_category"]["json"]["rate"] == pytest.approx(1.0)
    assert a["by_category"]["sql"]["rate"] == pytest.approx(0.0)
    assert a["by_category"]["sql"]["mean_accepted_length"] == pytest.approx(1.0)


def test_counter_reset_is_not_a_negative_rate():
    a = acceptance_from_windows(
        [window({"candidate": _snap(50, 150, 100, {}, 0, 0)}, {"candidate": _snap(5, 15, 10, {}, 0, 0)}, _tally(1, 1))]
    )
    assert a["rate"] is None and any("went down" in w for w in a["warnings"])


def test_scrapes_of_test_servers_around_traffic():
    with TestServer(model="m") as b, TestServer(model="m", speculative={"k": 3, "acceptance": 0.7}) as c:
        targets = {"baseline": Target(url=b.url + "/v1", model="m"), "candidate": Target(url=c.url, model="m")}
        before = asyncio.run(scrape_all(targets))
        tally = SentTally()
        for srv, side in ((b, "baseline"), (c, "candidate")):
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
            req = urllib.request.Request(srv.url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as r:
                n = json.loads(r.read())["usage"]["completion_tokens"]
            tally(Response(case_id="x", target=side, fingerprint="f", usage=Usage(completion_tokens=n)))
        after = asyncio.run(scrape_all(targets))
        expected = dict(c.counters)
    a = acceptance_from_windows([window(before, after, tally)])
    assert a["draft_tokens"] == expected["draft_tokens"] and a["accepted_tokens"] == expected["accepted"]
    assert a["rate"] == pytest.approx(expected["accepted"] / expected["draft_tokens"])
    assert a["speculating"] and not a["baseline_speculating"] and a["warnings"] == []


def test_scrape_of_a_dead_server_records_the_error():
    s = asyncio.run(scrape(Target(url="http://127.0.0.1:9", model="m"), http=HttpPolicy(timeout_s=1, retries=3, backoff_s=0.5)))
    assert s.ok is False and s.error is not None and "Connect" in s.error


LLAMA_PAGE = """# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 90
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 15
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 12
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 5
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 5
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 4
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 3
"""
"""llama-server's --metrics page as this llama.cpp writes it (tools/server/server-task.cpp)."""


def test_llama_server_counters_read_as_vllms():
    p = parse_metrics(LLAMA_PAGE, "smol")
    assert p["spec"] == {"drafts": 5, "draft_tokens": 15, "accepted_tokens": 12, "per_position": {"0": 5, "1": 4, "2": 3}}
    assert p["generation_tokens"] == 90 and "requests_finished" not in p
    assert acceptance_rates(5, 15, 12, p["spec"]["per_position"])["by_position"] == [1.0, 0.8, 0.6]
