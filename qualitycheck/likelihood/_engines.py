"""Asking a server for the log-probabilities of a given answer: vLLM and SGLang, and the servers that cannot.

Scoring an answer is one prefill of the prompt followed by the answer's
tokens, with the log-probability of every token after the prompt read back:

- vLLM: `POST /v1/completions` with the token ids as `prompt`, `max_tokens: 1`
  and `prompt_logprobs: k`. The answer's `choices[0].prompt_logprobs` holds
  one entry per prompt token, the first `null`, each a map token id →
  `{logprob, rank, decoded_token}` with the k most likely tokens and the
  token itself (`vllm/entrypoints/openai/completion/protocol.py`,
  `CompletionResponseChoice.prompt_logprobs`; `vllm/logprobs.py`, `Logprob`).
  Its prompt ids come from `POST /tokenize` (the chat template applied, the
  generation prompt added), an answer's text from `POST /tokenize` with
  `add_special_tokens: false`.
- SGLang: `POST /generate` with `input_ids`, `return_logprob`,
  `logprob_start_len` (one before the answer: SGLang gives the first listed
  position no log-probability) and `sampling_params.max_new_tokens: 0`;
  `meta_info.input_token_logprobs` lists `[logprob, token_id, text]` from
  `logprob_start_len` on, the first with a null logprob, and
  `meta_info.input_top_logprobs` the top `top_logprobs_num` at each position
  (`sglang/srt/managers/scheduler_output_processor_mixin.py`,
  `add_input_logprob_return_values`; `tokenizer_manager.py`,
  `detokenize_logprob_tokens`). SGLang's `/tokenize` takes no messages, so a
  chat prompt's ids come from `/v1/chat/completions` with
  `return_prompt_token_ids: true` (`choices[0].prompt_token_ids`).
- llama-server cannot score a given continuation (its completions refuse
  `echo`; llama.cpp #8942, #15189), and hosted APIs have no `/tokenize`:
  `CannotScore`, which leaves the evidence not evaluated with its reason.

Every request goes through the one HTTP layer (`core._http`), with its
retries and error mapping.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from qualitycheck.core._http import HttpClient, Outcome
from qualitycheck.core._records import ErrorInfo, TokenLogprob

__all__ = ["TOP_KEPT", "CannotScore", "ScoreFailed", "Scored", "Scorer", "TooLong", "detect_scorer", "parse_sglang", "parse_vllm"]

Engine = Literal["vllm", "sglang"]

TOP_KEPT = 5
"""Most likely tokens kept per position in memory (of the top-k asked for): what a divergence lists."""

_MAX_ALLOWED = re.compile(r"max(?:imum)? allowed:? (\d+)")
_TOO_LONG = ("maximum context length", "max_tokens must be at least 1", "context length", "too long")


class CannotScore(Exception):
    """The scorer cannot score a given answer at all (llama-server, a hosted API): the evidence is not evaluated."""


class TooLong(Exception):
    """Prompt and answer do not fit the scorer's context."""


class ScoreFailed(Exception):
    """One request failed after its retries (timeout, 5xx, a malformed answer): the answer is stored as an error."""

    def __init__(self, info: ErrorInfo):
        super().__init__(info.message)
        self.info = info


@dataclass(frozen=True)
class Scored:
    """An answer's tokens under the scorer, position by position, and what the prefill cost."""

    logprobs: list[float]
    ranks: list[int | None]
    """None: below the top-k the scorer listed, and it did not say where (SGLang)."""
    texts: list[str | None]
    top: list[tuple[TokenLogprob, ...]]
    """The scorer's most likely tokens at each position, most likely first (at most `TOP_KEPT`)."""
    prefilled: int

    def token(self, position: int, token_id: int) -> TokenLogprob:
        return TokenLogprob(
            position=position, token_id=token_id, text=self.texts[position], logprob=self.logprobs[position], rank=self.ranks[position]
        )


