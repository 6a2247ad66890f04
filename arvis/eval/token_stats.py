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

from typing import Any

import torch

from arvis.engine.sampling import SamplingConfig, logits_to_probs
from arvis.methods import decode
from arvis.models.llamagen import LlamaGenTransformer
from arvis.models.protocol import Condition


@torch.no_grad()
def sampling_distributions(model: LlamaGenTransformer, tokens: torch.Tensor, condition: Condition,
                           sampling: SamplingConfig) -> torch.Tensor:
    """``p_j`` for every position of ``tokens [B, N]`` (teacher-forced, as decoding sees it) → ``[B, N, V]``."""
    cond_logits = model(tokens, condition)
    uncond_logits = model(tokens, model.null_condition(condition)) if sampling.uses_cfg else None
    index = torch.arange(tokens.shape[1]).expand_as(tokens)
    return logits_to_probs(cond_logits, uncond_logits, sampling, index)


def summarise(p: torch.Tensor, tokens: torch.Tensor, grid: tuple[int, int]) -> dict[str, Any]:
    """Means and grid maps of the statistics in the module docstring; ``p: [B, N, V]``, ``tokens: [B, N]``."""
    H, W = grid
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
        out[name] = float(values.nanmean())
        out[f"{name}_map"] = values.nanmean(0).view(H, W).tolist()
        out[f"{name}_by_row"] = values.view(-1, H, W).nanmean(dim=(0, 2)).tolist()
    out["fraction_positions_top1_over_0.9"] = float((per_position["top1"] > 0.9).double().mean())
    return out


def token_statistics(model: LlamaGenTransformer, labels: list[int], sampling: SamplingConfig, seed: int = 0,
                     batch_size: int = 16) -> dict[str, Any]:
    """Draw one AR sample per label (seed + i) and summarise the sampling distributions along the way."""
    ps, toks = [], []
    for start in range(0, len(labels), batch_size):
        chunk = labels[start:start + batch_size]
        cond = Condition(class_labels=torch.tensor(chunk))
        gens = [torch.Generator().manual_seed(seed + start + i) for i in range(len(chunk))]
        tokens, _ = decode(model, cond, sampling, "ar", gens)
        ps.append(sampling_distributions(model, tokens, cond, sampling))
        toks.append(tokens)
    result = summarise(torch.cat(ps), torch.cat(toks), model.layout.grid)
    result.update(samples=len(labels), guidance_scale=sampling.guidance_scale, top_k=sampling.top_k,
                  temperature=sampling.temperature)
    return result
