"""Build the request logs `tests/unit/traffic` replays, from real public prompts with planted PII.

    python scripts/build_replay_fixtures.py            # rewrite tests/fixtures/replay/
    python scripts/build_replay_fixtures.py --check    # exit 1 if the committed files differ

Prompts come from ../shared/data (Spec-Bench questions, Spider questions,
MBPP tasks; sources and licences in tests/fixtures/replay/README.md). Every
kind of PII replay redacts is planted in them, in every log format; the
values are listed in `planted.json`, which the tests search every written
byte for. Deterministic: same data, same bytes. The committed files are what
the tests read (CI may not have ../shared).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "replay"
DATA = ROOT.parent / "shared" / "data"

PLANTED = {
    "email": ["maria.keller@example.com", "J.Smith+orders@shop.example.co.uk", "ops-team@corp.example.net"],
    "phone": ["+44 20 7946 0958", "(555) 201-4477", "030 9018 2044", "+1-415-555-0132"],
    "card": ["4111 1111 1111 1111", "5500-0000-0000-0004", "378282246310005"],
    "iban": ["DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432", "NL91 ABNA 0417 1643 00"],
    "ip": ["192.168.17.42", "2001:db8:85a3::8a2e:370:7334", "10.20.30.40"],
    "secret": [
        "sk-proj-4fGh7JkL9mN2pQ5rS8tV1wX3yZ6aB0cD",
        "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf0EdCbA",
        "ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ12",
        "xoxb-2048-4096-Abc123Def456",
        "AIzaSyD4f8Gh2Jk6Lm0Np4Qr8St2Uv6Wx0Yz123",
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ],
}
P = PLANTED

SQL_SYSTEM = "You translate questions into SQLite queries. Answer with one SQL statement only."
SUPPORT_SYSTEM = "You are the support assistant of an online shop. Be brief and polite."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Find an order by its id and the customer's e-mail",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "email": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "refund",
            "description": "Refund an order to a card or an account",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "iban": {"type": "string"}}},
        },
    },
]
EXTRACT = {
    "type": "json_schema",
    "json_schema": {
        "name": "contact",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "email": {"type": "string"}, "phone": {"type": "string"}},
            "required": ["name", "email"],
            "additionalProperties": False,
        },
    },
}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _data() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    if not DATA.is_dir():
        sys.exit(f"{DATA} not found: the fixtures are built from the shared public data")
    spec = _jsonl(DATA / "specbench" / "question.jsonl")
    spider = _jsonl(DATA / "spider" / "spider_dev_sample.jsonl")
    mbpp = _jsonl(DATA / "mbpp" / "sanitized-mbpp.jsonl")
    return spec, spider, mbpp


def _answer(text: str, tokens: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": "chatcmpl-log", "object": "chat.completion", "model": "shop-assistant"}
    out["choices"] = [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]
    if tokens is not None:
        out["usage"] = {"prompt_tokens": 50, "completion_tokens": tokens, "total_tokens": 50 + tokens}
    return out


def _line(request: Any, response: Any = None, tags: dict[str, Any] | None = None) -> str:
    obj: dict[str, Any] = {"request": request, "response": response}
    if tags is not None:
        obj["tags"] = tags
    return json.dumps(obj, ensure_ascii=False)


def requests_log(spec: list[dict[str, Any]], spider: list[dict[str, Any]], mbpp: list[dict[str, Any]]) -> str:
    """request/response JSONL: every request kind, every PII kind, duplicates and unusable lines."""
    by_cat: dict[str, list[dict[str, Any]]] = {}
    for q in spec:
        by_cat.setdefault(q["category"], []).append(q)
    lines: list[str] = []
    m = "shop-assistant"
    # open questions (qa): Spec-Bench qa, some sampled, some greedy, with PII planted in the question
    for i, q in enumerate(by_cat["qa"][:6]):
        text = q["turns"][0]
        if i == 0:
            text += f" Send the answer to {P['email'][0]} or call {P['phone'][0]}."
        if i == 1:
            text += f" My card {P['card'][0]} was charged twice, my IBAN is {P['iban'][0]}."
        body: dict[str, Any] = {"model": m, "messages": [{"role": "user", "content": text}], "max_tokens": 64}
        if i % 2:
            body["temperature"] = 0
        lines.append(_line(body, _answer("The answer is in the passage.", [8, 40, 300, 1200, 30, 9][i]), {"route": "faq"}))
    # the same question again, whitespace and case changed: a duplicate
    first = json.loads(lines[2])["request"]
    dup = dict(first, messages=[{"role": "user", "content": "  " + first["messages"][0]["content"].upper().replace(" ", "   ") + "\n"}])
    lines.append(_line(dup, None, {"route": "faq"}))
    # support conversations with a system prompt; multi-turn Spec-Bench writing questions; PII across turns
    for i, q in enumerate(by_cat["writing"][:4]):
        t1, t2 = q["turns"]
        if i == 0:
            t1 = f"I am Maria, {P['email'][0]}, phone {P['phone'][1]}. {t1}"
            t2 = f"{t2} Also mail a copy to {P['email'][0]} and cc {P['email'][1]}."
        if i == 1:
            t1 = f"Our gateway is {P['ip'][0]} (v6 {P['ip'][1]}); use key {P['secret'][0]}. {t1}"
        if i == 2:
            t1 = f"{t1} Authorization: Bearer {P['secret'][7]}"
        messages = [
            {"role": "system", "content": SUPPORT_SYSTEM},
            {"role": "user", "content": t1},
            {"role": "assistant", "content": "Here is a first draft."},
            {"role": "user", "content": t2},
        ]
        response = _answer(f"Sure, I will write to {P['email'][0]}." if i == 0 else "Done.", 500)
        lines.append(_line({"model": m, "messages": messages, "temperature": 0.7, "max_tokens": 512}, response, {"route": "support"}))
    # text-to-SQL (Spider questions), greedy, with the SQL system prompt
    for q in spider[:5]:
        messages = [{"role": "system", "content": SQL_SYSTEM}, {"role": "user", "content": q["question"]}]
        body = {"model": m, "messages": messages, "temperature": 0, "max_tokens": 128, "stop": [";"], "seed": 7}
        lines.append(_line(body, _answer(q["query"], 20), {"route": "analytics", "db": q["db_id"]}))
    # code (MBPP) through the completions endpoint: a prompt, not messages
    for q in mbpp[:3]:
        body = {"model": m, "prompt": f"# {q['prompt']}\ndef ", "temperature": 0, "max_tokens": 200}
        lines.append(_line(body, {"choices": [{"index": 0, "text": "solution(x):\n    return x", "finish_reason": "stop"}]}))
    # tool calls: a call to make, and a conversation with a call already made (PII in its arguments)
    order_q = "Where is my order 88231? It has not arrived."
    lines.append(
        _line(
            {"model": m, "messages": [{"role": "user", "content": f"{order_q} My e-mail is {P['email'][2]}."}], "tools": TOOLS},
            {
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": "call_1",
                                    "type": "function",
                                    "function": {
                                        "name": "lookup_order",
                                        "arguments": json.dumps({"order_id": "88231", "email": P["email"][2]}),
                                    },
                                }
                            ],
                        },
                        "finish_reason": "tool_calls",
                    }
                ],
                "usage": {"completion_tokens": 25},
            },
            {"route": "orders"},
        )
    )
    lines.append(
        _line(
            {
                "model": m,
                "tools": TOOLS,
                "tool_choice": "auto",
                "temperature": 0,
                "messages": [
                    {"role": "user", "content": f"Refund order 88231 to {P['iban'][1]}, please. My card {P['card'][1]} is closed."},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_7",
                                "type": "function",
                                "function": {"name": "refund", "arguments": json.dumps({"order_id": "88231", "iban": P["iban"][1]})},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "call_7", "content": json.dumps({"status": "refunded", "iban": P["iban"][1]})},
                ],
            },
            _answer(f"Your refund to {P['iban'][1]} is on its way.", 30),
            {"route": "orders"},
        )
    )
    # extraction to a JSON schema, and JSON mode
    for i, q in enumerate(by_cat["extraction"][:3]):
        text = q["turns"][0]
        contact = f"Contact: Jane Doe, {P['email'][1]}, {P['phone'][3]}." if i == 0 else f"Sender: {P['secret'][5]} / {P['secret'][6]}."
        body = {"model": m, "messages": [{"role": "user", "content": f"{text}\n{contact}"}], "response_format": EXTRACT, "max_tokens": 300}
        if i == 2:
            body["response_format"] = {"type": "json_object"}
            body["messages"][0]["content"] += f" aws_secret_access_key = {P['secret'][6]}"
        lines.append(_line(body, _answer('{"name": "Jane Doe"}', 15), {"route": "extraction"}))
    # secrets pasted into coding questions (Spec-Bench coding), phone numbers and the rest of the kinds
    for i, q in enumerate(by_cat["coding"][:3]):
        extra = [
            f"My keys: {P['secret'][1]}, {P['secret'][2]}, {P['secret'][3]}.",
            f"The config has api_key={P['secret'][4]} and the host {P['ip'][2]}.",
            f"Ping me at {P['phone'][2]}; card on file {P['card'][2]}; IBAN {P['iban'][2]}.",
        ][i]
        lines.append(_line({"model": m, "messages": [{"role": "user", "content": f"{q['turns'][0]}\n{extra}"}]}, None, {"route": "dev"}))
    # lines that cannot be cases: each is counted and reported
    lines.append('{"request": {"model": "shop-assistant", "messages": [{"role": "user", "content": "cut off')
    lines.append(json.dumps(["not", "an", "object"]))
    lines.append(_line({"model": m}))
    lines.append(_line({"model": m, "messages": [{"role": "wizard", "content": f"hello {P['email'][0]}"}]}))
    lines.append(_line({"model": m, "prompt": ["two", "prompts"]}))
    lines.append(_line({"model": m, "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}))
    lines.append("")
    return "\n".join(lines) + "\n"


def batch_logs(spec: list[dict[str, Any]]) -> tuple[str, str]:
    """A Batch API input file and its output file (answers in another order, one failed)."""
    reqs: list[str] = []
    outs: list[str] = []
    humanities = [q for q in spec if q["category"] == "humanities"][:5]
    stem = [q for q in spec if q["category"] == "stem"][:4]
    for i, q in enumerate(humanities + stem):
        cid = f"req-{i:03d}"
        text = q["turns"][0]
        if i == 1:
            text += f" Reply to {P['email'][1]}."
        if i == 2:
            text += f" (ticket from {P['ip'][2]}, callback {P['phone'][0]})"
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}], "max_tokens": 400}
        if i % 3 == 0:
            body["temperature"] = 0
        if i >= 5:
            body["messages"].insert(0, {"role": "system", "content": "You are a careful science tutor."})
        reqs.append(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}, ensure_ascii=False))
        if i == 4:
            outs.append(
                json.dumps({"id": f"batch_req_{i}", "custom_id": cid, "response": None, "error": {"code": "server_error", "message": "x"}})
            )
            continue
        answer = _answer("An answer of some length. " * (1 + 10 * (i % 3)), [12, 90, 700, 30, 0, 200, 1500, 64, 8][i])
        answer["choices"][0]["message"]["content"] += f" Contact {P['email'][1]}." if i == 1 else ""
        outs.append(
            json.dumps(
                {
                    "id": f"batch_req_{i}",
                    "custom_id": cid,
                    "response": {"status_code": 200, "request_id": f"r{i}", "body": answer},
                    "error": None,
                }
            )
        )
    # a custom_id that is itself PII (it is not used as the case id), and two requests replay cannot send
    reqs.append(
        json.dumps(
            {
                "custom_id": P["email"][0],
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": spec[0]["turns"][0]}]},
            }
        )
    )
    reqs.append(
        json.dumps(
            {"custom_id": "req-emb", "method": "POST", "url": "/v1/embeddings", "body": {"model": "text-embedding-3-small", "input": "x"}}
        )
    )
    reqs.append(json.dumps({"custom_id": "req-get", "method": "GET", "url": "/v1/chat/completions", "body": {}}))
    return "\n".join(reqs) + "\n", "\n".join(reversed(outs)) + "\n"


def table(spider: list[dict[str, Any]], mbpp: list[dict[str, Any]]) -> str:
    """A CSV export with its own column names (mapped in rules.yaml)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["request_id", "question", "system_prompt", "answer", "out_tokens", "route_name", "temp"])
    for i, q in enumerate(spider[5:13]):
        text = q["question"]
        if i == 0:
            text += f" (asked by {P['email'][2]}, {P['phone'][1]})"
        if i == 1:
            text += f"\nThe DB password: {P['secret'][2]}"
        if i == 2:
            text += f" Bill card {P['card'][0]}, IBAN {P['iban'][0]}, from {P['ip'][0]}."
        w.writerow([f"row-{i}", text, SQL_SYSTEM if i % 2 else "", q["query"], 10 + 40 * i, "analytics", "0" if i % 3 else ""])
    for i, q in enumerate(mbpp[3:7]):
        w.writerow([f"code-{i}", q["prompt"], "", q["code"], 60, "code", "0.2"])
    w.writerow(["empty-1", "", "", "", "", "analytics", ""])
    return buf.getvalue()