def parse_vllm(body: Any, prompt_len: int, answer: list[int]) -> Scored:
    """vLLM's `/v1/completions` answer to a scoring request: the answer's positions of `choices[0].prompt_logprobs`."""
    choices = body.get("choices") if isinstance(body, dict) else None
    plp = choices[0].get("prompt_logprobs") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    if not isinstance(plp, list):
        raise CannotScore("the scorer answered without `prompt_logprobs`: it cannot score a given answer")
    if len(plp) != prompt_len + len(answer):
        raise ScoreFailed(_bad(f"prompt_logprobs has {len(plp)} entries for {prompt_len + len(answer)} tokens"))
    out = _Positions()
    for i, token_id in enumerate(answer):
        entry = plp[prompt_len + i]
        if not isinstance(entry, dict):
            raise ScoreFailed(_bad(f"prompt_logprobs[{prompt_len + i}] is not a map of token ids"))
        listed = []
        for key, v in entry.items():
            if not isinstance(v, dict) or not isinstance(v.get("logprob"), (int, float)):
                raise ScoreFailed(_bad(f"prompt_logprobs[{prompt_len + i}][{key!r}] has no logprob"))
            listed.append((int(key), float(v["logprob"]), v.get("rank"), v.get("decoded_token")))
        own = next((x for x in listed if x[0] == token_id), None)
        if own is None:
            raise ScoreFailed(_bad(f"prompt_logprobs[{prompt_len + i}] does not list the answer's own token {token_id}"))
        out.add(i, own[1], own[2] if isinstance(own[2], int) else None, own[3], sorted(listed, key=lambda x: -x[1]))
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    return out.scored(int(usage.get("prompt_tokens") or prompt_len + len(answer)))


def parse_sglang(body: Any, prompt_len: int, answer: list[int]) -> Scored:
    """SGLang's `/generate` answer to a scoring request sent with `logprob_start_len = prompt_len - 1`.

    Entry 0 is the prompt's last token (no log-probability); entry 1 + i the
    answer's token i. SGLang gives no rank: a token in the listed top-k has
    its place there, one below it has none.
    """
    meta = body.get("meta_info") if isinstance(body, dict) else None
    tokens = meta.get("input_token_logprobs") if isinstance(meta, dict) else None
    if not isinstance(tokens, list):
        raise CannotScore("the scorer answered without `meta_info.input_token_logprobs`: it cannot score a given answer")
    assert isinstance(meta, dict)
    tops = meta.get("input_top_logprobs")
    if len(tokens) != len(answer) + 1:
        raise ScoreFailed(_bad(f"input_token_logprobs has {len(tokens)} entries for {len(answer)} answer tokens and 1 of the prompt"))
    out = _Positions()
    for i, token_id in enumerate(answer):
        entry = tokens[1 + i]
        if not (isinstance(entry, list) and len(entry) >= 2 and isinstance(entry[0], (int, float)) and entry[1] == token_id):
            raise ScoreFailed(_bad(f"input_token_logprobs[{1 + i}] is not [logprob, {token_id}, text]: {str(entry)[:80]}"))
        top = tops[1 + i] if isinstance(tops, list) and len(tops) > 1 + i and isinstance(tops[1 + i], list) else []
        listed = [(int(t[1]), float(t[0]), None, t[2] if len(t) > 2 else None) for t in top if isinstance(t, list) and len(t) >= 2]
        listed.sort(key=lambda x: -x[1])
        ranked = [(tid, lp, r + 1, text) for r, (tid, lp, _, text) in enumerate(listed)]
        rank = next((r for tid, _, r, _ in ranked if tid == token_id), None)
        out.add(i, float(entry[0]), rank, entry[2] if len(entry) > 2 else None, ranked)
    return out.scored(int(meta.get("prompt_tokens") or prompt_len + len(answer)))


