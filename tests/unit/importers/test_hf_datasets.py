"""`qualitycheck import hf-datasets`: folders written by `datasets`' own save_to_disk, and its own hub cache, read offline."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import answer_statuses, need_extra

from .conftest import imported, run_import


@pytest.fixture
def datasets() -> Any:
    return need_extra("datasets", "datasets")


@pytest.fixture
def saved(datasets: Any, tmp_path: Path) -> Path:
    rows = {
        "qid": ["geo-1", "math-1", "geo-2"],
        "question": ["Capital of France?", "2+2?", "Capital of Italy?"],
        "answer": ["Paris", "4", "Rome"],
        "aliases": [["Paris", "Paris, France"], ["4", "four"], ["Rome"]],
        "topic": ["geo", "math", "geo"],
    }
    chat = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": q}] for q in rows["question"]]
    folder = tmp_path / "qa"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(rows), "test": datasets.Dataset.from_dict({**rows, "chat": chat})}
    ).save_to_disk(str(folder))
    return folder


def test_a_saved_dataset_maps_its_fields_by_flag(capsys: pytest.CaptureFixture[str], saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "hf.jsonl"
    base = ["hf-datasets", str(saved), "--out", str(out), "--prompt-field", "question", "--reference-field", "answer"]
    code, _, err = run_import(capsys, *base)
    assert code == 2 and "--split: choose one of the splits ['test', 'train']" in err
    code, stdout, err = run_import(capsys, *base, "--split", "train", "--id-field", "qid", "--category-field", "topic")
    assert code == 0, err
    assert "wrote 3 case(s)" in stdout and "geo 2, math 1" in stdout
    cases = imported(out)
    assert cases["geo-1"].messages == [{"role": "user", "content": "Capital of France?"}]
    assert cases["geo-1"].checks.exact.expected == "Paris" and cases["math-1"].category == "math"
    assert cases["geo-1"].source is not None and "[train] row 0" in cases["geo-1"].source


def test_chat_prompts_and_lists_of_references(capsys: pytest.CaptureFixture[str], saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "hf.jsonl"
    argv = ["hf-datasets", str(saved), "--split", "test", "--prompt-field", "chat", "--reference-field", "aliases", "--check", "icontains"]
    code, _, err = run_import(capsys, *argv, "--out", str(out), "--category", "qa")
    assert code == 0, err
    cases = imported(out)
    assert sorted(cases) == ["qa-0", "qa-1", "qa-2"]
    four = cases["qa-1"]
    assert four.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert answer_statuses(four, {"It is FOUR.": "", "five": ""}) == {"It is FOUR.": {"contains": "pass"}, "five": {"contains": "fail"}}
    code, _, _ = run_import(
        capsys,
        "hf-datasets",
        str(saved),
        "--split",
        "test",
        "--prompt-field",
        "question",
        "--reference-field",
        "aliases",
        "--out",
        str(out),
    )
    exact_any = imported(out)["qa-0"]
    assert answer_statuses(exact_any, {"Paris, France": "", "Paris is nice": ""}) == {
        "Paris, France": {"regex": "pass"},
        "Paris is nice": {"regex": "fail"},
    }


def test_a_missing_column_or_a_bad_value_is_named(capsys: pytest.CaptureFixture[str], saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "hf.jsonl"
    code, _, err = run_import(capsys, "hf-datasets", str(saved), "--split", "train", "--prompt-field", "prompt", "--out", str(out))
    assert code == 2 and f"{saved}: --prompt-field: no column 'prompt' (columns: aliases, answer, qid, question, topic)" in err
    code, _, err = run_import(capsys, "hf-datasets", str(saved), "--split", "train", "--prompt-field", "aliases", "--out", str(out))
    assert code == 2 and f"{saved}: [0].aliases: expected text or a list of chat messages" in err


def test_a_hub_dataset_is_read_from_the_local_cache_and_the_hub_is_never_asked(
    datasets: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The cache is written by `datasets`' own JSON builder and laid out as a hub download lays it out
    (`<org>___<name>/default/0.0.0/<revision>/<name>-<split>.arrow`); `datasets` was imported online by
    this process, so the import itself must keep the hub unasked."""
    import glob
    import shutil

    from datasets.packaged_modules.json.json import Json

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"q": f"question {i}", "a": str(i)}) + "\n" for i in range(3)), encoding="utf-8")
    build, cache = tmp_path / "build", tmp_path / "cache"
    Json(
        cache_dir=str(build), dataset_name="tiny-qa", config_name="default", hash="0123456789abcdef", data_files={"test": str(data)}
    ).download_and_prepare()
    (cache / "acme___tiny-qa").mkdir(parents=True)
    shutil.move(glob.glob(str(build / "tiny-qa" / "default*"))[0], cache / "acme___tiny-qa" / "default")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    import huggingface_hub

    asked: list[str] = []

    def ask(self: Any, *args: Any, **kwargs: Any) -> None:
        asked.append(str(args[:1]))
        raise OSError("the test has no hub")

    monkeypatch.setattr(huggingface_hub.HfApi, "hf_hub_download", ask)
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", ask)
    out = tmp_path / "hub.jsonl"
    argv = ["--prompt-field", "q", "--reference-field", "a", "--out", str(out)]
    code, _, err = run_import(capsys, "hf-datasets", "acme/tiny-qa", *argv)
    assert code == 0, err
    cases = imported(out)
    assert sorted(cases) == ["tiny-qa-0", "tiny-qa-1", "tiny-qa-2"]
    assert cases["tiny-qa-2"].checks.exact.expected == "2" and cases["tiny-qa-2"].category == "tiny-qa"
    assert datasets.config.HF_HUB_OFFLINE is False  # put back as it was
    code, _, err = run_import(capsys, "hf-datasets", "acme/never-downloaded", *argv)
    assert code == 2
    assert "acme/never-downloaded: not a local folder, and not in the local Hugging Face cache" in err
    assert "the hub is not asked" in err and "Traceback" not in err
    assert asked == []


def test_without_the_extra_the_command_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    code, _, err = run_import(capsys, "hf-datasets", str(tmp_path), "--prompt-field", "q", "--out", str(tmp_path / "x.jsonl"))
    assert code == 2 and "pip install 'qualitycheck[datasets]'" in err
