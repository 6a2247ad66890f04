"""The continuous decoder (MAR, Li et al., 2024, arXiv:2406.11838): one request's state and the verbs every
continuous-token method is written with.

A continuous-token model (:class:`~arvis.models.mar.MARModel`) is a transformer that turns the tokens known so
far into one condition ``z`` per position, and a diffusion head that samples each token (a float vector) from
its ``z`` in ``S`` denoising steps. :class:`ContinuousDecoder` holds one request's state — the labels and their
CFG pair (class and null embeddings, built once per model), the tokens ``[B, L, D]`` and which of them are
``known`` (committed), the per-image random streams, the forward clock and the statistics recorder shared with
the token engine and the next-scale decoder — and offers small verbs:

- :meth:`~ContinuousDecoder.evaluate`: a masked transformer's ``z`` at given positions (one forward);
- :meth:`~ContinuousDecoder.allocate`, :meth:`~ContinuousDecoder.prefill`, :meth:`~ContinuousDecoder.feed`: the
  causal variant's forwards against a KV cache;
- :meth:`~ContinuousDecoder.sample`: MAR's sampler, the head's tokens at those positions;
- :meth:`~ContinuousDecoder.trajectories`: the head's whole denoising trajectories, for methods that compare
  densities (:mod:`arvis.acceptance.continuous`);
- :meth:`~ContinuousDecoder.write` / :meth:`~ContinuousDecoder.commit`: place drafted tokens / fix tokens as final
  (the decode order is recorded there);
- :meth:`~ContinuousDecoder.end_step` (the step callback) and :meth:`~ContinuousDecoder.finish` (the statistics).

The methods (:mod:`arvis.methods.continuous`) decide which model evaluates which positions when. Every verb
takes the positions of all images at once (``[B, k]``), so the head samples them in one call.

Guidance: MAR's rule (:mod:`arvis.engine.guidance`): ``ε_u + w·(ε_c − ε_u)`` on the head's noise prediction,
``w = 1 + (s − 1)·n/L`` once ``n`` of ``L`` tokens are decoded with the ``linear`` schedule, ``s`` with
``constant``; ``guidance_scale = 1`` runs no unconditional rows. The temperature multiplies the head's
transition std. MAR's masked schedule (:func:`mask_schedule`): ``num_iter`` iterations, the number still masked
after iteration ``k`` following ``floor(L · cos(π/2 · (k+1)/num_iter))``.

Statistics (:class:`~arvis.engine.stats.BatchStats`): ``target_forwards`` counts transformer forwards (a CFG
pair counts once), ``accepted_per_forward`` the tokens each committed; the head is reported apart, in
``extra``: ``head_s`` (wall time inside the head, always) and the figures each method adds.

Randomness: one generator, or one per image; with one per image, image ``b``'s order and all the noise of its
tokens come from its own generator alone, in the same sequence whatever the batch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from arvis.acceptance.continuous import DiffusionSampler, Trajectory, sample_trajectory
from arvis.engine.guidance import RULES, guided_rows, split_rows
from arvis.engine.sampling import SamplingConfig
from arvis.engine.stats import BatchStats, ForwardClock, StatsRecorder, peak_memory_mb
from arvis.models.mar import MARKVCache, MARModel
from arvis.utils.random import GeneratorArg, RandomStreams

TARGET, DRAFT = "target", "draft"


def check_num_iter(num_iter: int) -> int:
    """``num_iter`` if it is a valid count of MAR's masked iterations, else ``ValueError``."""
    if isinstance(num_iter, bool) or not isinstance(num_iter, int) or not 1 <= num_iter <= 4096:
        raise ValueError(f"num_iter must be an integer in [1, 4096] (MAR's masked iterations), got {num_iter!r}")
    return num_iter


def mask_schedule(seq_len: int, num_iter: int, guidance_scale: float = 1.0, cfg_schedule: str = "linear"
                  ) -> list[tuple[int, float]]:
    """MAR's masked schedule: per iteration, ``(tokens predicted, the head's guidance strength)``.

    The strength follows the ``mar`` rule at ``L − masked_after`` of ``L`` tokens, where at least one token stays
    masked until the last iteration (LTH14/mar ``MAR.sample_tokens``). An iteration may predict 0 tokens when
    ``num_iter > seq_len`` (the official sampler then runs a forward for nothing; arvis skips it).
    """
    check_num_iter(num_iter)
    rule = RULES["mar"]
    out, masked = [], seq_len
    for step in range(num_iter):
        target = math.floor(seq_len * math.cos(math.pi / 2.0 * (step + 1) / num_iter))
        after = max(1, min(masked - 1, target))
        count = masked if step >= num_iter - 1 else masked - after
        out.append((count, rule.strength(guidance_scale, seq_len - after, cfg_schedule, total=seq_len)))
        masked = after
    return out


