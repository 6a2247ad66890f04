"""Continuous-token methods (MAR): schedules of the continuous decoder's verbs.

Each method runs on :class:`arvis.engine.continuous.ContinuousDecoder`; the acceptance math of the speculative
ones is :mod:`arvis.acceptance.continuous`.

- ``ar`` (the baseline, lossless): MAR's masked sampler (LTH14/mar ``MAR.sample_tokens``: a random order per
  image, ``num_iter`` iterations on the cosine schedule, the head's guidance ramped with the share decoded), or,
  on the causal raster variant (``MARTransformer(causal=True)``), one token per forward with a KV cache.
- ``cspd-exact`` (exact; causal variant): continuous speculative decoding (CSpD, Wang et al., 2024,
  arXiv:2411.11925) made exact. A small *draft* causal MAR proposes ``window`` tokens, each with the whole
  denoising trajectory its head followed; the *target* evaluates the last committed token and the drafts in
  **one** forward (KV cache), which gives its ``z`` for every window position and the one after;
  :func:`~arvis.acceptance.continuous.verify_window_exact` accepts the drafts' trajectories with
  ``min(1, p(τ)/q(τ))`` and draws the first rejected position from the residual over trajectories.
- ``cspd`` (lossy; masked MAR): CSpD as published (MarkXCloud/CSpD): the target alone decodes the first
  iterations, then the draft decodes and the target verifies every ``verify_every`` iterations with the
  tempered final-transition ratio.

Randomness: one generator drives a batch, or one per image; then every random draw of a row comes from its
own generator and the number of draws depends on that row's state alone (full windows, the residual rounds
row by row), so an image does not depend on the batch it is decoded in, and batches still decode together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from arvis.acceptance.continuous import Trajectory, verify_window_cspd, verify_window_exact
from arvis.engine.continuous import DRAFT, TARGET, Conditioning, ContinuousDecoder
from arvis.engine.sampling import SamplingConfig
from arvis.engine.stats import BatchStats
from arvis.methods.base import DecodingMethod, register_method, require
from arvis.methods.catalog import DecoderKind, MethodInfo, method_info
from arvis.methods.registry import build_method
from arvis.models.mar import MARModel
from arvis.utils.random import GeneratorArg


def _masked_steps(decoder: ContinuousDecoder) -> Iterator[tuple[int, float, torch.Tensor, int]]:
    """MAR's masked iterations: ``(step, strength, positions predicted now [B, k], tokens masked before)``,
    iterations that predict nothing skipped. The order is the request's first random draw."""
    orders = decoder.random.uniform((decoder.L,)).argsort(dim=-1)  # [B, L] a random permutation per image
    masked = decoder.L
    for step, (count, strength) in enumerate(decoder.mask_schedule()):
        if count == 0:
            continue
        # The order's entries [masked − count, masked), in position order per image (the official sampler
        # indexes z with a row-major boolean mask).
        yield step, strength, orders[:, masked - count: masked].sort(dim=-1).values, masked
        masked -= count


def _no_bonus(z: torch.Tensor | None) -> torch.Tensor | None:
    """``z [B, W, C]`` with a bonus column (the last repeated): the published rule commits every position of a
    masked window and draws no bonus token, but the verifier takes ``[B, W+1, C]``."""
    return None if z is None else torch.cat([z, z[:, -1:]], 1)


def _check_speculative(decoder: ContinuousDecoder, draft: MARModel, name: str, causal: bool) -> None:
    variant = "causal raster variant (causal=True)" if causal else "masked MAR (causal=False)"
    for model, role in ((decoder.target, "transformer"), (draft, "draft_transformer")):
        if model.is_causal != causal:
            raise ValueError(f"{role}: {name} runs on the {variant}"
                             + ("" if causal else "; use cspd-exact on the causal variant"))
    decoder.target.check_draft(draft)
    if decoder.temperature == 0:
        raise ValueError(f"temperature: {name} compares densities; it needs temperature > 0")


