"""`qualitycheck import inspect`: logs written by Inspect itself, from evals run on its `mockllm` model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import answer_statuses, need_extra

from .conftest import imported, run_import


@pytest.fixture
def inspect_ai() -> Any:
    return need_extra("inspect_ai", "inspect")


def _eval_log(
    tmp_path: Path, scorers: list[Any], solver: list[Any] | None = None, dataset: list[Any] | None = None, **eval_args: Any
) -> Path:
    """Run a two-sample task on mockllm and return the log Inspect wrote.

    mockllm's answers carry their token usage: without it mockllm counts tokens with
    tiktoken, whose encoding is a download this machine cannot make.
    """
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.solver import generate, system_message

    def answer(text: str) -> ModelOutput:
        out = ModelOutput.from_content("mockllm/model", text)
        out.usage = ModelUsage(input_tokens=10, output_tokens=3, total_tokens=13)
        return out

    model = get_model("mockllm/model", custom_outputs=[answer(t) for t in ["It is Paris.", "four", "It is Paris.", "4"] * 2])
    task = Task(
        dataset=dataset
        or [
            Sample(input="What is the capital of France?", target="Paris", id="q1", metadata={"topic": "geo"}),
            Sample(input="2+2?", target=["4", "four"], id=2),
        ],
        solver=solver or [system_message("Answer briefly."), generate()],
        scorer=scorers,
        name="tiny",
    )
    (log,) = eval(task, model=model, log_dir=str(tmp_path / "logs"), display="none", **eval_args)
    assert log.status == "success", log.error
    return Path(log.location)


def test_samples_keep_what_the_model_was_sent_and_their_scorers_checks(
    inspect_ai: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from inspect_ai.scorer import includes, match

    log = _eval_log(tmp_path, [includes(), match(location="end", ignore_case=False)], temperature=0.0, max_tokens=64, epochs=2)
    out = tmp_path / "inspect.jsonl"
    code, stdout, err = run_import(capsys, "inspect", str(log), "--out", str(out))
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


def test_match_at_the_begin_and_exactly(inspect_ai: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from inspect_ai.scorer import match

    out = tmp_path / "inspect.jsonl"
    assert run_import(capsys, "inspect", str(_eval_log(tmp_path / "b", [match(location="begin")])), "--out", str(out))[0] == 0
    begin = imported(out)["q1"]
    assert answer_statuses(begin, {'  "Paris", of course': "", "In Paris": ""}) == {
        '  "Paris", of course': {"regex": "pass"},
        "In Paris": {"regex": "fail"},
    }
    assert run_import(capsys, "inspect", str(_eval_log(tmp_path / "e", [match(location="exact")])), "--out", str(out))[0] == 0
    exact = imported(out)["q1"]
    assert answer_statuses(exact, {"paris.": "", "Paris, France": ""}) == {"paris.": {"regex": "pass"}, "Paris, France": {"regex": "fail"}}


def test_scorers_without_a_faithful_check_are_refused_once_by_name(
    inspect_ai: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from inspect_ai.scorer import exact, includes

    log = _eval_log(tmp_path, [includes(), exact()])
    out = tmp_path / "inspect.jsonl"
    code, _, err = run_import(capsys, "inspect", str(log), "--out", str(out))
    assert code == 2
    assert err.count(f"{log}: eval.scorers[1]: the scorer 'exact' has no qualitycheck check") == 1
    code, _, err = run_import(capsys, "inspect", str(log), "--out", str(out), "--skip-unmapped")
    assert code == 0 and "(skipped)" in err
    assert set(imported(out)["q1"].check_names()) == {"contains"}


def test_a_sample_that_called_the_model_twice_is_refused(inspect_ai: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate, user_message

    log = _eval_log(tmp_path, [includes()], solver=[generate(), user_message("Are you sure?"), generate()])
    code, _, err = run_import(capsys, "inspect", str(log), "--out", str(tmp_path / "i.jsonl"))
    assert code == 2
    assert f"{log}: samples[id=q1]: the model was called 2 times for this sample" in err


def test_few_shot_assistant_turns_of_the_input_are_part_of_the_request(
    inspect_ai: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate

    shots = [ChatMessageUser(content="1+1?"), ChatMessageAssistant(content="2"), ChatMessageUser(content="2+2?")]
    log = _eval_log(tmp_path, [includes()], solver=[generate()], dataset=[Sample(input=shots, target="4", id="few")])
    out = tmp_path / "i.jsonl"
    code, _, err = run_import(capsys, "inspect", str(log), "--out", str(out))
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
