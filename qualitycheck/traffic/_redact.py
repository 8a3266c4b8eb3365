"""PII redaction of logged traffic: typed placeholders, consistent within one conversation.

A production log holds what users typed: addresses, phone numbers, card
numbers, IBANs, IP addresses, and the keys people paste into prompts. A
replayed suite is committed, shared and sent to other endpoints, so each such
value is replaced by a typed placeholder (`<EMAIL_1>`, `<CARD_2>`, ...) before
anything is written. Within one conversation the same value always becomes
the same placeholder, in every message, in tool-call arguments and in the
logged answer, so a question that refers back to "the address above" still
reads coherently.

Speed is the constraint (every line of a log of millions passes here), so a
kind's pattern runs only when a cheap C-level test of the text says it could
match (an `@` for e-mail, a run of seven digits for phone, card and IBAN, a
known key prefix for secrets), and the checks that need Python (Luhn for
cards, mod-97 for IBANs, `ipaddress` for IPv6) run on candidates only.

Recall is preferred over precision where the two conflict: a false
placeholder costs a case a word, a missed one leaks. Two exceptions keep
ordinary prompts intact, because a replayed case must still ask what the
user asked: a bare run of digits is not a phone number (arithmetic, order
numbers) unless it is written like one (a `+` country code, an area code in
brackets, or the usual groupings), and a digit run that fails the Luhn check
is not a card. Phone numbers are recognised by shape and length (E.164 allows
at most 15 digits) rather than by a numbering-plan library: such libraries
need the caller's region to judge a national number, which a log does not
record, and they reject fictitious numbers that are still someone's data.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["KINDS", "Conversation", "Redactor", "iban_ok", "luhn_ok"]

KINDS = ("email", "phone", "card", "iban", "ip", "secret")
"""Every kind of value redacted, in the manifest's order."""

_SECRET_PREFIXES = ("sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "AIza", "AKIA", "ASIA", "eyJ")
_CONTEXT_ANCHORS = (
    "bearer",
    "secret",
    "apikey",
    "api_key",
    "api-key",
    "accesstoken",
    "access_token",
    "access-token",
    "authtoken",
    "auth_token",
    "auth-token",
    "passw",
    "pwd",
)
"""Lower-case words one of which every key written in context (`api_key = ...`, `Bearer ...`) contains."""
_DIGITS = b"0123456789"

_SECRET = re.compile(
    r"""(?<![A-Za-z0-9_-])(?:
        sk-(?=[A-Za-z0-9_-]{20})(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{20,}     # OpenAI (sk-, sk-proj-, ...) and Anthropic (sk-ant-...)
      | gh[pousr]_[A-Za-z0-9]{30,}                                      # GitHub tokens
      | github_pat_[A-Za-z0-9_]{22,}                                    # GitHub fine-grained tokens
      | xox[abposre]-[A-Za-z0-9-]{10,}                                  # Slack
      | AIza[0-9A-Za-z_-]{35}                                           # Google API keys
      | (?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])                        # AWS access key ids
      | eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}    # JSON Web Tokens
    )""",
    re.VERBOSE,
)
_CONTEXT_SECRET = re.compile(
    r"""(?ix)
    (?:\bbearer\s+(?P<bearer>[A-Za-z0-9._~+/-]{16,}=*)
      | \baws_?secret(?:_?access)?_?key["']?\s*[:=]\s*["']?(?P<aws>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])
      | \b(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|secret[_-]?key|client[_-]?secret|password|passwd|pwd)
        ["']?\s*[:=]\s*["']?(?P<kv>[^\s"',;<>]{8,})
    )""",
)
_CONTEXT_GROUPS = ("bearer", "aws", "kv")
_AWS_SECRET_NEAR = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+=]{40}(?![A-Za-z0-9/+=])")
_NEAR_KEY_ID = 200
"""Characters around an AWS access key id searched for its 40-character secret key."""
_EMAIL = re.compile(r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
_RUN = re.compile(r"[0-9](?:[ ().+/-]{0,2}[0-9]){3,}")
"""Four or more digits with at most two separators between each: where every number-shaped kind starts looking."""
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])")
_CARD = re.compile(r"(?<![0-9-])[0-9](?:[ -]?[0-9]){12,18}(?![0-9])")
_PHONE = re.compile(
    r"""(?x)
    (?:(?<![\w+])\+[0-9]{1,3}(?:[ .-]?\(?[0-9]{1,4}\)?){2,6}(?![0-9])              # +44 20 7946 0958, +1 (555) 123-4567
      | (?<![\w(])\([0-9]{2,4}\)[ .-]?[0-9]{3,4}[ .-]?[0-9]{3,4}(?![0-9-])            # (555) 123-4567
      | (?<![\w.-])[0-9]{3}[.-][0-9]{3}[.-][0-9]{4}(?![0-9-]|\.[0-9])                  # 555-123-4567, 555.123.4567
      | (?<![\w.-])[0-9]{3}\ [0-9]{3}\ [0-9]{4}(?![0-9-])                             # 555 123 4567
      | (?<![\w.-])0[0-9]{1,4}[ /-][0-9]{3,4}[ -]?[0-9]{3,5}(?![0-9-])                 # 030 1234567, 020 7946 0958
      | (?<![\w.-])0[0-9](?:[ .][0-9]{2}){4}(?![0-9-])                                 # 06 12 34 56 78
    )""",
)
_IPV4 = re.compile(
    r"(?<![0-9.])(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?!\.?[0-9])"
)
_IPV6 = re.compile(r"(?<![\w:.])(?=[0-9A-Fa-f:.]*::|(?:[0-9A-Fa-f]{1,4}:){3})[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*[0-9A-Fa-f](?![\w:])")
_HEX = frozenset("0123456789abcdefABCDEF:")

