"""Relaxed (lossy) acceptance: LANTERN, LANTERN++ and arvis's bounded relaxation.

LANTERN (Jang et al., ICLR 2025, arXiv:2410.03355) and LANTERN++ (arXiv:2502.06352) accept a draft
``x`` more easily by lending it the target mass of its latent neighbours (nearest codebook entries of
the image tokenizer). With ``c_m`` the ``p``-mass of ``x``'s first ``m`` neighbours:

- LANTERN: ``m* = max{m <= k : c_m <= δ}``; LANTERN++: ``m* = max{m <= k : c_m <= (λ − 1)·p(x)}``;
- ``p̃_x`` = ``p`` with those ``m*`` neighbours' mass moved onto ``x``; accept iff
  ``U <= p̃_x(x) / q(x)``, else sample ``normalize(max(0, p̃_x − q))``.

A position without a draft (``q = 0``: the bonus position after a fully accepted window, positions
past the end, undrafted positions) has nothing to lend mass to: its token is drawn from ``p`` itself,
exactly as in exact acceptance. (Relaxing there would pull mass toward whatever token id happens to
sit in the draft slot.)

Which bound holds. Every bound here is *per token, given the prefix*: the distance between the
distribution of one committed token and the target's conditional ``p`` at that position. Over an
image of ``n`` relaxed tokens the distance between sequence distributions can grow up to ``n·δ``.

- LANTERN with a deterministic draft (one-hot ``q``): the output is exactly ``p̃_x``, so
  ``TV(output, p) = c_{m*} <= δ``. With *sampled* drafts ``p̃_x`` depends on the sampled ``x``; the
  output is a mixture whose distance to ``p`` is NOT bounded by ``δ`` (LANTERN's own ``c_{m*}``
  understates it several-fold). :func:`realised_output_distribution` computes that mixture exactly
  (closed form, vectorised), and :func:`relaxed_step` reports its TV to ``p``.
- The *bounded relaxation* (arvis) keeps the promise for any drafter: per position it builds ONE
  relaxed target ``π`` from ``p`` and ``q`` only — moving at most ``δ`` of ``p``'s mass along
  latent-neighbour edges, from tokens where ``p > q`` to neighbours where ``q > p``, nearest first —
  then runs exact acceptance toward ``π``. The output is exactly ``π``: ``TV(output, p) <= δ`` for any
  ``q``, and the acceptance probability ``1 − TV(π, q)`` rises by exactly the mass moved.

GSD, Grouped Speculative Decoding (So et al., ICCV 2025, arXiv:2508.07747; its code builds on SJD), accepts a
draft ``x`` when the *group* of tokens visually equivalent to it is likely enough: ``G(x) = {x}`` plus the
latent neighbours ``g`` of ``x`` that the target ranks close to it (``|rank_p(g) − rank_p(x)| <= ranks``) with
a close probability (``|p(g) − p(x)| < gap``), and ``x`` is accepted iff ``U < min(1, p(G)/q(G))``; on
rejection the token is drawn from ``normalize(max(0, p − q))`` (the published rule; the group is dynamic:
it depends on this ``p``). No bound is claimed: :func:`gsd_output_distribution` computes the output exactly,
and its realised TV is reported like the other rules'. arvis's static filter is the codebook's ``k`` nearest
entries (the reference thresholds the squared distance of the model's input embeddings, 0.5 on Lumina-mGPT).

Only image tokens are ever relaxed: structural tokens (and any token outside the image range) have
no neighbours here and keep their exact mass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arvis.acceptance.speculative import sample_residual, speculative_step, token_probability
from arvis.utils.modes import ACCEPTANCE_KINDS as RULES
from arvis.utils.modes import AcceptanceKind


@dataclass(frozen=True)
class AcceptanceRule:
    """How drafts are verified.

    Attributes:
        kind: ``exact`` (lossless), ``lantern``, ``lantern++``, ``gsd`` (published, lossy) or ``bounded``
            (lossy, ``TV <= delta`` per token given the prefix, for any drafter).
        k: neighbours per token used by the relaxation (<= the stored neighbourhood size).
        delta: LANTERN's / the bounded rule's total-variation budget per token, in [0, 1].
        lam: LANTERN++'s λ >= 1.
        ranks: GSD: a neighbour joins the group when the target ranks it within this many places of the draft.
        gap: GSD: ... and its target probability is within ``gap`` of the draft's.
        tv: LANTERN / LANTERN++ / GSD: also compute the realised TV per token (an exact ``O(V·k)`` output
            distribution per verified position, about a fifth of GSD's batch-1 latency on a CPU, so only on
            request; the bounded rule's TV is the mass it moves and always comes free).
    """

    kind: AcceptanceKind = "exact"
    k: int = 10
    delta: float = 0.1
    lam: float = 5.0
    ranks: int = 7
    gap: float = 0.15
    tv: bool = False

    def __post_init__(self) -> None:
        if self.kind not in RULES:
            raise ValueError(f"acceptance must be one of {RULES}, got {self.kind!r}")
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise ValueError(f"k must be an integer >= 1, got {self.k!r}")
        if not 0.0 <= self.delta <= 1.0:
            raise ValueError(f"delta must be in [0, 1], got {self.delta!r}")
        if not self.lam >= 1.0:
            raise ValueError(f"lam (LANTERN++ λ) must be >= 1, got {self.lam!r}")
        if not isinstance(self.ranks, int) or isinstance(self.ranks, bool) or self.ranks < 0:
            raise ValueError(f"ranks (GSD) must be an integer >= 0, got {self.ranks!r}")
        if not 0.0 <= self.gap <= 1.0:
            raise ValueError(f"gap (GSD) must be in [0, 1], got {self.gap!r}")
        if not isinstance(self.tv, bool):
            raise ValueError(f"tv must be a boolean, got {self.tv!r}")

    @property
    def lossless(self) -> bool:
        return self.kind == "exact"


def _lantern_take(p_nb: torch.Tensor, valid: torch.Tensor, p_draft: torch.Tensor, rule: AcceptanceRule
                  ) -> torch.Tensor:
    """The neighbours LANTERN / LANTERN++ lend to a draft: the longest prefix of ``m*`` valid ones.

    Args:
        p_nb: ``[..., k]`` ``p``-mass of a draft's nearest-first neighbours (0 where not ``valid``).
        valid: ``[..., k]`` bool. p_draft: ``[...]`` ``p`` of the draft (LANTERN++'s limit).

    Returns:
        ``[..., k]`` bool.
    """
    cum = p_nb.cumsum(-1)
    if rule.kind == "lantern":
        limit = torch.full_like(cum[..., :1], rule.delta)
    else:  # lantern++
        limit = (rule.lam - 1.0) * p_draft[..., None]
    return (cum <= limit) & valid & (valid.long().cumprod(-1) > 0)  # c_m nondecreasing: a prefix of m


def lantern_relaxed_target(p: torch.Tensor, drafts: torch.Tensor, neighbours: torch.Tensor, rule: AcceptanceRule,
                           drafted: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """LANTERN / LANTERN++'s ``p̃_x`` for each draft ``x``.

    Args:
        p: ``[..., V]`` targets. drafts: ``[...]``. neighbours: ``[V, K]`` nearest-first neighbour ids
            (``-1`` = none, e.g. structural tokens), ``K >= rule.k``.
        drafted: ``[...]`` bool, where there really is a draft (default: everywhere). Elsewhere
            ``p̃ = p``: nothing is lent to a token that was not proposed.

    Returns:
        ``(p̃ [..., V], moved [...])`` where ``moved = c_{m*}`` is the mass lent to the draft.
    """
    nb = neighbours[drafts][..., : rule.k]  # [..., k]
    valid = nb >= 0
    ids = nb.clamp_min(0)
    raw = p.gather(-1, ids)
    p_nb = torch.where(valid, raw, 0.0)
    take = _lantern_take(p_nb, valid, token_probability(p, drafts), rule)
    if drafted is not None:
        take = take & drafted[..., None]
    moved = (p_nb * take).sum(-1)
    relaxed = p.scatter(-1, ids, torch.where(take, 0.0, raw))  # untaken entries rewrite their own value
    relaxed = relaxed.scatter_add(-1, drafts[..., None], moved[..., None])
    return relaxed, moved


def lantern_step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, uniform: torch.Tensor,
                 exponential_noise: torch.Tensor, neighbours: torch.Tensor, rule: AcceptanceRule
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Published LANTERN / LANTERN++ acceptance at every position that has a draft.

    Positions without a draft (``q(d) = 0``, e.g. ``q = 0`` at the bonus position) are not relaxed:
    their token is drawn from ``p``.

    Args:
        p, q: ``[..., V]``; drafts, uniform: ``[...]``; exponential_noise: ``[..., V]``;
        neighbours: ``[V, K]``.

    Returns:
        ``(tokens [...], accepted [...], tv [...])``; ``tv`` is the realised TV of each position's
        output distribution to ``p`` (per token given the prefix; see :func:`realised_output_distribution`),
        ``None`` unless ``rule.tv``.
    """
    p, q = p.float(), q.float()
    drafted = token_probability(q, drafts) > 0
    relaxed, _ = lantern_relaxed_target(p, drafts, neighbours, rule, drafted)
    tokens, accepted = speculative_step(relaxed, q, drafts, uniform, exponential_noise)
    return tokens, accepted, realised_tv(p, q, neighbours, rule) if rule.tv else None


def lantern_output_distribution(p: torch.Tensor, q: torch.Tensor, neighbours: torch.Tensor, rule: AcceptanceRule,
                                max_elements: int = 1 << 22) -> torch.Tensor:
    """Exact output distribution of one LANTERN / LANTERN++ step with the draft ``x ~ q``, in closed form.

    The output is ``Σ_x q(x)·[α_x·1{x} + (1 − α_x)·r_x]`` with ``α_x = min(1, p̃_x(x)/q(x))`` and
    ``r_x = max(0, p̃_x − q)/Z_x``. ``p̃_x`` differs from ``p`` only at ``x`` and its taken
    neighbours, so with ``R = max(0, p − q)`` every ``max(0, p̃_x − q)`` is ``R`` plus at most
    ``k + 1`` corrections and ``Z_x`` follows in ``O(k)``:

        out = min(q, p + c) + W·R + Σ_x w_x·(max(0, p(x) + c_x − q(x)) − R(x))·1{x}
                                    − Σ_x w_x Σ_{j taken by x} R(j)·1{j}

    with ``c_x`` the mass lent to ``x``, ``w_x = (q(x) − min(q(x), p(x) + c_x)) / Z_x`` and ``W = Σ w_x``.
    Cost ``O(V·k)`` per position, vectorised over leading dimensions and chunked over ``x`` so that
    intermediates stay below ``max_elements``. Rows with ``q = 0`` (no draft) output ``p``.

    Args:
        p, q: ``[..., V]`` (fp32 or fp64; the math runs in that precision). neighbours: ``[V, K]``.

    Returns:
        ``[..., V]`` the distribution of the token this step commits.
    """
    V = p.shape[-1]
    nb = neighbours[:, : rule.k].to(p.device)
    k = nb.shape[-1]
    R = (p - q).clamp_min(0.0)
    Z = R.sum(-1, keepdim=True)
    out = torch.empty_like(p)  # every chunk of x writes out[..., x]
    W = torch.zeros_like(Z)
    taken_weight = torch.zeros_like(p)  # Σ_x w_x over the drafts x that take each token
    rows = max(1, p[..., 0].numel())
    chunk = max(1, min(V, max_elements // max(1, rows * k)))
    for start in range(0, V, chunk):  # chunks of drafts x: bounded memory, no per-token loop
        x = slice(start, min(V, start + chunk))
        px, qx = p[..., x], q[..., x]
        ids = nb[x].clamp_min(0)  # [c, k]
        valid = nb[x] >= 0
        p_nb = torch.where(valid, p[..., ids.flatten()].unflatten(-1, ids.shape), 0.0)  # [..., c, k]
        take = _lantern_take(p_nb, valid, px, rule) & (qx > 0)[..., None]  # a draft q never proposes lends nothing
        lent = (p_nb * take).sum(-1)
        accept = torch.minimum(qx, px + lent)
        rx_new = (px + lent - qx).clamp_min(0.0)
        r_taken = (R[..., ids.flatten()].unflatten(-1, ids.shape) * take).sum(-1)
        zx = Z - R[..., x] + rx_new - r_taken
        w = torch.where(zx > 0, (qx - accept).clamp_min(0.0) / zx.clamp_min(torch.finfo(p.dtype).tiny), 0.0)
        W = W + w.sum(-1, keepdim=True)
        out[..., x] = accept + w * (rx_new - R[..., x])
        taken_weight = taken_weight.index_add(-1, ids.flatten(), (w[..., None] * take).flatten(-2))
    out = out + (W - taken_weight) * R
    has_draft = q.sum(-1, keepdim=True) > 0
    return torch.where(has_draft, out, p)


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
    p = p if p.dtype == torch.float64 else p.float()  # fp32 math; fp64 inputs stay fp64 (exact checks)
    q = q.to(p.dtype)
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
    """Exact acceptance toward the bounded relaxation: output ~ ``π``, ``TV(π, p) <= δ`` for any ``q``
    (per token given the prefix).

    Returns ``(tokens, accepted, moved)``; ``moved`` is the realised per-token TV to ``p`` (exact).
    """
    pi, moved = bounded_relaxed_target(p, q, neighbours, rule)
    tokens, accepted = speculative_step(pi, q, drafts, uniform, exponential_noise)
    return tokens, accepted, moved


def _target_ranks(p: torch.Tensor) -> torch.Tensor:
    """``[..., V]`` each token's rank under ``p`` (0: the likeliest; ties by id)."""
    order = torch.sort(p, dim=-1, descending=True, stable=True).indices
    return torch.empty_like(order).scatter_(-1, order, torch.arange(p.shape[-1], device=p.device).expand_as(order))


def _gsd_group_mass(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, nb: torch.Tensor, rank: torch.Tensor,
                    rule: AcceptanceRule) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p(G(x)), q(G(x)))`` for drafts ``x [...]`` with neighbour ids ``nb [..., k]`` (``-1``: none) and the
    target's ranks ``rank [..., V]``: the draft plus the neighbours the target ranks and weighs like it."""
    valid = nb >= 0
    ids = nb.clamp_min(0)
    p_x, p_nb = token_probability(p, x), p.gather(-1, ids)
    rank_x, rank_nb = rank.gather(-1, x[..., None]), rank.gather(-1, ids)
    member = valid & ((rank_nb - rank_x).abs() <= rule.ranks) & ((p_nb - p_x[..., None]).abs() < rule.gap)
    return (p_x + (p_nb * member).sum(-1), token_probability(q, x) + (q.gather(-1, ids) * member).sum(-1))


def gsd_step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, uniform: torch.Tensor, noise: torch.Tensor,
             neighbours: torch.Tensor, rule: AcceptanceRule) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """GSD's grouped acceptance at every position (module docstring): accept ``x`` iff ``U · q(G) < p(G)``
    (and ``q(x) > 0``: positions without a draft draw from ``p``), else draw from ``normalize(max(0, p − q))``.

    Returns ``(tokens, accepted, tv)``: ``tv`` is the realised TV of each position's output to ``p`` (``None``
    unless ``rule.tv``).
    """
    p, q = p.float(), q.float()
    nb = neighbours.to(p.device)[drafts][..., : rule.k]
    p_group, q_group = _gsd_group_mass(p, q, drafts, nb, _target_ranks(p), rule)
    accepted = (token_probability(q, drafts) > 0) & (uniform * q_group < p_group)
    recovered = sample_residual(p, q, noise)
    return (torch.where(accepted, drafts, recovered), accepted,
            realised_tv(p, q, neighbours, rule) if rule.tv else None)


def gsd_output_distribution(p: torch.Tensor, q: torch.Tensor, neighbours: torch.Tensor, rule: AcceptanceRule,
                            max_elements: int = 1 << 22) -> torch.Tensor:
    """Exact output distribution of one GSD step with the draft ``x ~ q``, in closed form:
    ``out = q·α + (Σ_x q(x)(1 − α_x))·normalize(max(0, p − q))`` with ``α_x = min(1, p(G(x))/q(G(x)))``.

    Cost ``O(V·k)`` per position, chunked over ``x`` (intermediates below ``max_elements``). Rows with
    ``q = 0`` (no draft) output ``p``.

    Args:
        p, q: ``[..., V]`` (the math runs in their precision). neighbours: ``[V, K]``.
    """
    V = p.shape[-1]
    nb = neighbours[:, : rule.k].to(p.device)
    rank = _target_ranks(p)
    alpha = torch.empty_like(p)
    rows = max(1, p[..., 0].numel())
    chunk = max(1, min(V, max_elements // max(1, rows * nb.shape[-1])))
    for start in range(0, V, chunk):  # chunks of drafts x: bounded memory, no per-token loop
        x = torch.arange(start, min(V, start + chunk), device=p.device).expand(*p.shape[:-1], -1)
        p_group, q_group = _gsd_group_mass(p.unsqueeze(-2).expand(*x.shape, V), q.unsqueeze(-2).expand(*x.shape, V),
                                           x, nb[x], rank.unsqueeze(-2).expand(*x.shape, V), rule)
        alpha[..., start: start + x.shape[-1]] = torch.where(
            q_group > 0, (p_group / q_group.clamp_min(torch.finfo(p.dtype).tiny)).clamp_max(1.0), 0.0)
    kept = q * alpha
    r = (p - q).clamp_min(0.0)
    mass = r.sum(-1, keepdim=True)
    rejected = 1.0 - kept.sum(-1, keepdim=True)
    out = kept + rejected * torch.where(mass > 0, r / mass.clamp_min(torch.finfo(p.dtype).tiny), p)
    return torch.where(q.sum(-1, keepdim=True) > 0, out, p)


def realised_output_distribution(p: torch.Tensor, q: torch.Tensor, neighbours: torch.Tensor | None,
                                 rule: AcceptanceRule) -> torch.Tensor:
    """Exact distribution of the token one acceptance step commits, with the draft ``x ~ q``.

    ``p`` for exact acceptance, ``π`` for the bounded rule, LANTERN's mixture
    (:func:`lantern_output_distribution`) for LANTERN / LANTERN++. Per position given the prefix;
    ``q = 0`` (no draft) gives ``p`` for every rule.

    Args:
        p, q: ``[..., V]`` (fp64 inputs give fp64 math, for exact checks). neighbours: ``[V, K]``.

    Returns:
        ``[..., V]``.
    """
    if rule.kind == "exact":
        return p
    if neighbours is None:
        raise ValueError(f"acceptance {rule.kind!r} needs the tokenizer's codebook neighbourhoods")
    if rule.kind == "bounded":
        return bounded_relaxed_target(p, q, neighbours, rule)[0]
    if rule.kind == "gsd":
        return gsd_output_distribution(p, q, neighbours, rule)
    return lantern_output_distribution(p, q, neighbours, rule)


def realised_tv(p: torch.Tensor, q: torch.Tensor, neighbours: torch.Tensor | None, rule: AcceptanceRule
                ) -> torch.Tensor:
    """``TV(output, p)`` of one acceptance step per position, exact (``[..., V]`` → ``[...]``).

    This is the distance per token given the prefix (the draft distributed as ``q``); over a
    sequence of ``n`` tokens the distances can add up to ``n`` times it.
    """
    if rule.kind == "exact":
        return torch.zeros_like(p[..., 0])
    return 0.5 * (realised_output_distribution(p, q, neighbours, rule) - p).abs().sum(-1)


def relaxed_step(rule: AcceptanceRule, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
                 uniform: torch.Tensor, exponential_noise: torch.Tensor, neighbours: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Accept-or-recover under ``rule`` at every position.

    Args:
        rule: the acceptance rule. p, q: ``[..., V]`` (``q = 0`` where there is no draft);
        drafts, uniform: ``[...]``; exponential_noise: ``[..., V]``; neighbours: ``[V, K]`` (relaxed rules).

    Returns:
        ``(tokens [...], accepted [...], tv [...])``: ``tv`` is the realised TV between the distribution
        of each position's output token and ``p`` — exact for every rule (0 for exact acceptance, the
        mass moved for the bounded rule, LANTERN's mixture distance for LANTERN / LANTERN++, GSD's grouped
        output) — for LANTERN / LANTERN++ / GSD only when ``rule.tv`` (else ``None``: its cost is a sizeable share of
        a step). It is a per-token distance given the prefix; per image it can reach the sum over the image's tokens.
    """
    if rule.kind == "exact":
        tokens, accepted = speculative_step(p, q, drafts, uniform, exponential_noise)
        return tokens, accepted, torch.zeros_like(uniform)
    if neighbours is None:
        raise ValueError(f"acceptance {rule.kind!r} needs the tokenizer's codebook neighbourhoods")
    if rule.kind == "bounded":
        return bounded_step(p, q, drafts, uniform, exponential_noise, neighbours, rule)
    if rule.kind == "gsd":
        return gsd_step(p, q, drafts, uniform, exponential_noise, neighbours, rule)
    return lantern_step(p, q, drafts, uniform, exponential_noise, neighbours, rule)