@register_method
@dataclass(frozen=True)
class ContinuousBaseline(DecodingMethod):
    """Plain decoding of a continuous-token model: MAR's masked sampler, or one token per forward on the causal
    variant (module docstring).

    Attributes:
        final_std: causal variant only: the std of a Gaussian added to every token (0: MAR's sampler), the
            sampler ``cspd-exact`` with the same ``final_std`` is exact for.
    """

    info: ClassVar[MethodInfo] = method_info("ar", DecoderKind.CONTINUOUS)
    final_std: float = 0.0

    def __post_init__(self) -> None:
        self._check_declared()

    @torch.no_grad()
    def run(self, decoder: ContinuousDecoder) -> dict[str, Any]:
        target, L = decoder.target, decoder.L
        if not target.is_causal:
            if self.final_std:
                raise ValueError("final_std: only the causal variant's AR baseline takes it (masked MAR samples as "
                                 "MAR)")
            for step, strength, positions, masked in _masked_steps(decoder):
                cond = decoder.evaluate(target, ~decoder.known, masked, positions)
                decoder.commit(positions, decoder.sample(target, cond, strength), cond.forward)
                decoder.end_step(step)
            extra = {"num_iter": decoder.num_iter}
        else:
            cache = decoder.allocate(target)
            cond = decoder.prefill(target, cache)  # z of token 0
            for j in range(L):
                x = decoder.sample(target, cond, decoder.strength(j + 1), self.final_std)  # [B, 1, D]
                decoder.commit(j, x, cond.forward)
                decoder.end_step(j)
                if j + 1 < L:
                    cond = decoder.feed(target, cache, x, j)
            extra = {"final_std": self.final_std} if self.final_std else {}
        return {"head_steps": L * target.sampling_steps, "head_forwards": decoder.head_forwards, **extra}


@register_method
@dataclass(frozen=True)
class ContinuousSpeculative(DecodingMethod):
    """Exact continuous speculative decoding on the causal variant (module docstring).

    Round by round (per image with ``n`` committed tokens; token 0 comes from the target's prefill):

    1. draft catch-up: feed the last two committed tokens (only token 0 in the first round) → the draft's ``z``
       of position ``n``; then ``window`` draft samples, feeding each but the last (``window`` draft forwards);
    2. one target forward over ``[token n−1, d_0 … d_{window−1}]`` → the target's ``z`` of ``n … n+window``;
    3. verify, commit the accepted drafts and the recovered or bonus token.

    The caches roll back by position: the next round writes again from the first slot whose token changed.
    Every round drafts a full window for every image, also near the end: positions past the last token are
    drafted and verified (at the model's last slot) but never committed or counted; finished images ride along.

    The sampler it is exact for: the target head with a *constant* guidance strength (a window spans positions)
    and ``final_std``: with 0 (MAR's deterministic last step) an accepted trajectory maps to the target's token,
    not the draft's, which ends the window there (about one token per verify); with ``final_std > 0`` whole
    windows commit, exact for ``ar`` with the same ``final_std``.

    Attributes:
        window: tokens the draft proposes per target forward; ``None`` (the default): 4 with ``final_std > 0``,
            and 1 with ``final_std = 0``: there the context break ends every window at its first position, so a
            longer window only adds draft trajectories (``S`` sequential head calls each, the bulk of a round's
            time on small models) that are never committed. The window does not change the distribution.
        final_std: the std draft, target and baseline add at the head's last step.
        max_rounds: residual proposals per rejected position before the counted fallback.
        draft_model: the draft (supplied by the pipeline).
    """

    info: ClassVar[MethodInfo] = method_info("cspd-exact", DecoderKind.CONTINUOUS)
    window: int | None = None
    final_std: float = 0.0
    max_rounds: int = 1024
    draft_model: MARModel | None = None

    def __post_init__(self) -> None:
        self._check_declared()

    @property
    def window_size(self) -> int:
        """The window this run drafts (``window``, or its default for this ``final_std``)."""
        if self.window is not None:
            return self.window
        return 4 if self.final_std > 0 else 1

    @torch.no_grad()
    def run(self, decoder: ContinuousDecoder) -> dict[str, Any]:
        draft = require(self.draft_model, "cspd-exact needs a draft model (the pipeline's draft_transformer and "
                                          "draft_head)")
        _check_speculative(decoder, draft, self.name, causal=True)
        if decoder.guided and decoder.sampling.cfg_schedule != "constant":
            raise ValueError("cfg_schedule: speculative windows span positions, so guidance must be constant "
                             "(cfg_schedule='constant'; use the same for the AR baseline)")
        target, B, L, D, gamma, fs = decoder.target, decoder.B, decoder.L, decoder.D, self.window_size, self.final_std
        w = decoder.guidance_scale  # constant over the decode
        p, q = decoder.sampler(target, w), decoder.sampler(draft, w)
        cache_t, cache_d = decoder.allocate(target), decoder.allocate(draft)
        zt = decoder.prefill(target, cache_t)
        decoder.prefill(draft, cache_d, role=DRAFT)
        decoder.commit(0, decoder.trajectories(target, zt, w, fs).token, zt.forward)
        decoder.end_step(zt.forward)
        n = torch.ones(B, dtype=torch.long, device=decoder.device)  # [B] tokens committed
        zero = torch.zeros(B, dtype=torch.long, device=decoder.device)
        drafted, accepted, rounds, fallbacks = zero, zero, zero, zero
        offsets = torch.arange(gamma + 1, device=decoder.device)
        first_round = True
        while True:
            n_list = n.tolist()  # host sync: once a round
            active = [b for b in range(B) if n_list[b] < L]
            if not active:
                break
            # 1. draft catch-up (the last two committed tokens; token 0 alone in the first round) and proposals
            if first_round:
                feed, start = decoder.tokens[:, :1], zero
            else:
                start = n - 2
                feed = decoder.tokens.gather(1, (start[:, None] + offsets[:2])[..., None].expand(-1, -1, D))
            zd = decoder.feed(draft, cache_d, feed, start, DRAFT, active).select(slice(-1, None))
            drafts, zds = [], []
            for i in range(gamma):
                zds.append(zd)
                drafts.append(decoder.trajectories(draft, zd, w, fs))  # [B, 1]
                if i < gamma - 1:  # past the end (or a finished row): the last slot, never committed
                    zd = decoder.feed(draft, cache_d, drafts[-1].token, (n + i).clamp_max(L - 1), DRAFT, active)
            proposed, z_draft = Trajectory.cat(drafts), Conditioning.cat(zds)  # [B, γ]
            # 2. one target forward over the last committed token and the drafts
            last = decoder.tokens.gather(1, (n - 1)[:, None, None].expand(-1, 1, D))
            zt = decoder.feed(target, cache_t, torch.cat([last, proposed.token], 1), n - 1, samples=active)
            # 3. verify and commit
            with decoder.clock.measure("head"):
                ver = verify_window_exact(p, q, proposed, zt.z, z_draft.z, generator=decoder.generator,
                                          z_target_uncond=zt.z_uncond, z_draft_uncond=z_draft.z_uncond,
                                          final_std=fs, max_rounds=self.max_rounds)
            left = L - n  # positions past the end are drafted but not counted
            counts = torch.minimum(ver.num_tokens, left)  # 0 for finished rows
            decoder.commit(n[:, None] + offsets, ver.tokens, zt.forward, valid=offsets < counts[:, None])
            running = left > 0
            drafted = drafted + torch.where(running, left.clamp_max(gamma), 0)
            accepted = accepted + torch.where(running, torch.minimum(ver.num_accepted, left), 0)
            rounds = rounds + torch.where(running, ver.resample_rounds, 0)
            fallbacks = fallbacks + torch.where(running, ver.fallbacks, 0)
            n, first_round = n + counts, False
            decoder.end_step(zt.forward)
        drafted_l, accepted_l = drafted.tolist(), accepted.tolist()
        return {"per_sample": {"acceptance_rate": [a / max(d, 1) for a, d in zip(accepted_l, drafted_l, strict=True)],
                               "drafted": drafted_l, "accepted": accepted_l, "resample_rounds": rounds.tolist(),
                               "fallbacks": fallbacks.tolist()},
                "window": gamma, "final_std": fs, "head_steps_per_token": target.sampling_steps}


