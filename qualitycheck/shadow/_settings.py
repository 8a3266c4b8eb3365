"""What the shadow's processes read of the config, as one value: all the mirror process is started with.

`qualitycheck shadow` holds the whole `Config`; the proxy, the mirror side
and the recorder take `ShadowSettings` (`ShadowSettings.of_config`), and the
mirror process receives it as JSON, so nothing below the command reads a
block it was not meant to (the guardrails, the canary's, the judge).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from qualitycheck.core._config import ShadowOptions, Target

if TYPE_CHECKING:
    from qualitycheck.core._config_file import Config

__all__ = ["FolderTemplate", "ShadowSettings"]


class FolderTemplate(BaseModel):
    """What every run folder a shadow opens starts with, made once from the config by the pipeline's own functions."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    manifest: dict[str, Any]
    """The manifest of the baseline and the candidate and the run options a resume compares (`pipeline.manifest_for`)."""
    config: dict[str, Any]
    """The config as the folder stores it, credentials redacted (`pipeline.redacted_config`): what `score DIR` gates with."""


class ShadowSettings(BaseModel):
    """The targets, the request bound, the noise floor and the `shadow` block: what forwarding, mirroring and recording read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: Target
    candidate: Target
    timeout_s: float
    """`run.timeout_s`: connecting to a target, and each mirrored request."""
    noise_floor: bool
    """Ask the baseline again for each mirrored request (`run.noise_floor` is not `none`)."""
    shadow: ShadowOptions
    folder: FolderTemplate

    @classmethod
    def of_config(cls, cfg: Config) -> ShadowSettings:
        """The settings of a shadow of `cfg`'s baseline and candidate (both must be set: the command refuses it otherwise)."""
        from qualitycheck.pipeline._run import manifest_for, redacted_config

        if cfg.baseline is None or cfg.candidate is None:
            raise ValueError("a shadow needs a baseline and a candidate")
        sides = {"baseline": cfg.baseline, "candidate": cfg.candidate}  # a shadow's control is the baseline asked again
        return cls(
            baseline=cfg.baseline,
            candidate=cfg.candidate,
            timeout_s=cfg.run.timeout_s,
            noise_floor=cfg.run.noise_floor != "none",
            shadow=cfg.shadow,
            folder=FolderTemplate(manifest=manifest_for([], cfg, [], targets=sides), config=redacted_config(cfg)),
        )
