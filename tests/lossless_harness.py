"""The statistical harness that proves a decoding method lossless (docs/measurement.md, "Lossless means lossless").

A :class:`TableBackbone` is a complete AR model over a tiny grid (2×3 tokens, vocabulary 4 by default):
its next-token logits for every prefix (and every class, plus the null class for CFG) are stored in a
table, so the exact distribution over all 4^6 = 4,096 sequences follows by the chain rule
(:meth:`TableBackbone.sequence_probabilities`, vectorised). It implements the backbone protocol for
real: keys/values live in the caller's static cache, and each query reads its prefix from the slots its
attention mask allows — so a stale draft left visible, a hole in a mask or a wrong rollback changes the
conditionals (or trips the mask check) and shows up in the test.

Decision rule (:func:`check`), for ``n`` sampled sequences against the exact distribution:

- chi-square goodness of fit, cells with an expected count below 5 pooled into one, must give
  ``p >= ALPHA = 1e-4``;
- the TV between the empirical and the exact distribution must stay below the sampling-noise bound
  :func:`tv_bound`: the mean plus 5 standard deviations of the TV of ``n`` exact draws, estimated from
  200 simulated exact samples of the same distribution and size (so the bound follows the case's own
  distribution and ``n`` instead of being one number for all).

``test_null_tv_calibration`` (tests/methods/test_lossless.py) measures the rule's false-alarm rate on exact
sampling and its power against perturbations of TV 0.03 at the default N.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats as sps

from arvis.engine.sampling import SamplingConfig
from arvis.methods import decode
from arvis.models.protocol import Condition, StaticKVCache, TokenLayout

GRID = (2, 3)
VOCAB = 4
NUM_CLASSES = 2
ALPHA = 1e-4  # chi-square significance level of one case
NULL_DRAWS = 200  # exact-sampling draws that estimate the TV noise bound
NULL_SDS = 5.0  # the TV bound: null mean + NULL_SDS null standard deviations


class TableBackbone(torch.nn.Module):
    """Exact conditionals from a lookup table, read through the cache and the attention mask."""

    supports_cfg = True

    def __init__(self, seed: int = 0, grid=GRID, vocab: int = VOCAB, scale: float = 2.5, class_scale: float = 0.7,
                 allow_holes: bool = False):
        super().__init__()
        # Lossy schedules (ZipAR, PJD) read prefixes with holes; the table then reads a hole as token 0.
        self.allow_holes = allow_holes
        self.grid, self.V = grid, vocab
        self.N = grid[0] * grid[1]
        self.offsets = [sum(vocab ** i for i in range(j)) for j in range(self.N + 1)]  # prefix-id offset per length
        g = torch.Generator().manual_seed(seed)
        num_prefixes = self.offsets[self.N]
        # Shared logits plus a smaller per-class part (the null class has its own), so that guidance
        # sharpens the class-specific part as it does in real models instead of exploding everything.
        shared = torch.randn(num_prefixes, vocab, generator=g, dtype=torch.float64) * scale
        per_class = torch.randn(NUM_CLASSES + 1, num_prefixes, vocab, generator=g, dtype=torch.float64) * class_scale
        self.table = shared + per_class
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the engine a device and dtype
        self._layout = TokenLayout(grid=grid, vocab_size=vocab, condition_length=1)

    @property
    def layout(self) -> TokenLayout:
        return self._layout

    def null_condition(self, condition: Condition) -> Condition:
        return Condition(class_labels=torch.full_like(condition.class_labels, NUM_CLASSES))

    def allocate_cache(self, rows, dtype=None, device=None, extra_slots: int = 0) -> StaticKVCache:
        # Keys hold each slot's token, values its sequence index (-1: the condition), so that inputs in
        # scratch slots (trees of candidates) are read at their own position.
        return StaticKVCache(1, rows, 1, self.N + 2 + extra_slots, 1, torch.float64, device or "cpu")

    def prefix_id(self, prefix: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        """``prefix [..., N]`` (first ``length`` entries used) → table row."""
        weights = self.V ** torch.arange(self.N)
        used = torch.arange(self.N) < length[..., None]
        code = (prefix.clamp_min(0) * weights * used).sum(-1)
        return torch.tensor(self.offsets)[length] + code

    def prefill(self, condition: Condition, cache: StaticKVCache):
        labels = condition.class_labels
        R = labels.shape[0]
        cache.keys[0][:, 0, 0, 0] = labels.double()
        cache.values[0][:, 0, 0, 0] = -1.0
        empty = torch.zeros(R, self.N, dtype=torch.long)
        logits = self.table[labels, self.prefix_id(empty, torch.zeros(R, dtype=torch.long))]
        return logits.float(), torch.ones(R, 1, dtype=torch.bool)

    def forward_tokens(self, tokens, slots, cache, attend_mask, positions=None):
        R, T = tokens.shape
        positions = slots if positions is None else positions
        own = positions - 1  # sequence index of each input
        cache.write(0, slots, tokens.double()[:, None, :, None], own.double()[:, None, :, None])
        stored = cache.keys[0][:, 0, :, 0].round().long()  # [R, S]: slot 0 = class, then tokens
        index = cache.values[0][:, 0, :, 0].round().long()  # [R, S]: sequence index of each slot's token
        W = attend_mask.shape[-1]
        visible = attend_mask[:, :, 1:W].long()  # [R, T, W - 1]: the token slots each query reads
        at = index[:, None, 1:W].clamp(0, self.N).expand(-1, T, -1)  # [R, T, W - 1]
        # Per query, how many visible slots hold each sequence index, and their tokens (by sequence index).
        seen = torch.zeros(R, T, self.N + 1, dtype=torch.long).scatter_add_(2, at, visible)[..., : self.N]
        prefix = torch.zeros(R, T, self.N + 1, dtype=torch.long).scatter_add_(
            2, at, visible * stored[:, None, 1:W].clamp_min(0))[..., : self.N]
        must_see = (torch.arange(self.N)[None, None] <= own[..., None]).long()
        real = own < self.N - 1  # padding queries (scratch slot) are ignored
        bad = ((seen > must_see) | ((seen != must_see) & (not self.allow_holes))) & real[..., None]
        if bool(bad.any()):
            raise AssertionError("a query's mask is not exactly its raster prefix (hole, stale or doubled slot)")
        # Prefix code of each query: sum_{i <= own} token_i * V^i.
        weights = self.V ** torch.arange(self.N)
        length = (own + 1).clamp(0, self.N - 1)
        code = (prefix * weights * (torch.arange(self.N) < length[..., None])).sum(-1)  # [R, T]
        rows = torch.tensor(self.offsets)[length] + code
        labels = stored[:, 0][:, None]
        flat = (labels * self.offsets[self.N] + rows).flatten()  # one row of the [classes x prefixes, V] table
        return self.table.view(-1, self.V).index_select(0, flat).view(R, T, self.V).float()

    # ------------------------------------------------------------------ exact target
    def conditionals(self, label: int, sampling: SamplingConfig) -> torch.Tensor:
        """Exact float64 next-token distribution of every prefix: ``[num_prefixes, V]`` (row = :meth:`prefix_id`)."""
        index = torch.repeat_interleave(torch.arange(self.N), torch.tensor(self.V) ** torch.arange(self.N))
        return exact_next_token(self.table[label], self.table[NUM_CLASSES], sampling, index)

    def sequence_probabilities(self, label: int, sampling: SamplingConfig, prefix: tuple[int, ...] = ()
                               ) -> np.ndarray:
        """Exact float64 probability of every sequence (index = base-V code, first token least significant),
        by the chain rule over all ``V^N`` sequences at once; given ``prefix``, the probability of each
        completion of it (0 for sequences that do not start with it)."""
        cond = self.conditionals(label, sampling)
        codes = torch.arange(self.V ** self.N)
        start = len(prefix)
        probs = (codes % self.V ** start == sequence_code(prefix, self.V)).double()
        for j in range(start, self.N):
            prefix_code = codes % self.V ** j  # the first j tokens
            token = (codes // self.V ** j) % self.V
            probs *= cond[self.offsets[j] + prefix_code, token]
        return probs.numpy()


def exact_next_token(cond: torch.Tensor, uncond: torch.Tensor, s: SamplingConfig,
                     index: int | torch.Tensor) -> torch.Tensor:
    """The target distribution in float64, written out independently of arvis.engine.sampling.

    Args:
        cond, uncond: ``[..., V]`` logits of the class and of the null class. index: the sequence index
            each row predicts (``[...]`` or one int), for ``cfg_interval``.

    Returns:
        ``[..., V]`` float64 probabilities.
    """
    cond, uncond = cond.double(), uncond.double()
    index = torch.as_tensor(index).expand(cond.shape[:-1])
    logits = cond
    if s.guidance_scale != 1.0:
        guided = (index <= s.cfg_interval + 1) if s.cfg_interval >= 0 else torch.ones_like(index, dtype=torch.bool)
        logits = torch.where(guided[..., None], uncond + (cond - uncond) * s.guidance_scale, cond)
    if s.temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).double()
    logits = logits / s.temperature
    if s.top_k > 0:
        kth = logits.sort(-1, descending=True).values[..., min(s.top_k, logits.shape[-1]) - 1, None]
        logits = torch.where(logits < kth, float("-inf"), logits)
    probs = logits.softmax(-1)
    if s.top_p < 1.0:  # keep the smallest most-likely prefix whose mass reaches top_p
        sorted_p, order = probs.sort(-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < s.top_p)
        probs = torch.where(keep, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sequence_code(seq, vocab: int) -> int:
    return sum(int(t) * vocab ** i for i, t in enumerate(seq))


def empirical(tokens: torch.Tensor, vocab: int) -> np.ndarray:
    """Empirical distribution over sequence codes of ``tokens [n, N]``."""
    codes = (tokens * vocab ** torch.arange(tokens.shape[1])).sum(1)
    return np.bincount(codes.numpy(), minlength=vocab ** tokens.shape[1]) / tokens.shape[0]


def compare(exact: np.ndarray, observed_freq: np.ndarray, n: int) -> tuple[float, float]:
    """(TV distance, chi-square p-value with the cells of expected count < 5 pooled into one)."""
    tv = 0.5 * float(np.abs(exact - observed_freq).sum())
    expected, observed = exact * n, observed_freq * n
    big = expected >= 5
    if (observed[exact == 0] > 0).any():
        return tv, 0.0  # an impossible sequence was produced
    e = np.append(expected[big], expected[~big].sum())
    o = np.append(observed[big], observed[~big].sum())
    if e[-1] == 0:
        e, o = e[:-1], o[:-1]
    p = float(sps.chisquare(o, e * o.sum() / e.sum()).pvalue)
    return tv, p


def null_tvs(exact: np.ndarray, n: int, draws: int = NULL_DRAWS, seed: int = 0) -> np.ndarray:
    """TV between ``exact`` and the empirical distribution of ``n`` exact draws, for ``draws`` seeds."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, exact / exact.sum(), size=draws)
    return 0.5 * np.abs(counts / n - exact).sum(-1)


