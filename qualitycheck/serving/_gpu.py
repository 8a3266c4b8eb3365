"""GPU facts of a run from the samples generation took while it ran (`generation._measure`).

KV-cache usage per side, and a DCGM exporter's GPU utilisation and memory
when one was configured: what the method asks the baseline record to hold
beside latency. Recorded, never gated. No HTTP here: the store only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qualitycheck.core._records import GpuSample, GpuSamples
from qualitycheck.core._store import RunStore

__all__ = ["gpu_from_samples", "gpu_summary"]


def gpu_from_samples(samples: Sequence[GpuSample]) -> dict[str, dict[str, Any]]:
    """side → kv_cache_usage (mean) and _max, gpu_utilization (mean), gpu_memory_used_mib (max), gpu_memory_free_mib (min), samples."""
    by_side: dict[str, list[GpuSample]] = {}
    for s in samples:
        by_side.setdefault(s.side, []).append(s)
    out: dict[str, dict[str, Any]] = {}
    for side, rows in sorted(by_side.items()):
        kv = [r.kv_cache_usage for r in rows if r.kv_cache_usage is not None]
        util = [r.gpu_utilization for r in rows if r.gpu_utilization is not None]
        used = [r.gpu_memory_used_mib for r in rows if r.gpu_memory_used_mib is not None]
        free = [r.gpu_memory_free_mib for r in rows if r.gpu_memory_free_mib is not None]
        out[side] = {
            "kv_cache_usage": sum(kv) / len(kv) if kv else None,
            "kv_cache_usage_max": max(kv) if kv else None,
            "gpu_utilization": sum(util) / len(util) if util else None,
            "gpu_memory_used_mib": max(used) if used else None,
            "gpu_memory_free_mib": min(free) if free else None,
            "samples": len(rows),
        }
    return out


def gpu_summary(store: RunStore) -> dict[str, dict[str, Any]]:
    """summary.json `gpu`: empty when nothing was sampled (no gauge exposed, or generation shorter than a sample)."""
    return gpu_from_samples(store.record_or_empty(GpuSamples).samples)
