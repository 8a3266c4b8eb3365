"""The config file (`qualitycheck.yaml`) and flags as one `Config`, and where it is read (`load_config`).

Only the layers that start a stage (pipeline, shadow, canary, cli, the
pytest plugin) hold a `Config`: each hands the stage below the blocks it
reads (targets, `RunOptions`, a judge's options...), and an import-linter
contract (pyproject.toml) forbids this module in those stages. CLI flags
override the file, field by field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from qualitycheck.core._canary_config import CanaryConfig
from qualitycheck.core._config import TARGET_NAMES, JudgeTarget, LikelihoodOptions, RunOptions, ShadowOptions, Target, _problems
from qualitycheck.core._errors import ConfigError, Problem
from qualitycheck.core._guardrails import GuardrailBlock, Guardrails, RouteGuardrails, resolve_guardrails

__all__ = ["DEFAULT_CONFIG_NAME", "Config", "load_config"]

DEFAULT_CONFIG_NAME = "qualitycheck.yaml"


def _margin(m: float) -> float:
    if not 0 <= m < 1:
        raise ValueError(f"expected a pass-rate margin between 0 and 1, got {m!r}")
    return m


class Config(BaseModel):
    """Every block of the config file, as the commands read it; each stage is handed only its own blocks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: Target | None = None
    candidate: Target | None = None
    control: Target | None = None
    judge: JudgeTarget | None = None
    suites: list[str] = Field(default_factory=list)
    run: RunOptions = RunOptions()
    speculative_decoding_guardrails: GuardrailBlock = GuardrailBlock()
    """The seed's guardrail block, verbatim in YAML, typed here (core/_guardrails.py)."""
    routes: dict[str, RouteGuardrails] = Field(default_factory=dict)
    """Per-route guardrail overrides."""
    non_inferiority_margin: dict[str, Annotated[float, AfterValidator(_margin)]] = Field(default_factory=dict)
    """Per check, the largest pass-rate drop still called non-inferior."""
    allow_not_evaluated: bool = False
    """Let a run pass when some guardrail could not be evaluated."""
    judges_dir: str | None = None
    canary: CanaryConfig = CanaryConfig()
    """`qualitycheck canary` only: metric sources, evidence minimums, windows (core/_canary_config.py)."""
    shadow: ShadowOptions = ShadowOptions()
    """`qualitycheck shadow` only."""
    likelihood: LikelihoodOptions = LikelihoodOptions()
    """The likelihood stage (`qualitycheck.likelihood`)."""
    source: str | None = Field(default=None, exclude=True)

    def targets(self) -> dict[str, Target]:
        return {n: t for n in TARGET_NAMES if (t := getattr(self, n)) is not None}

    @property
    def guardrails(self) -> Guardrails:
        """The guardrails in force: the block (or the defaults when it sets nothing) and each route's overrides."""
        return resolve_guardrails(self.speculative_decoding_guardrails, self.routes)


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> Config:
    """Read the config file (if any) and apply CLI overrides (dotted keys)."""
    data: dict[str, Any] = {}
    finder = None
    src = None
    if path is None and Path(DEFAULT_CONFIG_NAME).is_file():
        path = DEFAULT_CONFIG_NAME
    if path is not None:
        src = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
            node = yaml.compose(text, Loader=yaml.SafeLoader)
            data = yaml.safe_load(text) or {}
        except OSError as exc:
            raise ConfigError([Problem(src, None, "", f"cannot read config: {exc.strerror}")]) from None
        except yaml.YAMLError as exc:
            from qualitycheck.core._cases import yaml_problem

            raise ConfigError([yaml_problem(src, exc)]) from None
        except UnicodeDecodeError as exc:
            raise ConfigError([Problem(src, None, "", f"not UTF-8 text: {exc.reason}")]) from None
        if not isinstance(data, dict):
            raise ConfigError([Problem(src, 1, "", "expected a mapping of settings")])
        from qualitycheck.core._cases import _yaml_line_finder

        finder = _yaml_line_finder(node) if node is not None else None
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        cur = data
        keys = dotted.split(".")
        for k in keys[:-1]:
            if not isinstance(cur.get(k), dict):
                cur[k] = {}
            cur = cur[k]
        cur[keys[-1]] = value
    # --model applies to every target that has no model of its own
    model = data.pop("model", None)
    for name in (*TARGET_NAMES, "judge"):
        t = data.get(name)
        if isinstance(t, dict) and model and "model" not in t:
            t["model"] = model
    scorer = data.get("likelihood", {}).get("scorer") if isinstance(data.get("likelihood"), dict) else None
    if isinstance(scorer, dict) and "model" not in scorer:  # the scorer serves the baseline's weights: its model by default
        base = data.get("baseline")
        if (named := model or (base.get("model") if isinstance(base, dict) else None)) is not None:
            scorer["model"] = named
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_problems(exc, src or "command line", finder, Config)) from None
    return cfg.model_copy(update={"source": src})
