"""Relaxed (lossy) acceptance: LANTERN, LANTERN++ and arvis's bounded relaxation.

LANTERN (Jang et al., ICLR 2025, arXiv:2410.03355) and LANTERN++ (arXiv:2502.06352) accept a draft
``x`` more easily by lending it the target mass of its latent neighbours (nearest codebook entries of
the image tokenizer). With ``c_m`` the ``p``-mass of ``x``'s first ``m`` neighbours:

- LANTERN: ``m* = max{m <= k : c_m <= δ}``; LANTERN++: ``m* = max{m <= k : c_m <= (λ − 1)·p(x)}``;
- ``p̃_x`` = ``p`` with those ``m*`` neighbours' mass moved onto ``x``; accept iff
  ``U <= p̃_x(x) / q(x)``, else sample ``normalize(max(0, p̃_x − q))``.

Which bound holds (docs/methods.md): with a deterministic draft (one-hot ``q``) the output is exactly
``p̃_x``, so ``TV(output, p) = c_{m*} <= δ``. With *sampled* drafts ``p̃_x`` depends on the sampled
``x``; the output is a mixture whose distance to ``p`` is NOT bounded by ``δ`` (see
:func:`realised_output_distribution` and the tests for a concrete case).

The *bounded relaxation* (arvis) keeps the promise for any drafter: per position it builds ONE
relaxed target ``π`` from ``p`` and ``q`` only — moving at most ``δ`` of ``p``'s mass along
latent-neighbour edges, from tokens where ``p > q`` to neighbours where ``q > p``, nearest first —
then runs exact acceptance toward ``π``. The output is exactly ``π``: ``TV(output, p) <= δ`` for any
``q``, and the acceptance probability ``1 − TV(π, q)`` rises by exactly the mass moved.

Only image tokens are ever relaxed: structural tokens (and any token outside the image range) have
no neighbours here and keep their exact mass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arvis.acceptance.speculative import speculative_step, token_probability

RULES = ("exact", "lantern", "lantern++", "bounded")


@dataclass(frozen=True)
class AcceptanceRule:
    """How drafts are verified.

    Attributes:
        kind: ``exact`` (lossless), ``lantern``, ``lantern++`` (published, lossy) or ``bounded``
            (lossy, ``TV <= delta`` for any drafter).
        k: neighbours per token used by the relaxation (<= the stored neighbourhood size).
        delta: LANTERN's / the bounded rule's total-variation budget, in [0, 1].
        lam: LANTERN++'s λ >= 1.
    """

    kind: str = "exact"
    k: int = 10
    delta: float = 0.1
    lam: float = 5.0

    def __post_init__(self) -> None:
        if self.kind not in RULES:
            raise ValueError(f"acceptance must be one of {RULES}, got {self.kind!r}")
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise ValueError(f"k must be an integer >= 1, got {self.k!r}")
        if not 0.0 <= self.delta <= 1.0:
            raise ValueError(f"delta must be in [0, 1], got {self.delta!r}")
        if not self.lam >= 1.0:
            raise ValueError(f"lam (LANTERN++ λ) must be >= 1, got {self.lam!r}")

    @property
    def lossless(self) -> bool:
        return self.kind == "exact"


def lantern_relaxed_target(p: torch.Tensor, drafts: torch.Tensor, neighbours: torch.Tensor, rule: AcceptanceRule
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """LANTERN / LANTERN++'s ``p̃_x`` for each draft ``x``.

    Args:
        p: ``[..., V]`` targets. drafts: ``[...]``. neighbours: ``[V, K]`` nearest-first neighbour ids
            (``-1`` = none, e.g. structural tokens), ``K >= rule.k``.

    Returns:
        ``(p̃ [..., V], moved [...])`` where ``moved = c_{m*}`` is the mass lent to the draft.
    """
    nb = neighbours[drafts][..., : rule.k]  # [..., k]
    valid = nb >= 0
    raw = p.gather(-1, nb.clamp_min(0))
    p_nb = torch.where(valid, raw, 0.0)
    cum = p_nb.cumsum(-1)
    if rule.kind == "lantern":
        limit = torch.full_like(cum[..., :1], rule.delta)
    else:  # lantern++
        limit = (rule.lam - 1.0) * token_probability(p, drafts)[..., None]
    take = (cum <= limit) & valid & (valid.long().cumprod(-1) > 0)  # c_m nondecreasing: a prefix of m
    moved = (p_nb * take).sum(-1)
    relaxed = p.scatter(-1, nb.clamp_min(0), torch.where(take, 0.0, raw))  # untaken entries rewrite themselves
    relaxed = relaxed.scatter_add(-1, drafts[..., None], moved[..., None])
    return relaxed, moved


def lantern_step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, uniform: torch.Tensor,
                 exponential_noise: torch.Tensor, neighbours: torch.Tensor, rule: AcceptanceRule
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Published LANTERN / LANTERN++ acceptance at every position.

    Returns ``(tokens, accepted, lent_mass)``; ``lent_mass = c_{m*}`` is LANTERN's nominal TV
    (exact only for one-hot ``q``).
    """
    relaxed, moved = lantern_relaxed_target(p.float(), drafts, neighbours, rule)
    tokens, accepted = speculative_step(relaxed, q, drafts, uniform, exponential_noise)
    return tokens, accepted, moved


