"""ZipAR: spatially parallel decoding (He et al., ICML 2025, arXiv:2412.04062). LOSSY.

Rows of the token grid decode in parallel: every active row decodes one token per forward, and a
row starts once the row above has ``row_lag`` tokens (the paper's "window"; renamed here because SJD's
``window`` is something else) (see :func:`arvis.engine.schedules.zipar_schedule`
for the exact schedule, proxies and re-feeds). Tokens are sampled from the model's conditionals
given the tokens decoded so far — the tails of the rows above are *not yet decoded*, so the
output distribution differs from the model's; its cost is measured by FID, not bounded.

What the reference gets wrong and arvis does not: undecoded slots are masked explicitly (the
engine's attention mask only admits written slots; the reference attends to zero K/V there), the
schedule lives in the method's per-request loop (not on the model), and batches > 1 and CFG work.
With ``row_lag >= grid width`` it is plain AR, token for token. A video grid ``(T, H, W)`` decodes as
``T·H`` rows of ``W`` (rows across frames).

On layouts whose rows end with a known end-of-line token (Emu3) no proxy is needed: a new row's first
token is predicted from the end-of-line slot of the row above (:func:`~arvis.engine.schedules.zipar_schedule_eol`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from arvis.engine.engine import DecodeEngine
from arvis.engine.schedules import zipar_schedule, zipar_schedule_eol
from arvis.methods.base import DecodingMethod, register_method
from arvis.methods.catalog import DecoderKind, MethodInfo, method_info


@register_method
@dataclass(frozen=True)
class ZipAR(DecodingMethod):
    """ZipAR: a row starts when the row above has ``row_lag`` tokens (lossy)."""

    info: ClassVar[MethodInfo] = method_info("zipar", DecoderKind.TOKEN)

    row_lag: int = 4

    def __post_init__(self) -> None:
        self._check_declared()

    def run(self, engine: DecodeEngine) -> dict[str, Any]:
        layout = engine.layout
        if len(layout.grid) not in (2, 3):
            raise ValueError(f"zipar needs a 2-D (H, W) or 3-D (T, H, W) token grid, got {layout.grid}")
        if len(layout.grid) == 3 and layout.structural_tokens:
            raise ValueError("zipar on a video needs a (T, H, W) grid without structural tokens")
        # A video is T·H rows of W in raster order: the staircase runs on from a frame's last row into the
        # next frame's first row, whose sequence indices follow on directly.
        height, width = math.prod(layout.grid[:-1]), layout.grid[-1]
        if not layout.structural_tokens:
            schedule = zipar_schedule(height, width, self.row_lag)
        elif layout.row_stride == width + 1 and all(
                (i % layout.row_stride == width) or i >= height * layout.row_stride for i in layout.structural_tokens):
            # Rows end with a known end-of-line token (Emu3): no proxies; the tail is structural too.
            schedule = zipar_schedule_eol(height, width, self.row_lag, tail=layout.num_tokens - height * (width + 1))
        else:
            raise ValueError("zipar needs a 2-D grid without structural tokens, or with an end-of-line token per row")
        B, device = engine.batch_size, engine.device
        probs = engine.prefill()
        first = engine.sample(probs[:, None])
        engine.commit(torch.zeros(B, 1, dtype=torch.long, device=device), first)
        forced = engine.forced_tokens
        for forward in schedule:
            queries = forward.queries
            input_index = torch.tensor([q.input_index for q in queries], device=device).expand(B, -1)
            source = torch.tensor([q.source_index for q in queries], device=device).expand(B, -1)
            inputs = engine.tokens.gather(1, source)  # every free source token is decoded by construction
            if forced is not None:  # structural sources are known before they are decoded
                inputs = torch.where(forced[source] >= 0, forced[source], inputs)
            extent = max(q.input_index for q in queries) + 1
            probs = engine.evaluate(inputs, input_index, extent=extent)  # [B, T, V]
            decodes = [t for t, q in enumerate(queries) if q.predicts is not None]
            targets = torch.tensor([queries[t].predicts for t in decodes], device=device).expand(B, -1)
            tokens = engine.sample(probs[:, decodes])
            engine.commit(targets, tokens)
        return {"row_lag": self.row_lag}
