"""Small inline SVG distribution charts, drawn in Python.

They are plain markup with presentation attributes (no style attributes, no
script), so the page's Content-Security-Policy needs no exception for them
and they show even with JavaScript off. Both sides share one x axis, clipped
at the 99th percentile of the pooled values so one stalled request does not
squash every bar into the first bin.
"""

from __future__ import annotations

import numpy as np
from markupsafe import Markup, escape

__all__ = ["SIDE_COLOURS", "histogram_svg"]

SIDE_COLOURS = {"baseline": "#3b6fb6", "candidate": "#d9822b", "control": "#6b8f4e"}

_W, _H, _PAD_B, _BINS = 300, 84, 16, 32


def histogram_svg(metric: str, samples: dict[str, np.ndarray]) -> Markup:
    """Overlaid step histograms per side (share of responses per bin), with median ticks."""
    present = {side: np.asarray(v, dtype=np.float64) for side, v in samples.items() if len(v)}
    if not present:
        return Markup("")
    pooled = np.concatenate(list(present.values()))
    lo, hi = float(pooled.min()), float(np.percentile(pooled, 99))
    if hi <= lo:
        hi = lo + max(abs(lo) * 0.1, 1e-3)
    edges = np.linspace(lo, hi, _BINS + 1)
    plot_h = _H - _PAD_B
    hists = {}
    for side, vals in present.items():
        counts, _ = np.histogram(np.clip(vals, lo, hi), bins=edges)
        hists[side] = counts / len(vals)
    peak = max(float(h.max()) for h in hists.values())
    shapes: list[str] = []
    for side, share in hists.items():
        colour = SIDE_COLOURS.get(side, "#777")
        pts = [f"0,{plot_h}"]
        for i, sh in enumerate(share):
            y = plot_h - (sh / peak) * (plot_h - 4) if peak else plot_h
            x0, x1 = i * _W / _BINS, (i + 1) * _W / _BINS
            pts.append(f"{x0:.1f},{y:.1f} {x1:.1f},{y:.1f}")
        pts.append(f"{_W},{plot_h}")
        shapes.append(f'<polygon points="{" ".join(pts)}" fill="{colour}" fill-opacity="0.28" stroke="{colour}" stroke-width="1.2"/>')
        med = float(np.median(present[side]))
        x = min(_W, max(0.0, (med - lo) / (hi - lo) * _W))
        shapes.append(
            f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{plot_h}" stroke="{colour}" '
            f'stroke-dasharray="3 2" stroke-width="1.5"><title>{escape(side)} median {med:.1f} ms</title></line>'
        )
    label = escape(metric)
    return Markup(
        f'<svg class="hist" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" '
        f'aria-label="{label} distribution per side">'
        f"<title>{label}: share of responses per bin, dashed line = median</title>"
        + "".join(shapes)
        + f'<line x1="0" y1="{plot_h}" x2="{_W}" y2="{plot_h}" stroke="#999" stroke-width="1"/>'
        f'<text x="0" y="{_H - 3}" font-size="10" fill="#555">{lo:.1f}</text>'
        f'<text x="{_W}" y="{_H - 3}" font-size="10" fill="#555" text-anchor="end">{hi:.1f} ms (p99)</text>'
        "</svg>"
    )