_PRIORITY = {"secret": 0, "email": 1, "iban": 2, "card": 3, "ip": 4, "phone": 5}
"""Which kind wins where two candidates overlap: keys hold digit runs a phone pattern could take, an IBAN's
digits can pass Luhn, and a card number is not a phone number."""
_MIN_LEN = 6
"""No kind fits in fewer characters (`a@b.io`), so shorter strings are never scanned."""
_WINDOW = 24
"""Characters looked at around a run of digits (an IBAN's letters, a phone's `+` or bracket)."""


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum every payment card number carries (13 to 19 digits)."""
    if not 13 <= len(digits) <= 19 or len(set(digits)) == 1:
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban_ok(iban: str) -> bool:
    """ISO 13616's check: country code and check digits moved to the end, read as a number, mod 97 is 1."""
    if not 15 <= len(iban) <= 34:
        return False
    moved = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


def _grouped_prefix(value: str, ok: Callable[[str], bool]) -> int:
    """Length of the longest leading part of `value` that ends at a group boundary and is `ok` (0: none).

    A greedy pattern can run past a value into the digits that follow it
    ("card 4111 1111 1111 1111 2024"); cutting only where a separator
    stands keeps a long ungrouped number from hiding a checksum-valid prefix.
    """
    ends = [len(value)] + [i for i in range(len(value) - 1, 0, -1) if value[i] in " -"]
    return next((end for end in ends if ok(value[:end])), 0)


def _iban_prefix(value: str) -> int:
    return _grouped_prefix(value, lambda v: iban_ok(v.replace(" ", "")))


def _card_prefix(value: str) -> int:
    return _grouped_prefix(value, lambda v: luhn_ok(_digits(v)))


_NOT_DIGIT = re.compile(r"[^0-9]")


def _digits(s: str) -> str:
    return _NOT_DIGIT.sub("", s)


def _phone_ok(s: str) -> bool:
    d = _digits(s)
    return 7 <= len(d) <= 15 and len(set(d)) > 1