@register_method
@dataclass(frozen=True)
class PublishedCSpD(DecodingMethod):
    """CSpD as published (Wang et al., 2024, arXiv:2411.11925; MarkXCloud/CSpD) on masked MAR — **lossy**.

    The target alone decodes MAR's first iterations (``prefill_ratio`` of ``num_iter``, token pre-filling);
    then a small masked *draft* MAR decodes the iterations, and after every ``verify_every``-th iteration (and
    the last) the target evaluates, in one forward, every position drafted since its last forward, conditioned
    only on the tokens known before them; each drafted token is accepted with the tempered final-transition
    ratio (``tau``) along the trajectory the target follows on the draft's own noise, and a rejected one is
    resampled (up to ``max_tries``; then the target's aligned token, counted in ``fallbacks``). Every position of
    the window is committed (the reference's independent rule): the tokens of a masked iteration have no
    left-to-right factorisation to verify in order, so no rule here is exact.

    Attributes:
        verify_every: draft iterations between target verifications (the reference's ``num_draft``).
        prefill_ratio: fraction of the iterations decoded by the target alone.
        tau: tempering of the acceptance ratio (the reference's ``inner_temperature``).
        max_tries: resampling proposals per rejected token before the counted fallback.
        draft_model: the masked draft (supplied by the pipeline).
    """

    info: ClassVar[MethodInfo] = method_info("cspd", DecoderKind.CONTINUOUS)
    verify_every: int = 8
    prefill_ratio: float = 0.15
    tau: float = 42.0
    max_tries: int = 100
    draft_model: MARModel | None = None

    def __post_init__(self) -> None:
        self._check_declared()

    @torch.no_grad()
    def run(self, decoder: ContinuousDecoder) -> dict[str, Any]:
        draft = require(self.draft_model, "cspd needs a draft model (the pipeline's draft_transformer and draft_head)")
        _check_speculative(decoder, draft, self.name, causal=False)
        target, B, L = decoder.target, decoder.B, decoder.L
        milestone = decoder.num_iter * self.prefill_ratio
        last = max(i for i, (count, _) in enumerate(decoder.mask_schedule()) if count > 0)
        mask = torch.ones(B, L, dtype=torch.bool, device=decoder.device)  # neither committed nor drafted
        verified_masked = L  # tokens not committed
        pending: list[tuple[torch.Tensor, Trajectory]] = []  # drafted since the last target forward
        drafted = accepted = tries = fallbacks = 0
        for step, strength, positions, masked in _masked_steps(decoder):
            prefill = step <= milestone  # token pre-filling: the target alone
            model = target if prefill else draft
            cond = decoder.evaluate(model, mask, masked, positions, role=TARGET if prefill else DRAFT)
            traj = decoder.trajectories(model, cond, strength)  # [B, k]
            mask, masked_after = mask.scatter(1, positions, False), masked - positions.shape[1]
            if prefill:
                decoder.commit(positions, traj.token, cond.forward)
                verified_masked = masked_after
            else:
                decoder.write(positions, traj.token)
                pending.append((positions, traj))
                drafted += positions.shape[1]
                if (step % self.verify_every == 0 and step != 0) or step == last:
                    window = torch.cat([p for p, _ in pending], 1)  # [B, W]
                    W = window.shape[1]
                    # conditioned only on the tokens known before the window
                    zt = decoder.evaluate(target, ~decoder.known, verified_masked, window)
                    with decoder.clock.measure("head"):
                        ver = verify_window_cspd(decoder.sampler(target, strength),
                                                 Trajectory.cat([t for _, t in pending]), _no_bonus(zt.z),
                                                 generator=decoder.generator, z_target_uncond=_no_bonus(zt.z_uncond),
                                                 tau=self.tau, max_tries=self.max_tries, independent=True)
                    decoder.commit(window, ver.tokens[:, :W], zt.forward)
                    accepted += int(ver.num_accepted.sum())
                    tries += int(ver.resample_rounds.sum())
                    fallbacks += int(ver.fallbacks.sum())
                    pending, verified_masked = [], masked_after
            decoder.end_step(step)
        return {"acceptance_rate": accepted / max(B * drafted, 1), "drafted": drafted, "accepted": accepted / B,
                "resample_tries": tries / B, "fallbacks": fallbacks / B, "num_iter": decoder.num_iter,
                "verify_every": self.verify_every, "prefill_ratio": self.prefill_ratio, "tau": self.tau,
                "head_steps": L * target.sampling_steps}