class _Positions:
    """Builds a `Scored` position by position."""

    def __init__(self) -> None:
        self.logprobs: list[float] = []
        self.ranks: list[int | None] = []
        self.texts: list[str | None] = []
        self.top: list[tuple[TokenLogprob, ...]] = []

    def add(self, i: int, logprob: float, rank: int | None, text: Any, listed: list[tuple[int, float, Any, Any]]) -> None:
        self.logprobs.append(logprob)
        self.ranks.append(rank)
        self.texts.append(text if isinstance(text, str) else None)
        self.top.append(
            tuple(
                TokenLogprob(
                    position=i, token_id=tid, text=t if isinstance(t, str) else None, logprob=lp, rank=r if isinstance(r, int) else None
                )
                for tid, lp, r, t in listed[:TOP_KEPT]
            )
        )

    def scored(self, prefilled: int) -> Scored:
        return Scored(self.logprobs, self.ranks, self.texts, self.top, prefilled)


def _bad(message: str) -> ErrorInfo:
    return ErrorInfo(kind="bad_response", message=f"scorer answer: {message}")


def _ids(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(x, int) for x in value):
        raise ScoreFailed(_bad(f"{what} is not a list of token ids"))
    return value


class Scorer:
    """One scoring server, asked the way its engine understands; built by `detect_scorer`."""

    def __init__(self, http: HttpClient, engine: Engine, model: str, top_k: int, max_model_len: int | None):
        self.http = http
        self.engine: Engine = engine
        self.model = model
        self.top_k = top_k
        self.max_model_len = max_model_len
        self.tokenize_requests = 0
        self._root = http.target.server_url

    def fits(self, prompt_len: int, answer_len: int) -> bool:
        """Whether prompt and answer fit the context: vLLM needs room for the one token it must generate."""
        if self.max_model_len is None:
            return True
        return prompt_len + answer_len + (1 if self.engine == "vllm" else 0) <= self.max_model_len

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        out: Outcome[Any] = await self.http.post_json(self._root + path, body)
        if out.error is not None:
            raise _failure(path, out.error)
        return out.value

    async def prompt_ids(self, tokenize_body: dict[str, Any]) -> list[int]:
        """The ids of a case's prompt as a request renders it (`Case.tokenize_body`)."""
        self.tokenize_requests += 1
        if self.engine == "sglang" and "messages" in tokenize_body:
            chat = {**tokenize_body, "max_tokens": 1, "temperature": 0, "return_prompt_token_ids": True}
            body = await self._post("/v1/chat/completions", chat)
            choices = body.get("choices") if isinstance(body, dict) else None
            first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
            return _ids(first.get("prompt_token_ids"), "choices[0].prompt_token_ids")
        if self.engine == "sglang":
            tokenize_body = {**tokenize_body, "add_special_tokens": True}
        body = await self._post("/tokenize", tokenize_body)
        return _ids(body.get("tokens") if isinstance(body, dict) else None, "/tokenize tokens")

    async def text_ids(self, text: str) -> list[int]:
        """An answer's text tokenized as the model would continue a prompt: no special tokens added."""
        self.tokenize_requests += 1
        body = await self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
        return _ids(body.get("tokens") if isinstance(body, dict) else None, "/tokenize tokens")

    async def score(self, prompt: list[int], answer: list[int], *, top: bool = True) -> Scored:
        """The answer's tokens under the scorer; `top`: with the k most likely tokens at each position too.

        vLLM ranks the answer's own token over the whole vocabulary either
        way, so only a divergence (which lists the baseline model's first
        choices) needs the top-k: without it vLLM builds, detokenizes and
        sends one entry per prompt position instead of k + 1. SGLang ranks a
        token only within its top-k, so it is always asked for them.
        """
        if not prompt:
            raise ScoreFailed(_bad("the prompt has no tokens: its first answer token has no context to be scored in"))
        if self.engine == "sglang":
            body = await self._post(
                "/generate",
                {
                    "input_ids": prompt + answer,
                    "sampling_params": {"max_new_tokens": 0, "temperature": 0},
                    "return_logprob": True,
                    "logprob_start_len": len(prompt) - 1,
                    "top_logprobs_num": self.top_k,
                    "return_text_in_logprobs": True,
                },
            )
            return parse_sglang(body, len(prompt), answer)
        asked = self.top_k if top else 0
        request = {"model": self.model, "prompt": prompt + answer, "max_tokens": 1, "temperature": 0, "prompt_logprobs": asked}
        try:
            body = await self._post("/v1/completions", request)
        except ScoreFailed as exc:
            allowed = _MAX_ALLOWED.search(exc.info.message) if exc.info.status == 400 and "logprobs" in exc.info.message else None
            if allowed is None or not top or int(allowed.group(1)) >= asked:
                raise
            self.top_k = min(self.top_k, max(1, int(allowed.group(1))))  # the server's --max-logprobs: what it allows from now on
            body = await self._post("/v1/completions", {**request, "prompt_logprobs": self.top_k})
        return parse_vllm(body, len(prompt), answer)