def _ipv6_ok(s: str) -> bool:
    if s.count(":") < 2 or sum(ch.isalnum() for ch in s) < 3:
        return False
    try:
        ipaddress.IPv6Address(s)
    except ValueError:
        return False
    return True


_Span = tuple[int, int, str, str]
"""(start, end, kind, key): one value found; `key` says when two values are the same one."""


def _context_secrets(s: str, out: list[_Span]) -> None:
    low = s.lower()
    if not any(map(low.__contains__, _CONTEXT_ANCHORS)):
        return
    anchors = [a for a in _CONTEXT_ANCHORS if a in low]
    if s.isascii():  # look only around the anchors
        found: dict[tuple[int, int], re.Match[str]] = {}
        for a in anchors:
            i = low.find(a)
            while i != -1:
                for m in _CONTEXT_SECRET.finditer(s, max(0, i - _WINDOW), min(len(s), i + 600)):
                    if m.start() > i + len(a):
                        break
                    found[m.span()] = m
                i = low.find(a, i + len(a))
        matches: Iterable[re.Match[str]] = found.values()
    else:  # lower() may move positions in other scripts: scan the whole text
        matches = _CONTEXT_SECRET.finditer(s)
    for m in matches:
        for g in _CONTEXT_GROUPS:
            if m.group(g) is not None:
                out.append((m.start(g), m.end(g), "secret", m.group(g)))
                break


def _aws_secret_ok(v: str) -> bool:
    return any(c.islower() for c in v) and any(c.isupper() for c in v) and any(c.isdigit() or c in "/+" for c in v)


def _literal_secrets(s: str, out: list[_Span]) -> None:
    for p in _SECRET_PREFIXES:
        i = s.find(p)
        while i != -1:
            m = _SECRET.match(s, i)
            if m is not None:
                out.append((m.start(), m.end(), "secret", m.group(0)))
                if p in ("AKIA", "ASIA"):  # an access key id's secret key is usually written next to it
                    for near in _AWS_SECRET_NEAR.finditer(s, max(0, m.start() - _NEAR_KEY_ID), min(len(s), m.end() + _NEAR_KEY_ID)):
                        if _aws_secret_ok(near.group(0)):
                            out.append((near.start(), near.end(), "secret", near.group(0)))
                i = s.find(p, m.end())
            else:
                i = s.find(p, i + 1)


def _emails(s: str, out: list[_Span]) -> None:
    i = s.find("@")
    while i != -1:
        nxt = i + 1
        for m in _EMAIL.finditer(s, max(0, i - 128), min(len(s), i + 256)):
            if m.start() < i < m.end():
                out.append((m.start(), m.end(), "email", m.group(0).lower()))
                nxt = m.end()
                break
        i = s.find("@", nxt)


def _numbers(s: str, out: list[_Span]) -> None:
    """IBANs, cards, IPv4 addresses and phone numbers, looked for only around runs of digits."""
    n = len(s)
    seen: set[tuple[int, int, str]] = set()
    for r in _RUN.finditer(s):
        run = r.group(0)
        ndigits = sum(map(str.isdigit, run))
        lo, hi = max(0, r.start() - _WINDOW), min(n, r.end() + _WINDOW)
        if ndigits >= 7:
            for m in _IBAN.finditer(s, lo, hi):
                cut = _iban_prefix(m.group(0))
                if cut:
                    seen.add((m.start(), m.start() + cut, "iban"))
            for m in _CARD.finditer(s, lo, hi):
                cut = _card_prefix(m.group(0))
                if cut:
                    seen.add((m.start(), m.start() + cut, "card"))
            for m in _PHONE.finditer(s, lo, hi):
                if _phone_ok(m.group(0)):
                    seen.add((m.start(), m.end(), "phone"))
        if "." in run:
            for m in _IPV4.finditer(s, lo, hi):
                seen.add((m.start(), m.end(), "ip"))
    for a, b, kind in seen:
        v = s[a:b]
        out.append((a, b, kind, v.replace(" ", "") if kind == "iban" else _digits(v) if kind in ("card", "phone") else v))