def tv_bound(exact: np.ndarray, n: int) -> float:
    """The sampling-noise bound on TV: mean + ``NULL_SDS`` standard deviations of :func:`null_tvs`."""
    return _tv_bound(exact.tobytes(), n)


@functools.lru_cache(maxsize=64)
def _tv_bound(exact_bytes: bytes, n: int) -> float:
    tvs = null_tvs(np.frombuffer(exact_bytes), n)
    return float(tvs.mean() + NULL_SDS * tvs.std())


@dataclass(frozen=True)
class Verdict:
    """The harness's decision on ``n`` samples: lossless iff chi-square p >= ALPHA and TV <= its noise bound."""

    tv: float
    p_value: float
    tv_bound: float
    n: int

    @property
    def passed(self) -> bool:
        return self.p_value >= ALPHA and self.tv <= self.tv_bound

    def __str__(self) -> str:
        return (f"N {self.n}: TV {self.tv:.4f} (noise bound {self.tv_bound:.4f}), chi-square p {self.p_value:.2e} "
                f"(alpha {ALPHA:.0e}) -> {'pass' if self.passed else 'FAIL'}")


def check(exact: np.ndarray, observed_freq: np.ndarray, n: int) -> Verdict:
    tv, p = compare(exact, observed_freq, n)
    return Verdict(tv, p, tv_bound(exact, n), n)