@dataclass(frozen=True)
class Conditioning:
    """A transformer's output at ``k`` positions of every image: what the head samples those tokens from.

    Attributes:
        z: ``[B, k, C]`` the conditional rows.
        z_uncond: ``[B, k, C]`` CFG's unconditional rows, or ``None`` (no guidance).
        forward: the forward's index in the commit timeline (``-1``: a draft forward, which commits nothing).
    """

    z: torch.Tensor
    z_uncond: torch.Tensor | None
    forward: int

    def select(self, index: slice) -> Conditioning:
        """Positions ``index`` of every image (e.g. ``slice(-1, None)``: the last one)."""
        return Conditioning(self.z[:, index], None if self.z_uncond is None else self.z_uncond[:, index],
                            self.forward)

    @staticmethod
    def cat(parts: list[Conditioning]) -> Conditioning:
        """Positions side by side (``[B, Σ k_i, C]``; ``forward`` of the last part)."""
        uncond = [p.z_uncond for p in parts]
        return Conditioning(torch.cat([p.z for p in parts], 1),
                            None if uncond[0] is None else torch.cat(uncond, 1), parts[-1].forward)


def _place(x: torch.Tensor, positions: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """A new ``x [B, L, …]`` with ``values [B, k, …]`` at ``positions [B, k]``; a position ``L`` places nothing.

    Out of place: a tensor handed to a step callback is never changed afterwards."""
    L = x.shape[1]
    out = torch.cat([x, x[:, :1]], 1)  # column L takes what is placed nowhere
    index = positions.reshape(*positions.shape, *[1] * (x.dim() - 2)).expand_as(values)
    return out.scatter_(1, index, values)[:, :L].contiguous()


class ContinuousDecoder:
    """One request's decode state for a continuous-token model (module docstring).

    Args:
        target: the model (:class:`~arvis.models.mar.MARModel`: transformer and head).
        labels: ``[B]`` class ids.
        sampling: settings with the ``mar`` guidance rule (``guidance_scale``, ``cfg_schedule``, ``temperature``).
        generator: one generator, one per image, or ``None``.
        method: the method name recorded in the statistics.
        on_step: called with the decoder after every step of the method (progress, previews): :attr:`step`,
            :attr:`tokens` (drafted ones included) and :attr:`known`.
        num_iter: MAR's masked iterations (masked models; the causal variant decodes one token per forward).
    """

    def __init__(self, target: MARModel, labels: torch.Tensor, sampling: SamplingConfig,
                 generator: GeneratorArg = None, method: str = "ar",
                 on_step: Callable[[ContinuousDecoder], None] | None = None, num_iter: int = 64):
        if not isinstance(target, MARModel):
            raise TypeError(f"target: expected a MARModel (transformer and head), got {type(target).__name__}")
        if sampling.guidance != "mar":
            raise ValueError(f"sampling: a continuous-token model guides by MAR's rule (guidance='mar'), got "
                             f"{sampling.guidance!r}")
        if sampling.top_k != 0 or sampling.top_p != 1.0:
            raise ValueError("sampling: top_k / top_p filter a vocabulary; continuous tokens have none (leave them "
                             "at 0 and 1)")
        self.target, self.sampling, self.method, self.on_step = target, sampling, method, on_step
        self.num_iter = check_num_iter(num_iter)
        self.guidance_scale, self.temperature = float(sampling.guidance_scale), float(sampling.temperature)
        self.guided = sampling.uses_cfg
        t = target.transformer
        self.device = t.mask_token.device
        self.labels = labels.to(self.device)
        B, L = int(labels.shape[0]), t.seq_len
        self.B, self.L, self.D = B, L, t.token_embed_dim
        if isinstance(generator, list | tuple) and len(generator) != B:
            raise ValueError(f"generator: got {len(generator)} generators for {B} images; pass one, or one per image")
        self.random = RandomStreams(generator, B, self.device)
        # the same generators, for the acceptance functions that draw for themselves
        self.generator: GeneratorArg = self.random.shared if self.random.shared is not None else self.random.per_sample
        self.clock = ForwardClock(self.device)
        self.stats = StatsRecorder(B, L, self.device)
        self.tokens = torch.zeros(B, L, self.D, device=self.device)  # [B, L, D] committed, and drafted, tokens
        self.known = torch.zeros(B, L, dtype=torch.bool, device=self.device)  # [B, L] committed
        self.step = -1  # the method's last finished step (what the callback reports)
        self.head_forwards = 0  # batched head calls of sample()
        self._conditions: dict[MARModel, torch.Tensor] = {}
        self._samples = list(range(B))
        self._t0 = time.perf_counter()

    # ------------------------------------------------------------------ guidance and conditions
    def strength(self, decoded: int) -> float:
        """The head's guidance strength once ``decoded`` of the ``L`` tokens are decoded (the ``mar`` rule)."""
        return self.sampling.rule.strength(self.guidance_scale, decoded, self.sampling.cfg_schedule, total=self.L)

    def mask_schedule(self) -> list[tuple[int, float]]:
        """MAR's masked schedule of this request: ``(tokens predicted, strength)`` per iteration."""
        return mask_schedule(self.L, self.num_iter, self.guidance_scale, self.sampling.cfg_schedule)

    def condition(self, model: MARModel) -> torch.Tensor:
        """``[R, E]`` the CFG pair's class embeddings for ``model`` (the labels', then the null class's when
        guided); built once per model and request."""
        cond = self._conditions.get(model)
        if cond is None:
            t = model.transformer
            cond = t.class_embedding(self.labels)
            if self.guided:
                cond = torch.cat([cond, t.class_embedding(None, self.B)])
            self._conditions[model] = cond
        return cond

    def _count(self, role: str, samples: list[int] | None) -> int:
        samples = self._samples if samples is None else samples
        return self.stats.target_forward(samples) if role == TARGET else self.stats.draft_forward(samples)

    def _split(self, z: torch.Tensor, forward: int) -> Conditioning:
        cond, uncond = split_rows(z, self.B, self.guided)
        return Conditioning(cond, uncond, forward)

    # ------------------------------------------------------------------ transformer forwards
    @torch.no_grad()
    def evaluate(self, model: MARModel, mask: torch.Tensor, num_masked: int, positions: torch.Tensor,
                 role: str = TARGET) -> Conditioning:
        """One forward of a masked transformer over :attr:`tokens` with ``mask [B, L]`` (true: masked, the same
        count ``num_masked`` in every image) → its ``z`` at ``positions [B, k]``."""
        with self.clock.measure(role):
            z = model.transformer(guided_rows(self.tokens, self.guided), guided_rows(mask, self.guided),
                                  self.condition(model), num_masked=num_masked)  # [R, L, C]
        forward = self._count(role, None)
        index = guided_rows(positions, self.guided)[..., None].expand(-1, -1, z.shape[-1])
        return self._split(z.gather(1, index), forward)

    def allocate(self, model: MARModel) -> MARKVCache:
        """A KV cache of a causal ``model`` for the CFG pair's rows."""
        return model.transformer.allocate_cache(2 * self.B if self.guided else self.B)

    @torch.no_grad()
    def prefill(self, model: MARModel, cache: MARKVCache, role: str = TARGET) -> Conditioning:
        """Write the class embeddings into ``cache``; ``z`` of token 0 (``[B, 1, C]``)."""
        with self.clock.measure(role):
            z = model.transformer.prefill(self.condition(model), cache)  # [R, C]
        return self._split(z[:, None], self._count(role, None))

    @torch.no_grad()
    def feed(self, model: MARModel, cache: MARKVCache, tokens: torch.Tensor, start: torch.Tensor | int,
             role: str = TARGET, samples: list[int] | None = None) -> Conditioning:
        """Feed ``tokens [B, T, D]`` at sequence indices ``start …`` (``start``: int or ``[B]``) to a causal
        ``model``; its ``z`` of the indices after each (``[B, T, C]``). ``samples``: the images this forward
        counts for (default all; finished rows may ride along uncounted)."""
        start = guided_rows(start, self.guided) if isinstance(start, torch.Tensor) else start
        with self.clock.measure(role):
            z = model.transformer.forward_tokens(guided_rows(tokens, self.guided), start, cache)  # [R, T, C]
        return self._split(z, self._count(role, samples))

    # ------------------------------------------------------------------ the head
    def sampler(self, model: MARModel, strength: float) -> DiffusionSampler:
        """``model``'s head with this request's temperature and guidance ``strength`` (acceptance functions)."""
        return DiffusionSampler(model.head, self.temperature, strength)

    @torch.no_grad()
    def sample(self, model: MARModel, cond: Conditioning, strength: float, final_std: float = 0.0) -> torch.Tensor:
        """MAR's sampler: tokens ``[B, k, D]`` from ``model``'s head at ``cond``'s ``k`` positions, with guidance
        ``strength``; ``final_std > 0`` adds ``N(0, final_std²)`` to each (the sampler ``cspd-exact`` is exact for).

        Noise: ``x_T`` and the ``ε`` of every step, ``[S, k, D]`` per image from its stream, then the final noise.
        """
        B, k = cond.z.shape[:2]
        S = model.sampling_steps
        noise = self.random.normal((S, k, self.D)).permute(1, 0, 2, 3).reshape(S, B * k, self.D)  # image-major rows
        zu = None if cond.z_uncond is None else cond.z_uncond.reshape(B * k, -1)
        with self.clock.measure("head"):
            x = model.head.sample(cond.z.reshape(B * k, -1), temperature=self.temperature, guidance_scale=strength,
                                  z_uncond=zu, noise=noise)
        self.head_forwards += S
        if final_std > 0:
            x = x + final_std * self.random.normal((k, self.D)).reshape(B * k, self.D)
        return x.reshape(B, k, self.D)

    @torch.no_grad()
    def trajectories(self, model: MARModel, cond: Conditioning, strength: float, final_std: float = 0.0
                     ) -> Trajectory:
        """Whole denoising trajectories ``[B, k]`` of ``model``'s head at ``cond``'s positions (noise ``[k, S+1, D]``
        per image from its stream; ``final_std`` as in :meth:`sample`)."""
        B, k = cond.z.shape[:2]
        S = model.sampling_steps
        noise = self.random.normal((k, S + 1, self.D)).reshape(B * k, S + 1, self.D)
        zu = None if cond.z_uncond is None else cond.z_uncond.reshape(B * k, -1)
        with self.clock.measure("head"):
            traj = sample_trajectory(self.sampler(model, strength), cond.z.reshape(B * k, -1), noise=noise,
                                     z_uncond=zu, final_std=final_std)
        return traj.reshape(B, k)

    # ------------------------------------------------------------------ tokens
    def _positions(self, positions: torch.Tensor | int, valid: torch.Tensor | None) -> torch.Tensor:
        if isinstance(positions, int):
            positions = torch.full((self.B, 1), positions, dtype=torch.long, device=self.device)
        return positions if valid is None else positions.masked_fill(~valid, self.L)

    def write(self, positions: torch.Tensor, values: torch.Tensor) -> None:
        """Place drafted ``values [B, k, D]`` at ``positions [B, k]`` (inputs of later forwards; not known)."""
        self.tokens = _place(self.tokens, positions, values)

    def commit(self, positions: torch.Tensor | int, values: torch.Tensor, forward: int,
               valid: torch.Tensor | None = None) -> None:
        """Fix ``values [B, k, D]`` at ``positions [B, k]`` (or one index for every image) as final, committed by
        ``forward`` of the commit timeline; where ``valid [B, k]`` is false nothing is committed."""
        positions = self._positions(positions, valid)
        self.tokens = _place(self.tokens, positions, values)
        self.known = _place(self.known, positions, torch.ones(positions.shape, dtype=torch.bool, device=self.device))
        self.stats.mark(positions, forward)

    def end_step(self, step: int) -> None:
        """The method finished its step ``step``: the callback sees the tokens so far."""
        self.step = step
        if self.on_step is not None:
            self.on_step(self)

    def finish(self, extra: dict[str, Any] | None = None, partial: bool = False) -> BatchStats:
        """Stop the clock; the statistics in the engine's format, ``extra`` with the head's time (``head_s``)
        (``partial``: of the tokens committed so far, after an interrupted decode)."""
        latency = time.perf_counter() - self._t0
        if not partial and not bool(self.known.all()):  # one host sync, at the end
            raise RuntimeError(f"method {self.method!r} left tokens uncommitted")
        self.stats.extra.update({**(extra or {}), "head_s": self.clock.totals().get("head", 0.0)})
        return self.stats.finish(self.method, latency, peak_memory_mb(self.device), self.clock)


__all__ = ["DRAFT", "TARGET", "Conditioning", "ContinuousDecoder", "check_num_iter", "mask_schedule"]
