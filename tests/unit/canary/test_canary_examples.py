"""The example manifests of docs/examples/canary/ against the real CRD schemas, and against each other.

The schemas are kept in tests/fixtures/controllers/ with their source,
version and license (README.md there): Argo Rollouts' AnalysisTemplate and
Rollout from the npm package @kubernetes-models/argo-rollouts, Flagger's
Canary CRD from its repository. They are read as the API server reads a
custom resource with kubectl's default strict field validation: a field the
schema does not declare is refused, not pruned away.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from qualitycheck.core._config_file import load_config
from tests.unit.canary.canary_helpers import ROOT, example_docs

FIXTURES = ROOT / "tests" / "fixtures" / "controllers"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta#"
CORE = {("v1", "ConfigMap"), ("v1", "Service"), ("apps/v1", "Deployment")}


def _strict(node: Any) -> Any:
    """The schema with every declared object closed to undeclared fields, unless it keeps unknown fields itself."""
    if isinstance(node, list):
        return [_strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    if node.get("$ref") == OBJECT_META:  # the CRD itself declares metadata `type: object`; the API server checks ObjectMeta
        return {"type": "object"}
    out = {k: _strict(v) for k, v in node.items()}
    if out.get("properties") and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"]
        for v in node.values():
            yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def _argo(name: str) -> dict[str, Any]:
    schema = json.loads((FIXTURES / "argo-rollouts" / f"{name}.schema.json").read_text())
    assert set(_refs(schema)) == {OBJECT_META}, "a reference the tests do not resolve"
    return dict(_strict(schema))


def _flagger_canary() -> dict[str, Any]:
    crd = yaml.safe_load((FIXTURES / "flagger" / "canaries.flagger.app.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    return dict(_strict(version["schema"]["openAPIV3Schema"]))


SCHEMAS = {
    ("argoproj.io/v1alpha1", "AnalysisTemplate"): _argo("analysistemplate"),
    ("argoproj.io/v1alpha1", "Rollout"): _argo("rollout"),
    ("flagger.app/v1beta1", "Canary"): _flagger_canary(),
}


def _errors(doc: dict[str, Any]) -> list[str]:
    schema = SCHEMAS[(doc["apiVersion"], doc["kind"])]
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in Draft202012Validator(schema).iter_errors(doc)]


def _kind(name: str, kind: str, doc_name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in example_docs(name) if d["kind"] == kind and doc_name in (None, d["metadata"]["name"])]
    return doc


@pytest.mark.parametrize("name", ["watcher.yaml", "argo-rollouts.yaml", "flagger.yaml"])
def test_every_custom_resource_in_the_examples_is_valid_against_its_real_crd_schema(name: str) -> None:
    docs = example_docs(name)
    assert docs
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        assert key in SCHEMAS or key in CORE, f"{name}: {key} has no schema in tests/fixtures/controllers"
        if key in SCHEMAS:
            assert _errors(doc) == [], f"{name}: {doc['kind']} {doc['metadata']['name']}"


def test_the_schemas_refuse_what_the_api_server_would() -> None:
    template = _kind("argo-rollouts.yaml", "AnalysisTemplate", "qualitycheck-window")
    typo = copy.deepcopy(template)
    typo["spec"]["metrics"][0]["provider"]["web"]["jsonpath"] = typo["spec"]["metrics"][0]["provider"]["web"].pop("jsonPath")
    assert any("'jsonpath' was unexpected" in e for e in _errors(typo))
    wrong = copy.deepcopy(template)
    wrong["spec"]["metrics"][0]["provider"]["web"]["timeoutSeconds"] = "10s"
    assert any("timeoutSeconds" in e for e in _errors(wrong))
    no_url = copy.deepcopy(template)
    del no_url["spec"]["metrics"][0]["provider"]["web"]["url"]
    assert any("'url' is a required property" in e for e in _errors(no_url))
    canary = _kind("flagger.yaml", "Canary")
    bad_type = copy.deepcopy(canary)
    bad_type["spec"]["analysis"]["webhooks"][0]["type"] = "confirm-promote"
    assert any("'confirm-promote' is not one of" in e for e in _errors(bad_type))
    bad_timeout = copy.deepcopy(canary)
    bad_timeout["spec"]["analysis"]["webhooks"][0]["timeout"] = "ten seconds"
    assert any("does not match" in e for e in _errors(bad_timeout))
    bad_metadata = copy.deepcopy(canary)
    bad_metadata["spec"]["analysis"]["webhooks"][0]["metadata"] = {"route": 7}
    assert any("7 is not of type 'string'" in e for e in _errors(bad_metadata))


def _watcher() -> tuple[list[str], dict[str, Any]]:
    deployment = _kind("watcher.yaml", "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container["args"], container


def _service_base() -> str:
    service = _kind("watcher.yaml", "Service")
    (port,) = service["spec"]["ports"]
    return f"http://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{port['port']}"


def _config(example: str, tmp_path: Path) -> Any:
    cm = _kind(example, "ConfigMap")
    path = tmp_path / "qualitycheck.yaml"
    path.write_text(cm["data"]["qualitycheck.yaml"])
    assert cm["metadata"]["name"] == _kind("watcher.yaml", "Deployment")["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    return load_config(path, {})


def test_the_watcher_listens_where_the_service_and_the_controllers_send(tmp_path: Path) -> None:
    args, container = _watcher()
    listen = args[args.index("--listen") + 1]
    (port,) = container["ports"]
    assert listen == f"0.0.0.0:{port['containerPort']}"
    service = _kind("watcher.yaml", "Service")
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    assert "--dry-run" in args  # the controller acts; the watcher records
    assert container["readinessProbe"]["httpGet"]["path"] == "/qc/ready"
    base = _service_base()
    for doc in example_docs("argo-rollouts.yaml"):
        if doc["kind"] == "AnalysisTemplate":
            provider = doc["spec"]["metrics"][0]["provider"]
            if "web" in provider:
                assert provider["web"]["url"] == base + "/qc/status"
    for hook in _kind("flagger.yaml", "Canary")["spec"]["analysis"]["webhooks"]:
        assert hook["url"] == f"{base}/qc/flagger/{hook['type']}"


@pytest.mark.parametrize("example", ["argo-rollouts.yaml", "flagger.yaml"])
def test_the_watchers_config_loads_and_its_counts_sit_beside_the_controllers(example: str, tmp_path: Path) -> None:
    cfg = _config(example, tmp_path)
    c = cfg.canary
    assert cfg.guardrails.thresholds  # the guardrails are configured, not the defaults
    assert "max_quality_regression_cases" not in cfg.guardrails.thresholds  # no --run in the cluster: it would stay unwatched
    if example == "argo-rollouts.yaml":
        rollout = _kind(example, "Rollout")
        canary = rollout["spec"]["strategy"]["canary"]
        routes = {a["value"] for a in canary["analysis"]["args"]} | {
            a["value"] for s in canary["steps"] if "analysis" in s for a in s["analysis"]["args"]
        }
        for doc in example_docs(example):
            if doc["kind"] == "AnalysisTemplate":
                metric = doc["spec"]["metrics"][0]
                assert metric["interval"] == c.interval  # one measurement per window
                if "count" not in metric:
                    assert metric["failureLimit"] + 1 == c.trip_after
    else:
        analysis = _kind(example, "Canary")["spec"]["analysis"]
        routes = {h["metadata"]["route"] for h in analysis["webhooks"] if "route" in h.get("metadata", {})}
        assert analysis["interval"] == c.interval and analysis["threshold"] == c.trip_after
    assert routes == set(c.routes)


def test_every_promql_of_the_examples_selects_one_namespace_and_one_side() -> None:
    for example, side in (("argo-rollouts.yaml", r'role="(canary|stable)"'), ("flagger.yaml", r'pod=~"llm-(primary-)?\[')):
        cfg = yaml.safe_load(_kind(example, "ConfigMap")["data"]["qualitycheck.yaml"])
        for key, expr in cfg["canary"]["promql"].items():
            selectors = re.findall(r"\{([^}]*)\}", expr.replace("$window", "W"))
            assert selectors, key
            for sel in selectors:
                assert 'namespace="llm"' in sel and re.search(side, sel), (example, key, sel)