def decode_continuous(target: MARModel, labels: torch.Tensor, sampling: SamplingConfig,
                      method: str | DecodingMethod = "ar", generator: GeneratorArg = None,
                      on_step: Callable[[ContinuousDecoder], None] | None = None, num_iter: int = 64, **options: Any
                      ) -> tuple[torch.Tensor, BatchStats]:
    """Generate continuous tokens for a batch of class labels (the continuous counterpart of
    :func:`arvis.methods.decode`).

    Args:
        target: the model (transformer and head). labels: ``[B]`` class ids.
        sampling: settings with the ``mar`` guidance rule. method: a continuous method's name or object.
        generator: one generator, one per image, or ``None``. on_step: callback after every step.
        num_iter: MAR's masked iterations (masked models).
        **options: the method's options; here (no pipeline) also ``draft_model=`` (a :class:`MARModel`).

    Returns:
        ``(tokens [B, L, D], statistics)``.
    """
    from arvis.methods.registry import split_resources

    user_options, resources = split_resources(options)
    method_obj = build_method(method, DecoderKind.CONTINUOUS, resources, **user_options)
    decoder = ContinuousDecoder(target, labels, sampling, generator, method_obj.name, on_step, num_iter)
    extra = method_obj.run(decoder)
    return decoder.tokens, decoder.finish(extra)


__all__ = ["ContinuousBaseline", "ContinuousSpeculative", "PublishedCSpD", "decode_continuous"]
