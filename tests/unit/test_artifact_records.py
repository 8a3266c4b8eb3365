"""Typed artifacts: a stage stores a record once per run and every reader gets it validated, or a clear error."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._errors import StoreError
from qualitycheck.core._records import (
    ARTIFACT_RECORDS,
    FORMAT_VERSION,
    GpuSample,
    GpuSamples,
    MetricsWindows,
    NoiseFloorRecord,
    PreflightCheckRecord,
    PreflightRecord,
    ShadowPeriod,
    ShadowPeriods,
)
from qualitycheck.core._store import STORE_NAME, RunStore
from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, run_argv, write_suite


def _empty(folder: Path) -> RunStore:
    return RunStore.create(folder, {"suite_fingerprint": "f", "targets": {}, "repeats": 1}, [])


def _set_artifact(folder: Path, name: str, body: object) -> None:
    db = sqlite3.connect(folder / STORE_NAME)
    with db:
        db.execute("INSERT OR REPLACE INTO artifacts VALUES (?,?)", (name, json.dumps(body)))
    db.close()


def test_a_record_reads_back_equal_and_a_run_without_one_reads_none(tmp_path: Path) -> None:
    with _empty(tmp_path) as store:
        assert store.record(NoiseFloorRecord) is None
        store.put_record(NoiseFloorRecord(cases=2, requests=2, of_cases=9))
        assert store.record(NoiseFloorRecord) == NoiseFloorRecord(cases=2, requests=2, of_cases=9)
        assert store.artifact("noise_floor")["format_version"] == FORMAT_VERSION
    assert ARTIFACT_RECORDS["noise_floor"] is NoiseFloorRecord and ARTIFACT_RECORDS["preflight"] is PreflightRecord


def test_a_folder_written_before_the_record_was_typed_still_reads(tmp_path: Path) -> None:
    _empty(tmp_path).close()
    _set_artifact(tmp_path, "noise_floor", {"source": "baseline_again", "cases": 3, "requests": 3, "of_cases": 7})
    with RunStore.open(tmp_path) as store:
        assert store.record(NoiseFloorRecord) == NoiseFloorRecord(cases=3, requests=3, of_cases=7)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"source": "baseline_again", "cases": "many", "requests": 3, "of_cases": 7}, "cases"),
        ({"source": "baseline_again", "cases": -1, "requests": 3, "of_cases": 7}, "cases"),
        ({"source": "guess", "cases": 1, "requests": 1, "of_cases": 1}, "source"),
        ({"cases": 1, "requests": 1}, "of_cases"),
        ([1, 2], "NoiseFloorRecord"),
        ({"source": "baseline_again", "cases": "3", "requests": 3, "of_cases": 7}, "cases"),  # never coerced
        ({"source": "baseline_again", "cases": True, "requests": 3, "of_cases": 7}, "cases"),
        ({"format_version": "9", "cases": 1, "requests": 1, "of_cases": 1}, "format_version"),
        ({"format_version": FORMAT_VERSION + 1, "cases": 1, "requests": 1, "of_cases": 1, "new_field": 1}, "newer qualitycheck"),
    ],
)
def test_a_record_that_does_not_validate_is_a_store_error_naming_folder_artifact_and_field(tmp_path: Path, body: object, says: str) -> None:
    _empty(tmp_path).close()
    _set_artifact(tmp_path, "noise_floor", body)
    with RunStore.open(tmp_path) as store, pytest.raises(StoreError) as err:
        store.record(NoiseFloorRecord)
    assert str(tmp_path) in str(err.value) and "'noise_floor'" in str(err.value) and says in str(err.value)


def test_merged_noise_floors_add_up() -> None:
    parts = [NoiseFloorRecord(cases=1, requests=1, of_cases=4), NoiseFloorRecord(cases=2, requests=3, of_cases=6)]
    assert NoiseFloorRecord.merged(parts) == NoiseFloorRecord(cases=3, requests=4, of_cases=10)


def test_report_of_a_run_with_a_damaged_record_exits_2_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3, checks={"contains": "42"}))
    with TestServer(default="The answer is 42.") as b, TestServer(default="It is 42.") as c:
        assert main(run_argv(b.url, c.url, suite, tmp_path / "run", "--retries", "0", model="m")) in (0, 1)
    with RunStore.open(tmp_path / "run") as store:
        assert store.record(NoiseFloorRecord) == NoiseFloorRecord(cases=3, requests=3, of_cases=3)
    _set_artifact(tmp_path / "run", "noise_floor", {"source": "baseline_again", "cases": "three", "requests": 3, "of_cases": 3})
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "artifact 'noise_floor' is not a valid NoiseFloorRecord" in err and "cases" in err and "Traceback" not in err


def test_the_artifacts_schema_is_published_and_a_stored_record_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from jsonschema import Draft202012Validator

    published = Path(__file__).resolve().parents[2] / "docs" / "schema" / "artifacts.schema.json"
    assert main(["schema", "artifacts"]) == 0
    printed = capsys.readouterr().out
    assert printed == published.read_text(encoding="utf-8"), "run `qualitycheck schema artifacts > docs/schema/artifacts.schema.json`"
    schema = json.loads(printed)
    assert set(schema["properties"]) == set(ARTIFACT_RECORDS)
    with _empty(tmp_path) as store:
        store.put_record(NoiseFloorRecord(cases=1, requests=1, of_cases=2))
        stored = {"noise_floor": store.artifact("noise_floor")}
    assert not list(Draft202012Validator(schema).iter_errors(stored))
    assert list(Draft202012Validator(schema).iter_errors({"noise_floor": {"cases": -1, "requests": 0, "of_cases": 0}}))


def _preflight(ok: bool, tokenize: bool | None) -> PreflightRecord:
    checks = [PreflightCheckRecord(name="served_model", passed=True), PreflightCheckRecord(name="tokenize", passed=tokenize)]
    return PreflightRecord(
        ok=ok, baseline="http://b", candidate="http://c", model="m", checks=checks, mismatches=[] if ok else ["tokenize"]
    )


def test_merged_preflights_keep_the_first_failing_one() -> None:
    passing, failing = _preflight(True, True), _preflight(False, False)
    other = failing.model_copy(update={"baseline": "http://b2"})
    assert PreflightRecord.merged([passing, failing, passing, other]) == failing
    assert PreflightRecord.merged([passing, _preflight(True, None)]) == passing


def test_a_run_stores_its_preflight_typed_and_a_damaged_one_stops_the_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3, checks={"contains": "42"}))
    with TestServer(default="The answer is 42.") as b, TestServer(default="It is 42.") as c:
        assert main(run_argv(b.url, c.url, suite, tmp_path / "run", "--retries", "0", preflight=True)) in (0, 1)
        with RunStore.open(tmp_path / "run") as store:
            pre = store.record(PreflightRecord)
    assert (
        pre is not None
        and pre.baseline.startswith(b.url.removesuffix("/v1"))
        and {c.name for c in pre.checks} >= {"served_model", "tokenize"}
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # summary.json's field as before the record was typed: these keys, in this order, and not the store's format_version
    assert list(summary["preflight"]) == ["ok", "baseline", "candidate", "model", "checks", "mismatches"]
    assert all(list(c) == ["name", "passed", "detail", "baseline", "candidate"] for c in summary["preflight"]["checks"])
    assert summary["preflight"] == pre.model_dump(mode="json", exclude={"format_version", "profiles"})  # the profiles are for later checks
    _set_artifact(tmp_path / "run", "preflight", {**pre.model_dump(mode="json"), "checks": [{"name": "tokenize", "passed": "maybe"}]})
    capsys.readouterr()
    assert main(["gate", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "artifact 'preflight' is not a valid PreflightRecord: checks.0.passed" in err and "Traceback" not in err


def test_a_kind_names_an_unused_artifact_and_says_how_it_merges() -> None:
    from typing import ClassVar

    from qualitycheck.core._records import ArtifactRecord

    with pytest.raises(TypeError, match="already NoiseFloorRecord's"):

        class Twin(ArtifactRecord):
            ARTIFACT: ClassVar[str] = "noise_floor"

            @classmethod
            def merged(cls, parts: object) -> Twin:
                raise AssertionError

    with pytest.raises(TypeError, match="merged"):

        class NoRule(ArtifactRecord):
            ARTIFACT: ClassVar[str] = "a_test_only_artifact"

    assert ARTIFACT_RECORDS["noise_floor"] is NoiseFloorRecord and "a_test_only_artifact" not in ARTIFACT_RECORDS


def _window(category: str, requests: object) -> dict[str, object]:
    snap = {"url": "http://c/metrics", "t": 1.0, "ok": True, "error": None, "spec": None, "generation_tokens": 5.0}
    counts = {"requests": requests, "attempts": 1, "ok": 1, "output_tokens": 5}
    return {"category": category, "before": {"candidate": snap}, "after": {"candidate": snap}, "sent": {"candidate": counts}}


def test_metrics_windows_read_from_a_bare_list_merge_in_folder_order_and_refuse_a_damaged_count(tmp_path: Path) -> None:
    _empty(tmp_path).close()
    _set_artifact(tmp_path, "metrics_windows", [_window("qa", 1), _window("json", 2)])  # as stored before the record was typed
    with RunStore.open(tmp_path) as store:
        one = store.record(MetricsWindows)
    assert one is not None and [(w.category, w.sent["candidate"].requests) for w in one.windows] == [("qa", 1), ("json", 2)]
    two = MetricsWindows(windows=[one.windows[1]])
    assert [w.category for w in MetricsWindows.merged([one, two]).windows] == ["qa", "json", "json"]
    _set_artifact(tmp_path, "metrics_windows", [_window("qa", "1")])
    with RunStore.open(tmp_path) as store, pytest.raises(StoreError, match=r"windows\.0\.sent\.candidate\.requests"):
        store.record(MetricsWindows)


def test_a_list_record_a_run_does_not_have_reads_as_empty_and_one_it_has_as_stored(tmp_path: Path) -> None:
    _empty(tmp_path).close()
    with RunStore.open(tmp_path) as store:
        assert store.record_or_empty(MetricsWindows) == MetricsWindows()
        assert store.record_or_empty(GpuSamples).samples == []
    _set_artifact(tmp_path, "metrics_windows", [_window("qa", 1)])
    with RunStore.open(tmp_path) as store:
        assert [w.category for w in store.record_or_empty(MetricsWindows).windows] == ["qa"]
    _set_artifact(tmp_path, "metrics_windows", [_window("qa", "1")])
    with RunStore.open(tmp_path) as store, pytest.raises(StoreError, match=r"windows\.0\.sent\.candidate\.requests"):
        store.record_or_empty(MetricsWindows)  # damage is an error, never the empty record


def test_gpu_samples_read_from_a_bare_list_merge_in_folder_order_and_refuse_a_damaged_reading(tmp_path: Path) -> None:
    _empty(tmp_path).close()
    kv = {"t": 1.0, "side": "candidate", "kv_cache_usage": 0.5}
    dcgm = {"t": 6.0, "side": "candidate", "gpu_utilization": 80.0, "gpu_memory_used_mib": 20000.0, "gpu_memory_free_mib": 4000.0}
    _set_artifact(tmp_path, "gpu_samples", [kv, dcgm])  # as stored before the record was typed
    with RunStore.open(tmp_path) as store:
        one = store.record(GpuSamples)
    assert one is not None and one.samples == [GpuSample(**kv), GpuSample(**dcgm)]  # type: ignore[arg-type]
    two = GpuSamples(samples=[GpuSample(t=11.0, side="baseline", kv_cache_usage=0.1)])
    assert [x.t for x in GpuSamples.merged([one, two]).samples] == [1.0, 6.0, 11.0]
    _set_artifact(tmp_path, "gpu_samples", [{**kv, "kv_cache_usage": "half"}])
    with RunStore.open(tmp_path) as store, pytest.raises(StoreError, match=r"samples\.0\.kv_cache_usage"):
        store.record(GpuSamples)
    _set_artifact(tmp_path, "gpu_samples", [{**kv, "temperature_c": 60}])  # a reading this version does not know
    with RunStore.open(tmp_path) as store, pytest.raises(StoreError, match=r"samples\.0\.temperature_c"):
        store.record(GpuSamples)


def test_a_damaged_gpu_record_is_a_clear_error_from_the_cli_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(2))
    with TestServer() as b, TestServer() as c:
        assert main(run_argv(b.url, c.url, suite, tmp_path / "run")) == 0
    _set_artifact(tmp_path / "run", "gpu_samples", [{"t": 1.0, "side": "candidate", "kv_cache_usage": "half"}])
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "gpu_samples" in err and "samples.0.kv_cache_usage" in err and "Traceback" not in err


def test_the_stored_config_is_read_validated_and_a_damaged_one_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(2))
    with TestServer() as b, TestServer() as c:
        assert main(run_argv(b.url, c.url, suite, tmp_path / "run", "--seed", "7")) == 0
    with RunStore.open(tmp_path / "run") as store:
        assert store.config().run.seed == 7  # what the judge's figures and the latency's price read
        cfg = store.artifact("config")
    cfg["run"]["seed"] = "seven"
    _set_artifact(tmp_path / "run", "config", cfg)
    capsys.readouterr()
    assert main(["gate", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "artifact 'config' is not a valid config" in err and "run.seed" in err and "Traceback" not in err
    _empty(tmp_path / "bare").close()
    with RunStore.open(tmp_path / "bare") as store:
        assert store.config().run.seed == 0  # a store without a config: the defaults


@pytest.mark.parametrize("field", ["seed", "gpu_hour_usd"])
def test_what_the_summary_reads_of_the_config_comes_validated(tmp_path: Path, field: str) -> None:
    """The judge's seed and the latency's GPU price: a value of the wrong type is the folder's error, not a crash or a default."""
    from qualitycheck.serving._latency import _gpu_hour_usd
    from qualitycheck.verdict._judge_figures import _run_seed

    _empty(tmp_path).close()
    _set_artifact(tmp_path, "config", {"run": {"seed": 11, "gpu_hour_usd": 2.5}})
    with RunStore.open(tmp_path) as store:
        assert (_run_seed(store), _gpu_hour_usd(store)) == (11, 2.5)
    _set_artifact(tmp_path, "config", {"run": {field: "lots"}})
    with RunStore.open(tmp_path) as store:
        for read in (_run_seed, _gpu_hour_usd):
            with pytest.raises(StoreError, match=rf"artifact 'config' is not a valid config: run\.{field}"):
                read(store)


