"""Explicit randomness: every draw in arvis comes from a caller-owned ``torch.Generator``.

A request carries either one generator shared by the whole batch, or one generator per sample
(diffusers convention). With one per sample, each sample consumes its own stream in the same way
whatever the batch around it, so a batch reproduces the same samples generated one at a time.
Library code never touches the global RNG.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

GeneratorArg = torch.Generator | Sequence[torch.Generator] | None
_MASK64 = (1 << 64) - 1


def seed_for(seed: int, index: int) -> int:
    """The generator seed of image ``index`` in a run seeded ``seed``: arvis's one per-image seed rule.

    ``arvis generate``, the demo, ``arvis bench``, ``arvis fid`` and ``eval/sample.py`` all give image ``i``
    its own ``torch.Generator().manual_seed(seed_for(seed, i))`` (recorded in their outputs). It is the
    splitmix64 mix of the pair, ``< 2**63``: distinct ``(seed, index)`` pairs give unrelated streams
    (unlike ``seed + index``, where seed 0 / image 1 and seed 1 / image 0 would coincide).
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if isinstance(index, bool) or not isinstance(index, int | np.integer) or index < 0:
        raise ValueError(f"index must be an integer >= 0, got {index!r}")
    z = ((int(seed) & _MASK64) * 0x9E3779B97F4A7C15 + int(index) + 1) & _MASK64
    for _ in range(2):  # splitmix64 finaliser, applied twice
        z = (z + 0x9E3779B97F4A7C15) & _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        z ^= z >> 31
    return z >> 1


def image_generator(seed: int, index: int, device: str | torch.device = "cpu") -> torch.Generator:
    """``torch.Generator(device).manual_seed(seed_for(seed, index))``: the stream of image ``index``."""
    return torch.Generator(device=device).manual_seed(seed_for(seed, index))


def image_generators(seed: int, indices: Sequence[int], device: str | torch.device = "cpu") -> list[torch.Generator]:
    """One generator per image index (:func:`image_generator`)."""
    return [image_generator(seed, i, device) for i in indices]


def make_generators(seeds: int | Sequence[int], device: str | torch.device = "cpu") -> list[torch.Generator]:
    """One seeded generator per seed (``seeds`` may be a single int → a list of one)."""
    if isinstance(seeds, int):
        seeds = [seeds]
    return [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]


class RandomStreams:
    """Draws random tensors for a batch of ``batch_size`` samples.

    Args:
        generator: ``None`` (a fresh unseeded generator, non-reproducible), one generator shared by
            the batch, or a sequence of exactly ``batch_size`` generators (one per sample).
        batch_size: number of samples.
        device: device of the tensors returned.

    Every method takes ``rows``: the sample indices to draw for (``None`` = all, in order). With
    per-sample generators the draw for sample ``b`` comes from ``generator[b]`` alone; with a shared
    generator one draw of shape ``[len(rows), *shape]`` is made.
    """

    def __init__(self, generator: GeneratorArg, batch_size: int, device: str | torch.device = "cpu"):
        self.batch_size = batch_size
        self.device = torch.device(device)
        if generator is None:
            generator = torch.Generator(device=self.device)
            generator.seed()
        if isinstance(generator, torch.Generator):
            self.shared: torch.Generator | None = generator
            self.per_sample: list[torch.Generator] | None = None
        else:
            generators = list(generator)
            if len(generators) != batch_size:
                raise ValueError(
                    f"generator: got a list of {len(generators)} generators for a batch of {batch_size} "
                    f"samples; pass one generator, or exactly one per sample."
                )
            if not all(isinstance(g, torch.Generator) for g in generators):
                raise TypeError("generator: every element of the list must be a torch.Generator")
            self.shared = None
            self.per_sample = generators

    def _draw(self, kind: str, rows: Sequence[int] | None, shape: Sequence[int]) -> torch.Tensor:
        shape = tuple(shape)
        if self.shared is not None:
            n = self.batch_size if rows is None else len(rows)
            out = torch.empty((n, *shape), device=self.shared.device)
            self._fill(out, kind, self.shared)
            return out.to(self.device)
        rows = range(self.batch_size) if rows is None else rows
        if len(rows) == 1:  # one sample: fill its row in place (no stack)
            out = torch.empty((1, *shape), device=self.per_sample[rows[0]].device)
            self._fill(out, kind, self.per_sample[rows[0]])
            return out.to(self.device)
        parts = []
        for b in rows:
            g = self.per_sample[b]
            t = torch.empty(shape, device=g.device)
            self._fill(t, kind, g)
            parts.append(t)
        if not parts:
            return torch.empty((0, *shape), device=self.device)
        return torch.stack(parts).to(self.device)

    @staticmethod
    def _fill(t: torch.Tensor, kind: str, g: torch.Generator) -> None:
        if kind == "uniform":
            t.uniform_(0.0, 1.0, generator=g)
        elif kind == "exponential":
            t.exponential_(1.0, generator=g)
        elif kind == "normal":
            t.normal_(0.0, 1.0, generator=g)
        else:  # pragma: no cover - internal
            raise AssertionError(kind)

    def uniform(self, shape: Sequence[int], rows: Sequence[int] | None = None) -> torch.Tensor:
        """U(0, 1) draws, fp32, shape ``[len(rows), *shape]``."""
        return self._draw("uniform", rows, shape)

    def exponential(self, shape: Sequence[int], rows: Sequence[int] | None = None) -> torch.Tensor:
        """Exp(1) draws, fp32, shape ``[len(rows), *shape]``."""
        return self._draw("exponential", rows, shape)

    def normal(self, shape: Sequence[int], rows: Sequence[int] | None = None) -> torch.Tensor:
        """N(0, 1) draws, fp32, shape ``[len(rows), *shape]`` (diffusion-head trajectory noise)."""
        return self._draw("normal", rows, shape)