def _ipv6(s: str, out: list[_Span]) -> None:
    n = len(s)
    i = s.find(":")
    done = 0
    while i != -1:
        if i >= done and ((i + 1 < n and s[i + 1] in _HEX) and (i > 0 and s[i - 1] in _HEX)):
            for m in _IPV6.finditer(s, max(0, i - 45), min(n, i + 45)):
                if m.start() <= i < m.end() and _ipv6_ok(m.group(0)):
                    out.append((m.start(), m.end(), "ip", m.group(0).lower()))
                    done = m.end()
                    break
        i = s.find(":", i + 1)


_LITERAL, _CONTEXT, _EMAILS, _NUMBERS, _IPV6S = "literal", "context", "email", "numbers", "ipv6"
"""Scans (several kinds share the number scan); a conversation runs only those its request could need."""
_SCANS_OF = {
    "secret": (_LITERAL, _CONTEXT),
    "email": (_EMAILS,),
    "iban": (_NUMBERS,),
    "card": (_NUMBERS,),
    "phone": (_NUMBERS,),
    "ip": (_NUMBERS, _IPV6S),
}
_ESCAPED_ASCII = re.compile(rb"\\u00[2-7][0-9A-Fa-f]")


def _grouped(words: tuple[str, ...], stems: tuple[str, ...]) -> tuple[tuple[bytes, tuple[bytes, ...]], ...]:
    """The words under the first stem each starts with: a text holds one of the words only if it holds its stem,
    so one search rules out a whole group (most requests hold none of them)."""
    groups = {stem: tuple(w.encode() for w in words if w.startswith(stem)) for stem in stems}
    assert sum(map(len, groups.values())) == len(words), "every word under one stem"
    return tuple((stem.encode(), ws) for stem, ws in groups.items())


_PREFIX_GROUPS = _grouped(_SECRET_PREFIXES, ("sk-", "gh", "github_pat_", "xox", "AIza", "AKIA", "ASIA", "eyJ"))
_ANCHOR_GROUPS = _grouped(_CONTEXT_ANCHORS, ("bearer", "secret", "api", "access", "auth", "passw", "pwd"))


def _holds_any(text: bytes, groups: tuple[tuple[bytes, tuple[bytes, ...]], ...]) -> bool:
    return any(stem in text and any(map(text.__contains__, words)) for stem, words in groups)


def _scans(kinds: frozenset[str], hint: bytes | None) -> frozenset[str]:
    """The scans a request needs, judged once from its raw bytes: most requests hold no `@` and no key prefix.

    JSON may spell any character as a `\\u` escape; encoders do so for
    characters outside ASCII, and a request whose bytes escape an ASCII one
    (`\\u0040` for `@`) has nothing ruled out.
    """
    scans = {scan for kind in kinds for scan in _SCANS_OF[kind]}
    if hint is None or _ESCAPED_ASCII.search(hint) is not None:
        return frozenset(scans)
    if not _holds_any(hint, _PREFIX_GROUPS):
        scans.discard(_LITERAL)
    if _CONTEXT in scans and not _holds_any(hint.lower(), _ANCHOR_GROUPS):
        scans.discard(_CONTEXT)
    if b"@" not in hint:
        scans.discard(_EMAILS)
    return frozenset(scans)


def _find(s: str, kinds: frozenset[str], scans: frozenset[str]) -> list[_Span]:
    """Every value of `kinds` in `s`, overlaps resolved by `_PRIORITY`, in text order."""
    found: list[_Span] = []
    if _LITERAL in scans and any(map(s.__contains__, _SECRET_PREFIXES)):
        _literal_secrets(s, found)
    if _CONTEXT in scans:
        _context_secrets(s, found)
    if _EMAILS in scans and "@" in s:
        _emails(s, found)
    if _NUMBERS in scans:
        raw = s.encode("utf-8", "surrogatepass")
        if len(raw) - len(raw.translate(None, _DIGITS)) >= 4:
            _numbers(s, found)
    if _IPV6S in scans and s.count(":") >= 2:
        _ipv6(s, found)
    if not found:
        return found
    kept: list[_Span] = []
    for span in sorted(found, key=lambda sp: (_PRIORITY[sp[2]], sp[0], -sp[1])):
        if span[2] in kinds and all(span[1] <= k[0] or span[0] >= k[1] for k in kept):
            kept.append(span)
    kept.sort()
    return kept