def test_merge_refuses_a_shard_whose_config_is_damaged_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(2))
    with TestServer() as b, TestServer() as c:
        assert main(run_argv(b.url, c.url, suite, tmp_path / "run")) == 0
    with RunStore.open(tmp_path / "run") as store:
        cfg = store.artifact("config")
    cfg["run"]["seed"] = "seven"
    _set_artifact(tmp_path / "run", "config", cfg)
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "run"), "--out", str(tmp_path / "merged")]) == 2
    err = capsys.readouterr().err
    assert "run.seed" in err and "Traceback" not in err and not (tmp_path / "merged" / STORE_NAME).exists()


@pytest.mark.parametrize(
    ("name", "damaged"), [("metrics_windows", [{"category": 3}]), ("gpu_samples", [{"t": "now", "side": "candidate"}])]
)
def test_a_resumed_run_refuses_a_damaged_list_record_before_it_sends_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, damaged: object
) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(2))
    with TestServer() as b, TestServer() as c:
        main(run_argv(b.url, c.url, suite, tmp_path / "run"))
        db = sqlite3.connect(tmp_path / "run" / STORE_NAME)
        with db:
            assert db.execute("DELETE FROM responses WHERE target='candidate'").rowcount == 2  # something left to resume
        db.close()
        _set_artifact(tmp_path / "run", name, damaged)
        sent = len(b.requests("/chat/completions")) + len(c.requests("/chat/completions"))
        capsys.readouterr()
        assert main(run_argv(b.url, c.url, suite, tmp_path / "run")) == 2
        assert len(b.requests("/chat/completions")) + len(c.requests("/chat/completions")) == sent
    err = capsys.readouterr().err
    assert f"artifact {name!r}" in err and "Traceback" not in err


