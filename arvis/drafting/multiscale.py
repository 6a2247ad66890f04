"""Multi-scale drafting (MuLo-SD; Peruzzo et al., CVPR 2026): a low-resolution sample, up-sampled into
a draft distribution for every high-resolution position at once.

A small AR model of the same family on a coarser grid (``lowres_model``: 8x8 tokens of the same VQ for a
16x16 target) samples the image at low resolution, for the request's own conditions, with the target's
sampling settings; a learned :class:`~arvis.models.upsampler.TokenUpsampler` maps the low-resolution
token map (and the class) to ``q_j`` over the codebook at every sequence index ``j`` of the target.
Drafts are ``d_j ~ q_j``.

Why exact verification stays lossless: ``q_j`` is a function of the low-resolution sample ``z`` (and the
condition) only — never of the target's tokens — and ``d_j`` is drawn from ``q_j`` with fresh noise. Given
``z`` and everything the target has committed, ``d_j`` is distributed exactly as ``q_j``; so exact
speculative acceptance against ``p_j`` (accept ``d_j`` w.p. ``min(1, p_j(d_j)/q_j(d_j))``, else draw from
``normalize(max(0, p_j − q_j))``) yields ``x_j ~ p_j`` given the prefix and ``z``, hence given the prefix
alone. ``z`` is just extra randomness the verifier knows about: it can steer *which* sample comes out
(accepted drafts make the target's prefix look like the low-resolution image), never its distribution.

Costs counted as draft forwards (``draft_forwards`` in the statistics) and timed as draft time inside the
latency: every forward of the low-resolution model (it runs in a drafter engine of the target's engine:
its prefill and each of its steps) and the one up-sampler forward.

The lossless method feeds ``q`` to Jacobi drafting as the request's initial distributions
(:class:`arvis.drafting.jacobi.InitialDistributions`: :meth:`MultiScaleDraft.at` / :meth:`MultiScaleDraft.select`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from arvis.engine.engine import DecodeEngine
from arvis.models.protocol import Backbone
from arvis.models.upsampler import TokenUpsampler
from arvis.utils.random import sample_inverse_cdf

LowresRunner = Callable[[DecodeEngine], Any]


@dataclass(frozen=True)
class MultiScaleDraft:
    """One request's multi-scale drafts (rows = the target engine's active samples).

    Attributes:
        low_tokens: ``[A, h*w]`` int64, the low-resolution sample.
        q: ``[A, N, V]`` fp32, the draft distribution at every sequence index of the target.
    """

    low_tokens: torch.Tensor
    q: torch.Tensor

    def at(self, index: torch.Tensor) -> torch.Tensor:
        """``q`` at sequence indices ``index [A, M]`` → ``[A, M, V]``."""
        return self.q.gather(1, index[..., None].expand(-1, -1, self.q.shape[-1]))

    def draw(self, index: torch.Tensor, uniform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Drafts ``d ~ q`` at ``index [A, M]`` by inverse CDF with the caller's ``U(0, 1)`` draws ``[A, M]``
        → ``(d [A, M], q [A, M, V])``."""
        q = self.at(index)
        return sample_inverse_cdf(q, uniform), q

    def select(self, kept: torch.Tensor) -> MultiScaleDraft:
        """The rows ``kept [A']`` (ragged batches: finished samples leave)."""
        return MultiScaleDraft(self.low_tokens.index_select(0, kept), self.q.index_select(0, kept))

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.low_tokens, self.q))


class MultiScaleDrafter:
    """A low-resolution AR model and an up-sampler: ``q_j`` for every target position from one low-res sample.

    Args:
        lowres_model: backbone on the coarse grid (same vocabulary and classes as the target).
        upsampler: maps the coarse token map (+ class) to logits on the target's grid.
        temperature: ``q = softmax(upsampler logits / temperature)`` (> 0; any value keeps exact
            verification lossless, since ``q`` is exactly what the drafts are drawn from).
    """

    def __init__(self, lowres_model: Backbone, upsampler: TokenUpsampler, temperature: float = 1.0):
        if not isinstance(upsampler, TokenUpsampler):
            raise TypeError(f"upsampler: expected a TokenUpsampler, got {type(upsampler).__name__}")
        if not hasattr(lowres_model, "layout"):
            raise TypeError(f"lowres_model: expected a backbone (with a token layout), got {type(lowres_model).__name__}")
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not temperature > 0:
            raise ValueError(f"temperature must be a number > 0, got {temperature!r}")
        g = upsampler.config.low_grid
        if tuple(lowres_model.layout.grid) != (g, g):
            raise ValueError(f"lowres_model: its grid {tuple(lowres_model.layout.grid)} is not the up-sampler's "
                             f"input grid ({g}, {g})")
        if lowres_model.layout.vocab_size != upsampler.config.vocab_size:
            raise ValueError(f"lowres_model: vocabulary {lowres_model.layout.vocab_size} differs from the "
                             f"up-sampler's {upsampler.config.vocab_size}")
        self.lowres_model, self.upsampler, self.temperature = lowres_model, upsampler, float(temperature)

    def check_target(self, engine: DecodeEngine) -> None:
        """``ValueError`` unless the drafts fit the target: same grid, vocabulary and class conditioning."""
        G = self.upsampler.high_grid
        layout = engine.layout
        if tuple(layout.grid) != (G, G) or layout.structural_tokens or layout.vocab_size != self.upsampler.config.vocab_size:
            raise ValueError(f"upsampler: drafts a {G}x{G} grid over {self.upsampler.config.vocab_size} tokens; the "
                             f"target generates {tuple(layout.grid)} over {layout.vocab_size}")
        labels = engine.condition.class_labels
        if labels is None:
            raise ValueError("multi-scale drafting needs a class-conditional target (the low-resolution model and the "
                             "up-sampler are conditioned on the class)")
        classes = self.upsampler.config.num_classes
        if classes and bool((labels >= classes).any()):
            raise ValueError(f"class_labels: the up-sampler knows {classes} classes, got ids up to {int(labels.max())}")

    @torch.no_grad()
    def draft(self, engine: DecodeEngine, run_lowres: LowresRunner) -> MultiScaleDraft:
        """Sample the low-resolution image for the engine's active samples and up-sample it.

        Args:
            engine: the target's engine (its condition, sampling settings and random streams are used;
                the forwards are counted as its draft forwards).
            run_lowres: a decoding method's ``run`` that commits every token of the low-resolution engine
                (plain AR in arvis's methods; the drafter does not depend on which).

        Returns:
            The low-resolution tokens and ``q [A, N, V]``.
        """
        self.check_target(engine)
        # A drafter engine: its own cache, the target's random streams (one per sample), its forwards
        # counted and timed as the target's draft forwards.
        low = DecodeEngine(self.lowres_model, engine.condition, engine.sampling, method="draft", drafter_of=engine)
        run_lowres(low)
        low_tokens = low.tokens.index_select(0, engine.active)
        labels = engine.condition.class_labels.index_select(0, engine.active.to(engine.condition.class_labels.device))
        labels = labels.to(low_tokens.device) if self.upsampler.config.num_classes else None
        with engine.clock.measure("draft"):
            q = self.upsampler.distributions(low_tokens, labels, self.temperature)
        engine.stats.draft_forward(engine.active_list)  # the up-sampler
        return MultiScaleDraft(low_tokens, q.to(engine.device))


__all__ = ["MultiScaleDraft", "MultiScaleDrafter"]