RULES = """\
# Categories for the replay fixtures: first match wins; the defaults (json, tool_call, qa) after these.
rules:
  - match: {route: [analytics]}
    category: sql
  - match: {system_regex: "(?i)sqlite"}
    category: sql
  - match: {route: code}
    category: code
  - match: {prompt_regex: "^# ", has_tools: false}
    category: code
  - match: {route: support, has_tools: false}
    category: support
  - match: {has_tools: true}
    category: tool_call
columns:                      # traffic.csv
  id: request_id
  prompt: question
  system: system_prompt
  response: answer
  completion_tokens: out_tokens
  temperature: temp
  tags.route: route_name
judge: pairwise
"""


def build() -> dict[str, str]:
    spec, spider, mbpp = _data()
    batch_in, batch_out = batch_logs(spec)
    return {
        "requests.jsonl": requests_log(spec, spider, mbpp),
        "batch_input.jsonl": batch_in,
        "batch_output.jsonl": batch_out,
        "traffic.csv": table(spider, mbpp),
        "rules.yaml": RULES,
        "planted.json": json.dumps(PLANTED, indent=2) + "\n",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if tests/fixtures/replay differs from a fresh build")
    a = ap.parse_args()
    files = build()
    if a.check:
        stale = [n for n, text in files.items() if not (OUT / n).is_file() or (OUT / n).read_text(encoding="utf-8") != text]
        if stale:
            print(f"out of date: {', '.join(stale)} (run python scripts/build_replay_fixtures.py)", file=sys.stderr)
            return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (OUT / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(files)} files to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