def _period(replica: str, **kw: object) -> ShadowPeriod:
    return ShadowPeriod(replica=replica, listen="127.0.0.1:0", sample=1.0, max_inflight=8, started_at=1.5, **kw)  # type: ignore[arg-type]


def test_a_shadow_folder_written_as_a_bare_list_of_periods_still_reads_and_merged_folders_keep_every_period(tmp_path: Path) -> None:
    _empty(tmp_path).close()
    old = _period("aa", stored=3, closed_because="stopped").model_dump(mode="json")
    old.pop("mode")  # what a proxy stored before the record was typed
    _set_artifact(tmp_path, "shadow", [old])
    with RunStore.open(tmp_path) as store:
        periods = store.record(ShadowPeriods)
    assert periods == ShadowPeriods(periods=[_period("aa", stored=3, closed_because="stopped")])
    merged = ShadowPeriods.merged([periods, ShadowPeriods(periods=[_period("bb", mode="sink"), _period("cc")])])
    assert [(p.replica, p.mode) for p in merged.periods] == [("aa", "proxy"), ("bb", "sink"), ("cc", "proxy")]


def test_a_damaged_shadow_period_is_a_store_error_naming_the_field(tmp_path: Path) -> None:
    _empty(tmp_path).close()
    bad = _period("aa").model_dump(mode="json") | {"stored": "7"}
    _set_artifact(tmp_path, "shadow", {"periods": [bad]})
    with RunStore.open(tmp_path) as store, pytest.raises(StoreError) as err:
        store.record(ShadowPeriods)
    assert "'shadow'" in str(err.value) and "stored" in str(err.value)
