"""Argo Rollouts and Flagger, emulated as their sources say they behave, to drive the watcher's endpoints.

There is no cluster here, and Argo's conditions are expr-lang/expr
expressions; so each controller is reduced to what it does with an HTTP
answer, read from its source at a pinned version:

- **Argo Rollouts v1.9.1**, `metricproviders/webmetric/webmetric.go`: GET the
  URL (`timeoutSeconds`, default 10); a transport error or a status outside
  2xx is an Error measurement; a body that is not JSON is Successful as it
  is (conditions are not evaluated); else the `jsonPath` (k8s.io/client-go
  jsonpath, missing keys are an error) gives `result`. `utils/evaluate/
  evaluate.go: EvaluateResult`: failureCondition true → Failed, else
  successCondition true → Successful, neither → Inconclusive; one condition
  alone makes its negation the other; an evaluation error is Error.
  `metricproviders/prometheus/prometheus.go`: a vector answers `result` as
  the list of its sample values. `analysis/analysis.go:
  assessMetricFailureInconclusiveOrError`: the metric is Failed when
  failed > failureLimit (default 0), Inconclusive when inconclusive >
  inconclusiveLimit (default 0), Error when consecutive errors >
  consecutiveErrorLimit (default 4, `utils/defaults`), the later check
  winning; Successful when `count` is reached.
- **expr** (antonmedv/expr v1.15.5, which Argo v1.9.1 builds with; now
  expr-lang/expr): the subset the templates use, and nothing more:
  literals (integers, floats, "strings", 'strings', true, false, nil),
  `result` and `#`, unary minus, member access `a.b` (a map's missing key is nil; a
  member of nil is an error), indexing `a[i]` (negative from the end, out of
  range is an error), `len(x)`, `all(array, {predicate})` (true on an empty
  array), `any(array, {predicate})` (false on an empty array), `==` `!=`
  (numbers by value whatever their type; values of different kinds are
  unequal; nil equals only nil), `<` `<=` `>` `>=` (numbers, or strings;
  else an error), `!`/`not`, `&&`/`and`, `||`/`or` (short-circuit; operands
  must be booleans), and parentheses. Anything else is refused, so a
  template that leaves the subset fails its test instead of being guessed at.
- **Prometheus** is reduced to one scrape of the watcher's `/qc/metrics` and
  an instant-vector selector `name{label="value",...}` over it, with the
  target labels a scrape adds (`namespace`, `job`) given by the test.
- **Flagger v1.44.0**, `pkg/controller/webhook.go`: POST the JSON payload
  (timeout default 10s; `retries` through hashicorp/go-retryablehttp v0.7.8,
  which retries transport errors, 429 and 5xx except 501; its waits between
  tries are left out); a status above 202, or no answer, is an error. `scheduler_hooks.go` / `scheduler.go`:
  what an error means for each webhook type (`FLAGGER_ON`).
"""

from __future__ import annotations

import ast
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# ------------------------------------------------------------------ expr subset


class ExprError(Exception):
    """What expr would refuse to compile or fail to run: Argo makes the measurement an Error."""