def bounded_relaxed_target(p: torch.Tensor, q: torch.Tensor, neighbours: torch.Tensor, rule: AcceptanceRule,
                           max_deficit_tokens: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """The bounded relaxation ``π`` of ``p`` toward ``q``, built from ``p`` and ``q`` only.

    Deficit tokens ``b`` (``q(b) > p(b)``) pull mass from their neighbours ``a`` with excess
    (``p(a) > q(a)``), nearest rank first, never more than the excess, the deficit, or the budget
    ``δ`` left. Pulls of one rank that compete for the same ``a`` (or exceed the budget) are scaled
    down proportionally. Moving less than possible is always safe: any ``π`` built this way has
    ``TV(π, p) = moved <= δ``. Only the ``max_deficit_tokens`` largest deficits pull (a cost bound).

    Args:
        p, q: ``[..., V]``. neighbours: ``[V, K]`` (``-1`` = none).

    Returns:
        ``(π [..., V], moved [...])``.
    """
    p = p.float()
    q = q.float()
    excess = (p - q).clamp_min(0.0)
    deficit = (q - p).clamp_min(0.0)
    m = min(max_deficit_tokens, p.shape[-1])
    f, b = deficit.topk(m, dim=-1)  # [..., m] deficits and their tokens
    nb_all = neighbours[b][..., : rule.k]  # [..., m, k]
    budget = torch.full_like(p[..., 0], rule.delta)
    pi = p.clone()
    moved = torch.zeros_like(budget)
    for r in range(nb_all.shape[-1]):
        a = nb_all[..., r]  # [..., m]
        ok = (a >= 0) & (f > 0)
        a_safe = a.clamp_min(0)
        want = torch.where(ok, torch.minimum(f, excess.gather(-1, a_safe)), 0.0)
        demand = torch.zeros_like(excess).scatter_add(-1, a_safe, want)  # total pull on each a
        scale_a = torch.where(demand > 0, (excess / demand.clamp_min(1e-30)).clamp_max(1.0), 1.0)
        want = want * scale_a.gather(-1, a_safe)
        total = want.sum(-1)
        scale_b = torch.where(total > budget, budget / total.clamp_min(1e-30), torch.ones_like(total))
        want = want * scale_b[..., None]
        taken = torch.zeros_like(excess).scatter_add(-1, a_safe, want)
        pi = pi - taken
        pi = pi.scatter_add(-1, b, want)
        excess = (excess - taken).clamp_min(0.0)
        f = (f - want).clamp_min(0.0)
        step = want.sum(-1)
        moved = moved + step
        budget = (budget - step).clamp_min(0.0)
    return pi.clamp_min(0.0), moved


def bounded_step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, uniform: torch.Tensor,
                 exponential_noise: torch.Tensor, neighbours: torch.Tensor, rule: AcceptanceRule
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact acceptance toward the bounded relaxation: output ~ ``π``, ``TV(π, p) <= δ`` for any ``q``.

    Returns ``(tokens, accepted, moved)``; ``moved`` is the realised per-step TV to ``p`` (exact).
    """
    pi, moved = bounded_relaxed_target(p, q, neighbours, rule)
    tokens, accepted = speculative_step(pi, q, drafts, uniform, exponential_noise)
    return tokens, accepted, moved


def relaxed_step(rule: AcceptanceRule, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
                 uniform: torch.Tensor, exponential_noise: torch.Tensor, neighbours: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dispatch on ``rule.kind``; returns ``(tokens, accepted, tv)`` (``tv`` = 0 for exact, the
    bounded rule's exact realised TV, or LANTERN's nominal ``c_{m*}``)."""
    if rule.kind == "exact":
        tokens, accepted = speculative_step(p, q, drafts, uniform, exponential_noise)
        return tokens, accepted, torch.zeros_like(uniform)
    if neighbours is None:
        raise ValueError(f"acceptance {rule.kind!r} needs the tokenizer's codebook neighbourhoods")
    if rule.kind == "bounded":
        return bounded_step(p, q, drafts, uniform, exponential_noise, neighbours, rule)
    return lantern_step(p, q, drafts, uniform, exponential_noise, neighbours, rule)


def realised_output_distribution(p: torch.Tensor, q: torch.Tensor, neighbours: torch.Tensor,
                                 rule: AcceptanceRule) -> torch.Tensor:
    """Exact output distribution of one LANTERN/LANTERN++/bounded step for ``p, q: [V]`` (float64 math).

    Enumerates the draft ``x ~ q``: ``Σ_x q(x) [α_x 1{x} + (1 − α_x) residual(p̃_x, q)]``. O(V²): for
    tests and offline measurement of the realised TV.
    """
    from arvis.acceptance.speculative import acceptance_probability, residual

    p, q = p.double(), q.double()
    if rule.kind == "bounded":
        pi, _ = bounded_relaxed_target(p, q, neighbours, rule)
        targets = pi.double().expand(p.shape[-1], -1)
    elif rule.kind == "exact":
        targets = p.expand(p.shape[-1], -1)
    else:
        xs = torch.arange(p.shape[-1])
        targets, _ = lantern_relaxed_target(p.expand(p.shape[-1], -1), xs, neighbours, rule)
    xs = torch.arange(p.shape[-1])
    alpha = acceptance_probability(targets, q.expand_as(targets), xs)  # [V]
    res = residual(targets, q.expand_as(targets))  # [V, V]
    out = (q * (1 - alpha)) @ res
    out = out + q * alpha
    return out
