"""`qualitycheck import inspect`: logs written by Inspect itself, from evals run on its `mockllm` model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import answer_statuses, need_extra

from .conftest import imported, run_import


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One Inspect eval of the tasks these tests read (an eval per test cost a start-up each); task name → its log.

    mockllm's answers carry their token usage: without it mockllm counts tokens with
    tiktoken, whose encoding is a download this machine cannot make.
    """
    need_extra("inspect_ai", "inspect")
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, GenerateConfig, ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import exact, includes, match
    from inspect_ai.solver import generate, system_message, user_message

    def answer(text: str) -> ModelOutput:
        out = ModelOutput.from_content("mockllm/model", text)
        out.usage = ModelUsage(input_tokens=10, output_tokens=3, total_tokens=13)
        return out

    def two() -> list[Sample]:
        return [
            Sample(input="What is the capital of France?", target="Paris", id="q1", metadata={"topic": "geo"}),
            Sample(input="2+2?", target=["4", "four"], id=2),
        ]

    brief = [system_message("Answer briefly."), generate()]
    shots = [ChatMessageUser(content="1+1?"), ChatMessageAssistant(content="2"), ChatMessageUser(content="2+2?")]
    tasks = [
        Task(name="tiny", dataset=two(), solver=brief, scorer=[includes(), match(location="end", ignore_case=False)], epochs=2,
             config=GenerateConfig(temperature=0.0, max_tokens=64)),
        Task(name="begin", dataset=two(), solver=brief, scorer=match(location="begin")),
        Task(name="exactly", dataset=two(), solver=brief, scorer=match(location="exact")),
        Task(name="unmapped", dataset=two(), solver=brief, scorer=[includes(), exact()]),
        Task(name="twice", dataset=two(), solver=[generate(), user_message("Are you sure?"), generate()], scorer=includes()),
        Task(name="few", dataset=[Sample(input=shots, target="4", id="few")], solver=[generate()], scorer=includes()),
    ]  # fmt: skip
    model = get_model("mockllm/model", custom_outputs=[answer(t) for t in ["It is Paris.", "four", "4"] * 20])
    folder = tmp_path_factory.mktemp("inspect-logs")
    done = eval(tasks, model=model, log_dir=str(folder), display="none")
    assert all(log.status == "success" for log in done), [log.error for log in done]
    return {log.eval.task: Path(log.location) for log in done}


def test_samples_keep_what_the_model_was_sent_and_their_scorers_checks(
    logs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "inspect.jsonl"
    code, stdout, err = run_import(capsys, "inspect", str(logs["tiny"]), "--out", str(out))
    assert code == 0, err
    assert "wrote 2 case(s)" in stdout  # two samples, two epochs each: one case per sample
    cases = imported(out)
    paris = cases["q1"]
    assert paris.category == "tiny" and paris.tags == {"topic": "geo"}
    assert paris.messages == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    assert paris.params == {"temperature": 0.0, "max_tokens": 64}
    # includes(): casefolded containment of any target; match(end, ignore_case=False): the end, punctuation aside
    assert answer_statuses(paris, {"It is Paris.": "", "it is paris": "", "Paris is it": ""}) == {
        "It is Paris.": {"contains": "pass", "regex": "pass"},
        "it is paris": {"contains": "pass", "regex": "fail"},
        "Paris is it": {"contains": "pass", "regex": "fail"},
    }
    assert answer_statuses(cases["2"], {"The answer is four!": ""})["The answer is four!"] == {"contains": "pass", "regex": "pass"}


def test_match_at_the_begin_and_exactly(logs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "inspect.jsonl"
    assert run_import(capsys, "inspect", str(logs["begin"]), "--out", str(out))[0] == 0
    begin = imported(out)["q1"]
    assert answer_statuses(begin, {'  "Paris", of course': "", "In Paris": ""}) == {
        '  "Paris", of course': {"regex": "pass"},
        "In Paris": {"regex": "fail"},
    }
    assert run_import(capsys, "inspect", str(logs["exactly"]), "--out", str(out))[0] == 0
    exactly = imported(out)["q1"]
    assert answer_statuses(exactly, {"paris.": "", "Paris, France": ""}) == {
        "paris.": {"regex": "pass"},
        "Paris, France": {"regex": "fail"},
    }


def test_scorers_without_a_faithful_check_are_refused_once_by_name(
    logs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = logs["unmapped"]
    out = tmp_path / "inspect.jsonl"
    code, _, err = run_import(capsys, "inspect", str(log), "--out", str(out))
    assert code == 2
    assert err.count(f"{log}: eval.scorers[1]: the scorer 'exact' has no qualitycheck check") == 1
    code, _, err = run_import(capsys, "inspect", str(log), "--out", str(out), "--skip-unmapped")
    assert code == 0 and "(skipped)" in err
    assert set(imported(out)["q1"].check_names()) == {"contains"}


def test_a_sample_that_called_the_model_twice_is_refused(logs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = logs["twice"]
    code, _, err = run_import(capsys, "inspect", str(log), "--out", str(tmp_path / "i.jsonl"))
    assert code == 2
    assert f"{log}: samples[id=q1]: the model was called 2 times for this sample" in err


def test_few_shot_assistant_turns_of_the_input_are_part_of_the_request(
    logs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "i.jsonl"
    code, _, err = run_import(capsys, "inspect", str(logs["few"]), "--out", str(out))
    assert code == 0, err
    assert imported(out)["few"].messages == [
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "2+2?"},
    ]


def test_without_the_extra_the_command_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "inspect_ai", None)
    monkeypatch.setitem(sys.modules, "inspect_ai.log", None)
    log = tmp_path / "x.eval"
    log.write_bytes(b"")
    code, _, err = run_import(capsys, "inspect", str(log), "--out", str(tmp_path / "x.jsonl"))
    assert code == 2 and "pip install 'qualitycheck[inspect]'" in err
