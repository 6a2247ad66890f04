"""Next-token statistics of an AR image model: what governs how much any acceleration can win.

For samples drawn by plain AR, the model's sampling distribution ``p_j`` at every position is
recomputed teacher-forced (CFG combine, temperature, top-k exactly as in decoding) and summarised:

- ``entropy`` (nats), ``top1`` probability, ``top10_mass``: how flat the distributions are (visual AR
  models are known for flat ones — LANTERN's "token selection ambiguity");
- ``accept_uniform_draft`` = ``1 − TV(p, uniform)``: the acceptance of a random draft with the correct
  uniform ``q`` (SJD's ``random`` init);
- ``accept_upper_neighbour`` = ``1 − TV(p_j, p_{j−W})``: the acceptance of a draft drawn from the upper
  neighbour's distribution (``neighbour_distribution`` init);
- ``repeat_left_prob`` = ``p_j(x_{j−1})``: acceptance of copying the left token (``repeat_horizontal``).

Each figure is reported as a mean and as an ``H × W`` map over the grid; a model that is trivially
predictable (large flat areas that any method accepts) shows up as top-1 near 1 over large regions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.methods import decode
from arvis.models.protocol import Backbone, Condition, TokenLayout


@torch.no_grad()
def sampling_distributions(backbone: Backbone, tokens: torch.Tensor, condition: Condition,
                           sampling: SamplingConfig) -> torch.Tensor:
    """``p_j`` for every position of ``tokens [B, N]`` (teacher-forced, as decoding sees it) → ``[B, N, V]``.

    One prefill and one forward over the whole sequence through :class:`DecodeEngine`, so any backbone
    (LlamaGen, Emu3 with its structural tokens, video) gives exactly the distributions its decoding uses."""
    engine = DecodeEngine(backbone, condition, sampling)
    first = engine.prefill()[:, None]
    B, N = tokens.shape
    if N == 1:
        return first
    index = torch.arange(N - 1, device=tokens.device).expand(B, -1)
    return torch.cat([first, engine.evaluate(tokens[:, :-1], index)], dim=1)


def summarise(p: torch.Tensor, tokens: torch.Tensor, layout: TokenLayout) -> dict[str, Any]:
    """Means and grid maps of the statistics in the module docstring; ``p: [B, N, V]``, ``tokens: [B, N]``.

    Only the image positions count (structural tokens such as Emu3's end-of-line are forced, not
    predicted), over the image ids only; the last two grid axes are the map's rows and columns."""
    H, W = int(layout.grid[-2]), int(layout.grid[-1])
    free = torch.ones(layout.num_tokens, dtype=torch.bool)
    free[list(layout.structural_tokens)] = False
    lo, hi = layout.image_token_range or (0, p.shape[-1])
    p, tokens = p[:, free, lo:hi], tokens[:, free] - lo
    V = p.shape[-1]
    logp = torch.where(p > 0, p.log(), torch.zeros_like(p))
    per_position = {
        "entropy": -(p * logp).sum(-1),
        "top1": p.max(-1).values,
        "top10_mass": p.topk(min(10, V), dim=-1).values.sum(-1),
        "accept_uniform_draft": 1 - 0.5 * (p - 1.0 / V).abs().sum(-1),
    }
    upper = torch.full_like(per_position["top1"], float("nan"))
    upper[:, W:] = 1 - 0.5 * (p[:, W:] - p[:, :-W]).abs().sum(-1)
    per_position["accept_upper_neighbour"] = upper
    left = torch.full_like(per_position["top1"], float("nan"))
    left[:, 1:] = p[:, 1:].gather(-1, tokens[:, :-1, None]).squeeze(-1)
    per_position["repeat_left_prob"] = left
    out: dict[str, Any] = {}
    for name, values in per_position.items():
        grids = values.reshape(-1, H, W)
        out[name] = float(values.nanmean())
        out[f"{name}_map"] = grids.nanmean(0).tolist()
        out[f"{name}_by_row"] = grids.nanmean(dim=(0, 2)).tolist()
    out["fraction_positions_top1_over_0.9"] = float((per_position["top1"] > 0.9).double().mean())
    out["entropy_of_uniform"] = float(torch.log(torch.tensor(float(V))))
    return out


def token_statistics(requests: Iterable[tuple[Backbone, Condition]], sampling: SamplingConfig,
                     seed: int = 0) -> dict[str, Any]:
    """Draw one AR sample per request row (generator ``seed + i`` for the ``i``-th sample overall) and
    summarise the sampling distributions along the way. ``requests``: ``(backbone, condition)`` batches
    (one backbone per batch: a text model's backbone depends on its prompts' length)."""
    ps, toks, layout, n = [], [], None, 0
    for backbone, cond in requests:
        gens = [torch.Generator().manual_seed(seed + n + i) for i in range(cond.batch_size)]
        tokens, _ = decode(backbone, cond, sampling, "ar", gens)
        ps.append(sampling_distributions(backbone, tokens, cond, sampling))
        toks.append(tokens)
        layout, n = backbone.layout, n + cond.batch_size
    if layout is None:
        raise ValueError("requests: no samples to summarise")
    result = summarise(torch.cat(ps), torch.cat(toks), layout)
    result.update(samples=n, guidance_scale=sampling.guidance_scale, top_k=sampling.top_k,
                  temperature=sampling.temperature)
    return result


def class_requests(model: Backbone, labels: list[int], batch_size: int = 16) -> list[tuple[Backbone, Condition]]:
    """A class-conditional model's requests for :func:`token_statistics`: ``labels`` in batches."""
    return [(model, Condition(class_labels=torch.tensor(labels[i:i + batch_size])))
            for i in range(0, len(labels), batch_size)]


#: Markdown header of :func:`table_row` (figure pages show several models' statistics side by side).
TABLE_HEADER = ["| model | samples | CFG | top-k | entropy (nats) | top-1 p | positions with top-1 > 0.9 | "
                "accept: uniform draft | accept: upper neighbour's p | p(left token) |",
                "|---|---|---|---|---|---|---|---|---|---|"]


def table_row(name: str, stats: dict[str, Any]) -> str:
    """One model's :func:`token_statistics` as a row under :data:`TABLE_HEADER`."""
    return (f"| {name} | {stats['samples']} | {stats['guidance_scale']} | {stats.get('top_k') or 'off'} | "
            f"{stats['entropy']:.2f} | {stats['top1']:.2f} | {100 * stats['fraction_positions_top1_over_0.9']:.0f}% | "
            f"{stats['accept_uniform_draft']:.3f} | {stats['accept_upper_neighbour']:.3f} | "
            f"{stats['repeat_left_prob']:.3f} |")