def _failure(path: str, info: ErrorInfo) -> Exception:
    """A failed request as the stage reads it: the server cannot score at all, the answer is too long, or one failure."""
    text = info.message.lower()
    if info.status in (404, 405, 501):
        return CannotScore(f"the scorer has no {path} ({info.message}): it cannot score a given answer (a hosted API or a gateway?)")
    if info.status in (400, 413, 422) and any(s in text for s in _TOO_LONG):
        return TooLong(info.message)
    if info.status in (400, 422) and "prompt_logprobs" in text and not _MAX_ALLOWED.search(info.message):
        return CannotScore(f"the scorer refuses prompt_logprobs ({info.message}): it cannot score a given answer")
    return ScoreFailed(info)


def _is_llama_server(props: Any) -> bool:
    return isinstance(props, dict) and "default_generation_settings" in props


async def detect_scorer(http: HttpClient, model: str, top_k: int) -> Scorer:
    """The scorer behind `http`'s target, asked as its engine needs; `CannotScore` for one that cannot score.

    llama-server answers `/props`; SGLang answers `/model_info` (older
    versions `/get_model_info`) with its `model_path`; anything else is asked as vLLM, and a server without
    `/tokenize` or `prompt_logprobs` is found out by its first answers.
    The context length comes from `/v1/models` (both engines list it).
    """
    root = http.target.server_url
    props = await http.get_json(root + "/props")
    if props.error is None and _is_llama_server(props.value):
        raise CannotScore(
            "the scorer is a llama-server, which cannot score a given answer: it returns no log-probabilities of prompt tokens "
            "(its completions refuse `echo`; llama.cpp #8942, #15189). Name a vLLM or SGLang server with the baseline's weights "
            "(--scorer URL)"
        )
    engine: Engine = "vllm"
    for path in ("/model_info", "/get_model_info"):  # SGLang's, the second deprecated in newer versions
        info = await http.get_json(root + path)
        if info.error is None and isinstance(info.value, dict) and "model_path" in info.value:
            engine = "sglang"
            break
    models = await http.get_json(http.target.base_url + "/models")
    if models.error is not None:
        if models.error.status in (404, 405):
            raise CannotScore(f"the scorer has no /v1/models ({models.error.message}): it is not an OpenAI-compatible model server")
        raise ScoreFailed(models.error)
    entries = models.value.get("data") if isinstance(models.value, dict) else None
    found = [m for m in entries or [] if isinstance(m, dict) and m.get("id") == model]
    if entries is not None and not found:
        served = ", ".join(repr(m.get("id")) for m in entries if isinstance(m, dict))
        raise CannotScore(f"the scorer does not serve {model!r} (it serves {served})")
    limit = found[0].get("max_model_len") if found else None
    return Scorer(http, engine, model, top_k, limit if isinstance(limit, int) and limit > 0 else None)