def decode_table(backbone: TableBackbone, sampling: SamplingConfig, method: str, n: int, seed: int, label: int = 1,
                 **options):
    """Draw ``n`` sequences in one batched call through the public API; returns ``(tokens [n, N], stats)``."""
    condition = Condition(class_labels=torch.full((n,), label, dtype=torch.long))
    tokens, stats = decode(backbone, condition, sampling, method, torch.Generator().manual_seed(seed), **options)
    assert tokens.min() >= 0 and tokens.max() < backbone.V
    return tokens, stats


def run_method(backbone: TableBackbone, sampling: SamplingConfig, method: str, n: int, seed: int, label: int = 1,
               **options) -> np.ndarray:
    """Draw ``n`` sequences in one batched call; returns their empirical distribution."""
    return empirical(decode_table(backbone, sampling, method, n, seed, label, **options)[0], backbone.V)


def batch_equals_single_runs(model, sampling: SamplingConfig, method: str, seeds: list[int], **options) -> None:
    """A batch of classes 0, 1, … with one generator per sample decodes each sample's tokens exactly as the sample
    alone with its own generator (ragged batches and per-sample random streams)."""
    labels = list(range(len(seeds)))
    batch, _ = decode(model, Condition(class_labels=torch.tensor(labels)), sampling, method,
                      [torch.Generator().manual_seed(s) for s in seeds], **options)
    for i, (label, seed) in enumerate(zip(labels, seeds, strict=True)):
        single, _ = decode(model, Condition(class_labels=torch.tensor([label])), sampling, method,
                           [torch.Generator().manual_seed(seed)], **options)
        assert torch.equal(batch[i], single[0]), f"{method}: sample {i} differs from its single run"