_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.\d*|\.\d+|\d+)|(?P<str>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>==|!=|<=|>=|&&|\|\||[<>!#.()\[\]{},-]))"
)
_KEYWORD_OPS = {"and": "&&", "or": "||", "not": "!"}
_LITERALS: dict[str, Any] = {"true": True, "false": False, "nil": None}
_FUNCS = ("len", "all", "any")


def _tokens(src: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    src = src.rstrip()
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if m is None or m.end() == pos:
            raise ExprError(f"unexpected token at {pos} in {src!r}")
        pos = m.end()
        if m.group("num") is not None:
            text = m.group("num")
            out.append(("lit", float(text) if "." in text else int(text)))
        elif m.group("str") is not None:
            out.append(("lit", ast.literal_eval(m.group("str"))))
        elif m.group("name") is not None:
            name = m.group("name")
            if name in _KEYWORD_OPS:
                out.append(("op", _KEYWORD_OPS[name]))
            elif name in _LITERALS:
                out.append(("lit", _LITERALS[name]))
            else:
                out.append(("name", name))
        else:
            out.append(("op", m.group("op")))
    return out


Node = Callable[[dict[str, Any]], Any]


class _Parser:
    """Precedence climbing: || < && < comparisons < unary ! and - < member, index, call < primary."""

    def __init__(self, src: str, env_names: set[str]):
        self.toks = _tokens(src)
        self.i = 0
        self.names = env_names
        self.src = src

    def parse(self) -> Node:
        node = self.or_()
        if self.i != len(self.toks):
            raise ExprError(f"unexpected {self.toks[self.i][1]!r} in {self.src!r}")
        return node

    def peek(self) -> tuple[str, Any] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, op: str) -> bool:
        if self.peek() == ("op", op):
            self.i += 1
            return True
        return False

    def expect(self, op: str) -> None:
        if not self.take(op):
            raise ExprError(f"expected {op!r} in {self.src!r}")

    def or_(self) -> Node:
        left = self.and_()
        while self.take("||"):
            left = _logic(left, self.and_(), stop_on=True)
        return left

    def and_(self) -> Node:
        left = self.cmp()
        while self.take("&&"):
            left = _logic(left, self.cmp(), stop_on=False)
        return left

    def cmp(self) -> Node:
        left = self.unary()
        tok = self.peek()
        if tok is not None and tok[0] == "op" and tok[1] in ("==", "!=", "<", "<=", ">", ">="):
            self.i += 1
            right = self.unary()
            return _compare(tok[1], left, right)
        return left

    def unary(self) -> Node:
        if self.take("-"):
            number = self.unary()

            def minus(env: dict[str, Any]) -> Any:
                v = number(env)
                if _kind(v) != "number":
                    raise ExprError(f"invalid operation: -{_kind(v)}")
                return -v

            return minus
        if self.take("!"):
            inner = self.unary()

            def neg(env: dict[str, Any]) -> bool:
                v = inner(env)
                if not isinstance(v, bool):
                    raise ExprError(f"invalid operation: !{_kind(v)}")
                return not v

            return neg
        return self.postfix()

    def postfix(self) -> Node:
        node = self.primary()
        while True:
            if self.take("."):
                tok = self.peek()
                if tok is None or tok[0] != "name":
                    raise ExprError(f"expected a member name in {self.src!r}")
                self.i += 1
                node = _member(node, tok[1])
            elif self.take("["):
                index = self.or_()
                self.expect("]")
                node = _index(node, index)
            else:
                return node

    def primary(self) -> Node:
        tok = self.peek()
        if tok is None:
            raise ExprError(f"unexpected end of {self.src!r}")
        self.i += 1
        kind, value = tok
        if kind == "lit":
            return lambda env: value
        if tok == ("op", "("):
            inner = self.or_()
            self.expect(")")
            return inner
        if tok == ("op", "#"):
            return lambda env: env["#"]
        if kind == "name":
            if self.peek() == ("op", "("):
                return self.call(value)
            if value not in self.names:
                raise ExprError(f"unknown name {value}")
            return lambda env: env[value]
        raise ExprError(f"unexpected {value!r} in {self.src!r}")

    def call(self, name: str) -> Node:
        if name not in _FUNCS:
            raise ExprError(f"{name}() is outside the subset this emulator evaluates")
        self.expect("(")
        arg = self.or_()
        if name == "len":
            self.expect(")")
            return _len(arg)
        self.expect(",")
        self.expect("{")
        saved, self.names = self.names, self.names | {"#"}
        pred = self.or_()
        self.names = saved
        self.expect("}")
        self.expect(")")
        return _quantifier(name, arg, pred)


def _kind(v: Any) -> str:
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "map"
    return type(v).__name__


def _equal(a: Any, b: Any) -> bool:
    ka, kb = _kind(a), _kind(b)
    if ka != kb:
        return False
    return bool(a == b)


def _compare(op: str, left: Node, right: Node) -> Node:
    def run(env: dict[str, Any]) -> bool:
        a, b = left(env), right(env)
        if op == "==":
            return _equal(a, b)
        if op == "!=":
            return not _equal(a, b)
        if _kind(a) != _kind(b) or _kind(a) not in ("number", "string"):
            raise ExprError(f"invalid operation: {_kind(a)} {op} {_kind(b)}")
        return bool({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op])

    return run


def _logic(left: Node, right: Node, *, stop_on: bool) -> Node:
    def run(env: dict[str, Any]) -> bool:
        a = left(env)
        if not isinstance(a, bool):
            raise ExprError(f"invalid operation: {_kind(a)} {'||' if stop_on else '&&'} ...")
        if a is stop_on:
            return a
        b = right(env)
        if not isinstance(b, bool):
            raise ExprError(f"invalid operation: ... {'||' if stop_on else '&&'} {_kind(b)}")
        return b

    return run


def _member(node: Node, name: str) -> Node:
    def run(env: dict[str, Any]) -> Any:
        v = node(env)
        if isinstance(v, dict):
            return v.get(name)
        raise ExprError(f"cannot fetch {name} from {_kind(v)}")

    return run


def _index(node: Node, index: Node) -> Node:
    def run(env: dict[str, Any]) -> Any:
        v, i = node(env), index(env)
        if isinstance(v, dict):
            return v.get(i)
        if isinstance(v, list) and isinstance(i, int) and not isinstance(i, bool):
            if not -len(v) <= i < len(v):
                raise ExprError(f"index out of range: {i} (array of length {len(v)})")
            return v[i]
        raise ExprError(f"cannot index {_kind(v)} with {_kind(i)}")

    return run


def _len(arg: Node) -> Node:
    def run(env: dict[str, Any]) -> int:
        v = arg(env)
        if isinstance(v, (list, dict, str)):
            return len(v)
        raise ExprError(f"invalid argument for len (type {_kind(v)})")

    return run


def _quantifier(name: str, arg: Node, pred: Node) -> Node:
    def run(env: dict[str, Any]) -> bool:
        items = arg(env)
        if not isinstance(items, list):
            raise ExprError(f"cannot iterate {_kind(items)}")
        outcomes = []
        for item in items:
            v = pred({**env, "#": item})
            if not isinstance(v, bool):
                raise ExprError(f"predicate should return boolean (got {_kind(v)})")
            outcomes.append(v)
        return all(outcomes) if name == "all" else any(outcomes)

    return run


def eval_condition(condition: str, result: Any) -> bool:
    """Argo's `EvalCondition`: the expression over `result`, which must come out a boolean."""
    out = _Parser(condition, {"result"}).parse()({"result": result})
    if not isinstance(out, bool):
        raise ExprError(f"expected bool, but got {_kind(out)}")
    return out


# ------------------------------------------------------------------ Argo Rollouts

SUCCESSFUL, FAILED, INCONCLUSIVE, ERROR = "Successful", "Failed", "Inconclusive", "Error"


@dataclass(frozen=True)
class Measurement:
    phase: str
    value: str = ""
    message: str = ""


def substitute(node: Any, args: Mapping[str, str]) -> Any:
    """Argo's `{{args.NAME}}` (spaces allowed inside the braces) resolved everywhere in a metric."""
    if isinstance(node, dict):
        return {k: substitute(v, args) for k, v in node.items()}
    if isinstance(node, list):
        return [substitute(v, args) for v in node]
    if isinstance(node, str):

        def one(m: re.Match[str]) -> str:
            if m.group(1) not in args:
                raise KeyError(f"args.{m.group(1)} not given")
            return args[m.group(1)]

        return re.sub(r"\{\{\s*args\.([A-Za-z0-9_-]+)\s*\}\}", one, node)
    return node


def evaluate_result(result: Any, metric: Mapping[str, Any]) -> str:
    """`evaluate.EvaluateResult`."""
    success_cond, failure_cond = metric.get("successCondition", ""), metric.get("failureCondition", "")
    try:
        success = eval_condition(success_cond, result) if success_cond else False
        failure = eval_condition(failure_cond, result) if failure_cond else False
    except ExprError:
        return ERROR
    if not success_cond and not failure_cond:
        return SUCCESSFUL
    if success_cond and not failure_cond:
        failure = not success
    if failure_cond and not success_cond:
        success = not failure
    if failure:
        return FAILED
    return SUCCESSFUL if success else INCONCLUSIVE


def json_path(path: str, data: Any) -> Any:
    """The client-go jsonpath subset `{$}`, `{$.a.b}`, `{.a.b}` (a dot inside a name escaped as `\\.`); a missing key is an error."""
    m = re.fullmatch(r"\{\$?((?:\.(?:[^.\\{}\[\]*@?() ]|\\.)+)*)\}", path.strip())
    if m is None:
        raise ValueError(f"jsonPath {path!r} is outside the emulated subset")
    value = data
    for name in re.findall(r"\.((?:[^.\\]|\\.)+)", m.group(1)):
        key = name.replace("\\.", ".")
        if not isinstance(value, dict) or key not in value:
            raise KeyError(f"{key} is not found")
        value = value[key]
    return value


def web_measure(metric: Mapping[str, Any], args: Mapping[str, str]) -> Measurement:
    """One measurement of a `web` metric (webmetric.go: Run, parseResponse)."""
    m = substitute(dict(metric), args)
    web = m["provider"]["web"]
    timeout = web.get("timeoutSeconds") or 10
    req = urllib.request.Request(web["url"], method=web.get("method", "GET"))
    for h in web.get("headers", []):
        req.add_header(h["key"], h["value"])
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        return Measurement(ERROR, message=f"received non 2xx response code: {exc.code}")
    except (urllib.error.URLError, OSError) as exc:
        return Measurement(ERROR, message=str(exc))
    try:
        data = json.loads(body)
    except ValueError:
        return Measurement(SUCCESSFUL, value=body.decode(errors="replace"))  # webmetric.go: a non-JSON body is taken as it is
    try:
        result = json_path(web.get("jsonPath") or "{$}", data)
    except KeyError as exc:
        return Measurement(ERROR, message=f"Could not find JSONPath in body: {exc}")
    return Measurement(evaluate_result(result, m), value=json.dumps(result))


_SELECTOR = re.compile(r"\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{([^}]*)\})?\s*")


def prometheus_measure(metric: Mapping[str, Any], args: Mapping[str, str], page: str, target_labels: Mapping[str, str]) -> Measurement:
    """One measurement of a `prometheus` metric whose query is an instant-vector selector, over one scrape of `page`."""
    m = substitute(dict(metric), args)
    query = m["provider"]["prometheus"]["query"]
    sel = _SELECTOR.fullmatch(query)
    if sel is None:
        raise ValueError(f"query {query!r} is not a bare instant-vector selector (outside what is emulated)")
    matchers = dict(re.findall(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"([^"]*)"\s*,?', sel.group(2) or ""))
    values = [
        s.value
        for fam in text_string_to_metric_families(page)
        for s in fam.samples
        if s.name == sel.group(1) and all({**s.labels, **target_labels}.get(k) == v for k, v in matchers.items())
    ]
    return Measurement(evaluate_result(values, m), value=json.dumps(values))


@dataclass
class AnalysisMetric:
    """One metric of an AnalysisRun: its measurements so far and the phase `assessMetricStatus` gives them."""

    spec: Mapping[str, Any]
    measurements: list[Measurement] = field(default_factory=list)

    def add(self, m: Measurement) -> str:
        self.measurements.append(m)
        return self.phase

    @property
    def phase(self) -> str:
        def limit(key: str, default: int) -> int:
            v = self.spec.get(key)
            return default if v is None else int(v)

        failed = sum(1 for m in self.measurements if m.phase == FAILED)
        inconclusive = sum(1 for m in self.measurements if m.phase == INCONCLUSIVE)
        consecutive_errors = 0
        for m in reversed(self.measurements):
            if m.phase != ERROR:
                break
            consecutive_errors += 1
        phase = ""
        if limit("failureLimit", 0) >= 0 and failed > limit("failureLimit", 0):
            phase = FAILED
        if inconclusive > limit("inconclusiveLimit", 0):
            phase = INCONCLUSIVE
        if consecutive_errors > limit("consecutiveErrorLimit", 4):
            phase = ERROR
        if phase:
            return phase
        counted = sum(1 for m in self.measurements if m.phase != ERROR)
        count = self.spec.get("count")
        if count is not None and counted >= int(count):
            return SUCCESSFUL
        return "Running"


# ------------------------------------------------------------------ Flagger

FLAGGER_ON: dict[str, tuple[str, str]] = {
    "confirm-rollout": ("proceed", "wait"),
    "pre-rollout": ("proceed", "failed check"),
    "rollout": ("proceed", "failed check"),
    "confirm-traffic-increase": ("increase weight", "hold weight"),
    "confirm-promotion": ("promote", "wait"),
    "post-rollout": ("done", "logged"),
    "rollback": ("roll back", "carry on"),
    "event": ("done", "logged"),
}
"""Webhook type → (what Flagger does on success, on an error), from scheduler_hooks.go and scheduler.go."""


def flagger_call(url: str, payload: Mapping[str, Any], *, timeout: str = "10s", retries: int = 0) -> str | None:
    """`callWebhook`: None when the webhook said yes (status 200..202), else the error Flagger records."""
    seconds = float(timeout[:-1]) * (60 if timeout.endswith("m") else 1)
    body = json.dumps(payload).encode()
    error = ""
    for attempt in range(retries + 1):
        req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=seconds) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            error = f"POST {url} giving up after {attempt + 1} attempt(s): {exc}"
            continue
        if status == 429 or (status >= 500 and status != 501):
            error = f"POST {url} giving up after {attempt + 1} attempt(s): unexpected HTTP status {status}"
            continue
        return None if status <= 202 else text
    return error


def flagger_does(hook: str, url: str, payload: Mapping[str, Any], **kw: Any) -> str:
    """What Flagger does after calling a webhook of type `hook` at `url`."""
    on_yes, on_no = FLAGGER_ON[hook]
    return on_yes if flagger_call(url, payload, **kw) is None else on_no