class Conversation:
    """The redaction state of one request: value → placeholder, and how many of each kind were replaced.

    A value found anywhere in the request is replaced everywhere in it, also
    where nothing around it gave it away (an AWS secret key found next to
    its key id is replaced in a later message that quotes it alone): the
    request is scanned whole first, then every string is rewritten.
    """

    __slots__ = ("_kinds", "_literals", "_placeholders", "_scans", "_serial", "counts")

    def __init__(self, kinds: frozenset[str], hint: bytes | None = None):
        self._kinds = kinds
        self._scans = _scans(kinds, hint)
        self._placeholders: dict[tuple[str, str], str] = {}
        self._serial: dict[str, int] = {}
        self._literals: dict[str, tuple[str, str]] = {}
        """Each value as written → (its placeholder, its kind)."""
        self.counts: dict[str, int] = {}
        """Kind → occurrences replaced in this conversation."""

    def _placeholder(self, kind: str, key: str) -> str:
        ph = self._placeholders.get((kind, key))
        if ph is None:
            n = self._serial.get(kind, 0) + 1
            self._serial[kind] = n
            ph = self._placeholders[(kind, key)] = f"<{kind.upper()}_{n}>"
        return ph

    def _collect(self, obj: Any) -> None:
        if isinstance(obj, str):
            if len(obj) < _MIN_LEN or (obj.startswith("data:") and ";base64," in obj[:100]):  # inline images are not text
                return
            for a, b, kind, key in _find(obj, self._kinds, self._scans):
                literal = obj[a:b]
                if literal not in self._literals:
                    self._literals[literal] = (self._placeholder(kind, key), kind)
        elif isinstance(obj, list):
            for x in obj:
                self._collect(x)
        elif isinstance(obj, dict):
            for x in obj.values():
                self._collect(x)

    def _rewrite(self, obj: Any, pattern: re.Pattern[str]) -> Any:
        if isinstance(obj, str):
            return pattern.sub(self._swap, obj) if len(obj) >= _MIN_LEN else obj
        if isinstance(obj, list):
            return [self._rewrite(x, pattern) for x in obj]
        if isinstance(obj, dict):
            return {k: self._rewrite(v, pattern) for k, v in obj.items()}
        return obj

    def _swap(self, m: re.Match[str]) -> str:
        placeholder, kind = self._literals[m.group(0)]
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return placeholder

    def value(self, obj: Any) -> Any:
        """A JSON value with every value found replaced by its placeholder (keys stay: they name fields, not people)."""
        self._collect(obj)
        if not self._literals:
            return obj
        pattern = re.compile("|".join(re.escape(v) for v in sorted(self._literals, key=len, reverse=True)))
        return self._rewrite(obj, pattern)

    def text(self, s: str) -> str:
        """`s` with every value found replaced by its placeholder."""
        out: str = self.value(s)
        return out


class Redactor:
    """Configured once (which kinds), then one `conversation()` per request."""

    def __init__(self, kinds: tuple[str, ...] = KINDS):
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
        self.kinds = kinds
        self._kinds = frozenset(kinds)

    def conversation(self, raw: bytes | None = None) -> Conversation:
        """A new conversation; `raw`, the request's bytes as logged, lets it skip the scans they rule out."""
        return Conversation(self._kinds, raw)

    def text(self, s: str) -> str:
        """One string redacted on its own (a conversation of one string)."""
        return self.conversation().text(s)