def sample_categorical(probs: torch.Tensor, exponential_noise: torch.Tensor) -> torch.Tensor:
    """Sample from categorical ``probs`` with the exponential race: ``argmax(p / E)``, ``E ~ Exp(1)``.

    Equivalent in distribution to ``torch.multinomial`` but with caller-supplied noise (so the
    generator is explicit) and without a host synchronisation. Zero-probability entries are never
    chosen unless every entry is zero.

    Args:
        probs: ``[..., V]`` non-negative weights (need not be normalised).
        exponential_noise: ``[..., V]`` Exp(1) draws.

    Returns:
        ``[...]`` int64 indices.
    """
    # Exp(1) can be exactly 0 (u == 0); 0/0 would be NaN, so keep the noise strictly positive.
    return torch.argmax(probs / exponential_noise.clamp_min(1e-30), dim=-1)


def draw(probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """A draw from categorical ``probs [..., V]`` (non-negative weights, need not be normalised) with the
    caller's noise: ``Exp(1)`` noise ``[..., V]`` → the exponential race (:func:`sample_categorical`, the
    sampler plain AR uses, needed wherever noise is shared, e.g. Gumbel coupling); ``U(0, 1)`` noise
    ``[...]`` → inverse CDF (:func:`sample_inverse_cdf`: one random number per draw instead of ``V``)."""
    if noise.dim() == probs.dim():
        return sample_categorical(probs, noise)
    return sample_inverse_cdf(probs, noise)


def one_hot(index: torch.Tensor, num_classes: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``F.one_hot(index, num_classes)`` as ``dtype`` without its range check (which reads the indices on the
    host): ``index`` must already lie in ``[0, num_classes)``."""
    return torch.zeros(*index.shape, num_classes, dtype=dtype, device=index.device).scatter_(-1, index[..., None], 1.0)


def sample_inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Sample from categorical ``probs [..., V]`` with one ``U(0, 1)`` draw per row (``uniform [...]``).

    Uses one random number per draw instead of ``V`` (for draws nothing else needs to share noise with,
    e.g. initial drafts). Zero-probability entries are never chosen: the search returns the first index
    whose cumulative mass exceeds ``u · total``.
    """
    cdf = probs.to(torch.float64 if probs.dtype == torch.float64 else torch.float32).cumsum(-1)
    point = uniform.to(cdf.dtype).unsqueeze(-1) * cdf[..., -1:]
    return torch.searchsorted(cdf, point, right=True).squeeze(-1).clamp_max(probs.shape[-1] - 1)


class PositionNoise:
    """``Exp(1)`` noise ``[V]`` fixed per (sample, sequence index) for Gumbel coupling, memory-bounded.

    Each sample's noise is drawn lazily, one ``[V]`` vector per sequence index in increasing order,
    from that sample's stream — exactly the draws plain AR's sampler makes — and kept in a ring of
    ``capacity`` indices (``[A, capacity, V]``), enough for the indices a method reads at once.

    Args:
        streams: the request's random streams.
        samples: sample id of each active row.
        vocab_size: ``V``.
        capacity: indices kept per sample; reading index ``j`` needs ``j >= drawn − capacity``.
    """

    def __init__(self, streams: RandomStreams, samples: Sequence[int], vocab_size: int, capacity: int):
        self.streams, self.samples = streams, list(samples)
        self.capacity, self.vocab_size = capacity, vocab_size
        self.ring = torch.zeros(len(self.samples), capacity, vocab_size, device=streams.device)
        self.drawn = [0] * len(self.samples)  # per active row: indices [0, drawn) have been drawn

    def advance(self, upto: Sequence[int]) -> None:
        """Draw the noise of indices ``[drawn[a], upto[a])`` for every active row ``a`` (host ints)."""
        for a, (sample, start, stop) in enumerate(zip(self.samples, self.drawn, upto, strict=True)):
            if stop <= start:
                continue
            if stop - start > self.capacity:
                raise AssertionError("PositionNoise: a read window wider than the ring")
            draws = torch.cat([self.streams.exponential((self.vocab_size,), rows=[sample]) for _ in range(start, stop)])
            index = torch.arange(start, stop, device=self.ring.device) % self.capacity
            self.ring[a].index_copy_(0, index, draws)
            self.drawn[a] = stop

    def at(self, index: torch.Tensor) -> torch.Tensor:
        """The noise of sequence ``index [A, M]`` (already drawn, still in the ring) → ``[A, M, V]``."""
        slot = (index % self.capacity)[..., None].expand(-1, -1, self.vocab_size)
        return self.ring.gather(1, slot)

    def retire(self, kept: Sequence[int], kept_index: torch.Tensor) -> None:
        """Keep the rows at positions ``kept`` (as :meth:`arvis.engine.DecodeEngine.retire`)."""
        self.ring = self.ring.index_select(0, kept_index)
        self.samples = [self.samples[p] for p in kept]
        self.drawn = [self.drawn[p] for p in kept]

    def nbytes(self) -> int:
        return self.ring.numel() * self.ring.element_size()
