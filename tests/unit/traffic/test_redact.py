"""PII redaction: every kind found and replaced by a typed placeholder, consistently within a conversation."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qualitycheck.traffic._redact import KINDS, Redactor, iban_ok, luhn_ok

R = Redactor()

FOUND = [
    ("email", "write to maria.keller@example.com today"),
    ("email", "cc J.Smith+orders@shop.example.co.uk, thanks"),
    ("phone", "call +44 20 7946 0958 now"),
    ("phone", "call (555) 201-4477 now"),
    ("phone", "call 555-201-4477 now"),
    ("phone", "call 555.201.4477 now"),
    ("phone", "ruf 030 9018 2044 an"),
    ("phone", "appelez le 06 12 34 56 78"),
    ("phone", "dial +1-415-555-0132."),
    ("card", "card 4111 1111 1111 1111 please"),
    ("card", "card 5500-0000-0000-0004 please"),
    ("card", "amex 378282246310005 please"),
    ("iban", "IBAN DE89 3704 0044 0532 0130 00."),
    ("iban", "IBAN GB82WEST12345698765432."),
    ("iban", "IBAN NL91 ABNA 0417 1643 00."),
    ("ip", "host 192.168.17.42."),
    ("ip", "host 2001:db8:85a3::8a2e:370:7334 is down"),
    ("ip", "host fe80::1ff:fe23:4567:890a is down"),
    ("secret", "key sk-proj-4fGh7JkL9mN2pQ5rS8tV1wX3yZ6aB0cD here"),
    ("secret", "key sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf0EdCbA here"),
    ("secret", "token ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ12 here"),
    ("secret", "slack xoxb-2048-4096-Abc123Def456 here"),
    ("secret", "google AIzaSyD4f8Gh2Jk6Lm0Np4Qr8St2Uv6Wx0Yz123 here"),
    ("secret", "aws AKIAIOSFODNN7EXAMPLE here"),
    ("secret", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("secret", "Authorization: Bearer abcdef0123456789abcdef.xyz"),
    ("secret", 'config: api_key="zzzz9999yyyy"'),
    ("secret", "the password: hunter2hunter2"),
    ("secret", "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
]


@pytest.mark.parametrize(("kind", "text"), FOUND)
def test_each_kind_becomes_a_typed_placeholder(kind: str, text: str) -> None:
    conv = R.conversation()
    out = conv.text(text)
    assert f"<{kind.upper()}_1>" in out, out
    assert conv.counts == {kind: 1}
    # the words around the value stay
    assert out.split()[0] == text.split()[0]


KEPT = [
    "Compute 1234567 * 89 and 2024-01-05.",  # arithmetic and dates are not phone numbers
    "card 4111 1111 1111 1112 fails the Luhn check",
    "IBAN DE00370400440532013000 fails mod-97",
    "use std::vector and meet at 12:30:45",
    "the task-management-system is risk-free; pi is 3.14159",
    "version 1.2.3 and the ratio 10:1",
    "sk-learn is not a key, nor is ghp_short",
    "a@b",
]


@pytest.mark.parametrize("text", KEPT)
def test_what_only_looks_like_a_value_is_kept(text: str) -> None:
    conv = R.conversation()
    assert conv.text(text) == text and conv.counts == {}


def test_luhn_and_mod97() -> None:
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112") and not luhn_ok("0000000000000")
    assert iban_ok("DE89370400440532013000") and iban_ok("GB82WEST12345698765432") and not iban_ok("DE89370400440532013001")


def test_a_value_running_into_more_digits_is_still_cut_at_its_groups() -> None:
    out = R.text("charged on 4111 1111 1111 1111 2024 twice")
    assert out == "charged on <CARD_1> 2024 twice"


def test_the_same_value_gets_the_same_placeholder_across_a_conversation() -> None:
    conv = R.conversation()
    request = {
        "messages": [
            {"role": "user", "content": "I am maria.keller@example.com, card 4111 1111 1111 1111."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"function": {"name": "lookup", "arguments": json.dumps({"email": "MARIA.KELLER@example.com"})}}],
            },
            {"role": "user", "content": "Also bob@example.org and again maria.keller@example.com; the card was 4111-1111-1111-1111."},
        ],
        "reference": "Sent to maria.keller@example.com",
    }
    out = conv.value(request)
    text = json.dumps(out)
    assert "example.com" not in text and "4111" not in text and "example.org" not in text
    assert out["messages"][0]["content"] == "I am <EMAIL_1>, card <CARD_1>."
    assert json.loads(out["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {"email": "<EMAIL_1>"}
    assert out["messages"][2]["content"] == "Also <EMAIL_2> and again <EMAIL_1>; the card was <CARD_1>."
    assert out["reference"] == "Sent to <EMAIL_1>"
    assert conv.counts == {"email": 5, "card": 2}
    assert request["messages"][0]["content"].startswith("I am maria")  # the input is not changed in place


def test_a_value_found_in_context_is_replaced_where_it_stands_alone() -> None:
    conv = R.conversation()
    out = conv.value(
        ["Sender: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]
    )
    assert out == ["Sender: <SECRET_1>", "aws_secret_access_key = <SECRET_1>"]


def test_an_aws_secret_key_next_to_its_key_id_is_found_without_a_label() -> None:
    out = R.text("keys AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY ok")
    assert out == "keys <SECRET_1> / <SECRET_2> ok"


@pytest.mark.parametrize(("kind", "text"), FOUND)
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_the_raw_bytes_hint_never_hides_a_value(kind: str, text: str, ensure_ascii: bool) -> None:
    body = {"messages": [{"role": "user", "content": text + " — déjà vu"}], "usage": {"completion_tokens": 3}}
    raw = json.dumps(body, ensure_ascii=ensure_ascii).encode()
    assert R.conversation(raw).value(body) == R.conversation().value(body)


def test_an_ascii_character_escaped_in_the_raw_bytes_turns_the_hint_off() -> None:
    body = {"content": "mail maria.keller@example.com"}
    raw = b'{"content": "mail maria.keller\\u0040example.com"}'  # what an odd encoder may log
    assert R.conversation(raw).value(body) == {"content": "mail <EMAIL_1>"}


def test_only_the_kinds_asked_for() -> None:
    out = Redactor(kinds=("email",)).text("maria.keller@example.com, +44 20 7946 0958")
    assert out == "<EMAIL_1>, +44 20 7946 0958"
    with pytest.raises(ValueError, match="unknown kinds"):
        Redactor(kinds=("passport",))
    assert set(KINDS) == {"email", "phone", "card", "iban", "ip", "secret"}


def test_inline_images_are_not_scanned() -> None:
    url = "data:image/png;base64," + "QUJD" * 50 + "sk-proj-4fGh7JkL9mN2pQ5rS8tV1wX3yZ6aB0cD"
    assert R.text(url) == url


def test_redactors_pickle_for_worker_processes() -> None:
    import pickle

    r = pickle.loads(pickle.dumps(Redactor(kinds=("email", "card"))))
    assert r.text("a maria.keller@example.com 4111 1111 1111 1111 +44 20 7946 0958") == "a <EMAIL_1> <CARD_1> +44 20 7946 0958"


_WORDS = st.text(alphabet=st.sampled_from("abcdefghij XYZ,.;:!?()\n"), max_size=40)
_VALUES = (
    "maria.keller@example.com",
    "4111 1111 1111 1111",
    "DE89 3704 0044 0532 0130 00",
    "+44 20 7946 0958",
    "192.168.17.42",
    "sk-proj-4fGh7JkL9mN2pQ5rS8tV1wX3yZ6aB0cD",
    "AKIAIOSFODNN7EXAMPLE",
)


@settings(max_examples=150, deadline=None)
@given(before=_WORDS, after=_WORDS, value=st.sampled_from(_VALUES))
def test_a_planted_value_never_survives_whatever_surrounds_it(before: str, after: str, value: str) -> None:
    text = f"{before} {value} {after}"
    out = R.text(text)
    assert value not in out
    assert re.search(r"<(EMAIL|CARD|IBAN|PHONE|IP|SECRET)_1>", out)


def test_scans_are_ruled_out_by_stem_exactly_as_by_every_word() -> None:
    """A scan is skipped only when the request holds none of its words: searching the stems first finds
    every word (`github_pat_` is not under `gh`) and nothing else."""
    from qualitycheck.traffic import _redact

    words = [w.encode() for w in _redact._SECRET_PREFIXES + _redact._CONTEXT_ANCHORS]
    texts = [b'{"content": "plain text with gh, api, auth, access and AI in it"}'] + [
        b'{"content": "before ' + w + b' after"}' for w in words + [w.upper() for w in words] + [w[:-1] for w in words]
    ]
    for text in texts:
        assert _redact._holds_any(text, _redact._PREFIX_GROUPS) == any(p.encode() in text for p in _redact._SECRET_PREFIXES)
        low = text.lower()
        assert _redact._holds_any(low, _redact._ANCHOR_GROUPS) == any(a.encode() in low for a in _redact._CONTEXT_ANCHORS)
