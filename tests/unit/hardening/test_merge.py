"""Scale-out: shards run separately and merged equal one run of the whole suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._cases import load_suite
from qualitycheck.core._records import NoiseFloorRecord, PreflightRecord
from qualitycheck.core._store import RunStore
from qualitycheck.generation._runner import in_shard
from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, run_argv, write_suite

VOLATILE = {"latency", "created_at", "wall_s", "run_dir", "out", "generated_at", "duration_s"}


def stable(x: Any) -> Any:
    """The summary without timings and folder paths, which differ between any two runs."""
    if isinstance(x, dict):
        return {k: stable(v) for k, v in x.items() if k not in VOLATILE and not k.endswith(("_ms", "_s", "_at"))}
    if isinstance(x, list):
        return [stable(v) for v in x]
    if isinstance(x, str) and "\n" in x:  # rendered text (sign-off): drop its latency lines
        return "\n".join(line for line in x.splitlines() if " ms p50 " not in line)
    return x


def suite(tmp: Path) -> Path:
    cases = qa_cases(12, "qa", checks={"exact": "The answer is 42."}) + qa_cases(9, "support", checks={"contains": ["answer"]})
    return write_suite(tmp / "suite.jsonl", cases)


def run(b: TestServer, c: TestServer, s: Path, out: Path, *extra: str) -> int:
    return main(run_argv(b.url, c.url, s, out, "--retries", "0", *extra, model="m"))


def summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "summary.json").read_text())


@pytest.fixture
def servers():
    cand = {"qa 3?": "It is 41.", "qa 7?": "Unsure.", "support 2?": "no idea"}
    with TestServer(default="The answer is 42.") as b, TestServer(default="The answer is 42.", answers=cand) as c:
        yield b, c


def test_two_shards_merged_equal_one_run(tmp_path: Path, servers: tuple[TestServer, TestServer]) -> None:
    b, c = servers
    s = suite(tmp_path)
    single_code = run(b, c, s, tmp_path / "single")
    codes = [run(b, c, s, tmp_path / f"shard{i}", "--shard", f"{i}/2") for i in (1, 2)]
    sizes = [sum(in_shard(c.id, f"{i}/2") for c in load_suite([s])) for i in (1, 2)]
    assert all(sizes) and sum(sizes) == 21  # both shards hold cases, together all of them
    merged_code = main(["merge", str(tmp_path / "shard1"), str(tmp_path / "shard2"), "--out", str(tmp_path / "merged")])
    assert merged_code == single_code and set(codes) <= {0, 1}
    assert stable(summary(tmp_path / "merged")) == stable(summary(tmp_path / "single"))
    with RunStore.open(tmp_path / "merged") as m, RunStore.open(tmp_path / "single") as one:
        assert [x.id for x in m.cases()] == [x.id for x in one.cases()]
        assert m.count_responses() == one.count_responses()
        assert m.manifest["suite_fingerprint"] == one.manifest["suite_fingerprint"]
    # the merged folder is a complete run: resuming it with the whole suite requests nothing
    before = len(b.requests("/chat/completions"))
    assert run(b, c, s, tmp_path / "merged") == single_code
    assert len(b.requests("/chat/completions")) == before


def test_overlapping_shards_are_refused(tmp_path: Path, servers: tuple[TestServer, TestServer], capsys: pytest.CaptureFixture[str]) -> None:
    b, c = servers
    s = suite(tmp_path)
    run(b, c, s, tmp_path / "a", "--shard", "1/2")
    run(b, c, s, tmp_path / "b", "--shard", "1/3")
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "more than one shard" in err and "split the suite differently" in err
    assert not (tmp_path / "m" / "run.sqlite").exists()


def test_different_targets_are_refused(tmp_path: Path, servers: tuple[TestServer, TestServer], capsys: pytest.CaptureFixture[str]) -> None:
    b, c = servers
    s = suite(tmp_path)
    run(b, c, s, tmp_path / "a", "--shard", "1/2")
    with TestServer(default="The answer is 42.") as other:
        run(b, other, s, tmp_path / "b", "--shard", "2/2")
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")]) == 2
    assert "targets differ" in capsys.readouterr().err


def test_merge_refuses_non_runs_and_existing_outputs(
    tmp_path: Path, servers: tuple[TestServer, TestServer], capsys: pytest.CaptureFixture[str]
) -> None:
    b, c = servers
    s = suite(tmp_path)
    run(b, c, s, tmp_path / "a", "--shard", "1/2")
    (tmp_path / "empty").mkdir()
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "empty"), "--out", str(tmp_path / "m")]) == 2
    assert "not a qualitycheck run folder" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "a"), "--out", str(tmp_path / "a")]) == 2
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(tmp_path / "m2")]) == 2


def test_typed_records_merge_by_their_kind_and_a_damaged_one_refuses_before_the_output_exists(
    tmp_path: Path, servers: tuple[TestServer, TestServer], capsys: pytest.CaptureFixture[str]
) -> None:
    b, c = servers
    s = suite(tmp_path)
    shards = [tmp_path / "shard1", tmp_path / "shard2"]
    for i, folder in enumerate(shards, 1):
        run(b, c, s, folder, "--shard", f"{i}/2")
    floors = []
    preflights = [PreflightRecord(ok=True, baseline=b.url, candidate=c.url, model="m")]
    preflights.append(preflights[0].model_copy(update={"ok": False, "mismatches": ["tokenize"]}))
    for folder, pre in zip(shards, preflights, strict=True):
        with RunStore.open(folder) as st:
            floors.append(st.record(NoiseFloorRecord))
            st.put_artifact("preflight", {**pre.model_dump(mode="json"), "ok": "no"} if not pre.ok else pre.model_dump(mode="json"))
    argv = ["merge", *map(str, shards), "--out", str(tmp_path / "m")]
    capsys.readouterr()
    assert main(argv) == 2
    assert "artifact 'preflight' is not a valid PreflightRecord: ok" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()  # nothing half-built: the same merge runs again once the shard is mended
    with RunStore.open(shards[1]) as st:
        st.put_record(preflights[1])
    assert main(argv) in (0, 1)
    with RunStore.open(tmp_path / "m") as st:
        assert st.record(PreflightRecord) == preflights[1]  # a failing shard's preflight is the merged run's
        present = [f for f in floors if f is not None]
        assert present and st.record(NoiseFloorRecord) == NoiseFloorRecord.merged(present)
    assert summary(tmp_path / "m")["preflight"]["ok"] is False


def test_judged_shards_merge_without_calling_the_judge_again(tmp_path: Path) -> None:
    cases = qa_cases(10, "summaries", checks={"judge": "pairwise"})
    s = write_suite(tmp_path / "judged.jsonl", cases)
    cand = {"summaries 1?": "a better summary", "summaries 6?": "worse"}

    def judge(body: dict[str, Any]) -> str:
        text = "\n".join(m["content"] for m in body["messages"])
        a, _, b = text.partition("reply B")
        if "better" in a and "better" not in b:
            return "Reply A is better. [[A]]"
        if "better" in b:
            return "Reply B is better. [[B]]"
        return "Equal. [[TIE]]"

    with (
        TestServer(default="same summary") as b,
        TestServer(default="same summary", answers=cand) as c,
        TestServer(default=judge, model="J") as j,
    ):
        flags = ["--judge", j.url, "--judge-model", "J"]
        single = run(b, c, s, tmp_path / "single", *flags)
        for i in (1, 2):
            run(b, c, s, tmp_path / f"shard{i}", "--shard", f"{i}/2", *flags)
        calls = len(j.requests("/chat/completions"))
        assert main(["merge", str(tmp_path / "shard1"), str(tmp_path / "shard2"), "--out", str(tmp_path / "merged")]) == single
        assert main(["score", str(tmp_path / "merged")]) == single
        assert len(j.requests("/chat/completions")) == calls  # the merged judge cache answered everything
    merged, one = summary(tmp_path / "merged"), summary(tmp_path / "single")
    assert stable(merged["categories"]) == stable(one["categories"])
    assert merged["categories"]["summaries"]["checks"]["judge"]["skipped_identical"] == 8
