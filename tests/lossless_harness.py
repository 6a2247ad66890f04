"""The statistical harness that proves a decoding method lossless (docs/measurement.md, "Lossless means lossless").

A :class:`TableBackbone` is a complete AR model over a tiny grid (2×3 tokens, vocabulary 4): its
next-token logits for every prefix (and every class, plus the null class for CFG) are stored in a
table, so the exact distribution over all 4^6 = 4,096 sequences follows by the chain rule. It
implements the backbone protocol for real: keys/values live in the caller's static cache, and each
query reads its prefix from the slots its attention mask allows — so a stale draft left visible, a
hole in a mask or a wrong rollback changes the conditionals and shows up in the test.

Thresholds (calibrated in ``test_null_tv_calibration``): at N = 200,000 samples the TV between the
empirical and the exact distribution of this table is about 0.006 when sampling exactly; a method
passes with chi-square p >= 1e-4 and TV <= 0.015, and planted bugs must reach TV >= 0.03.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from scipy import stats as sps

from arvis.engine.sampling import SamplingConfig
from arvis.methods import decode
from arvis.models.protocol import Condition, StaticKVCache, TokenLayout

GRID = (2, 3)
VOCAB = 4
NUM_CLASSES = 2


class TableBackbone(torch.nn.Module):
    """Exact conditionals from a lookup table, read through the cache and the attention mask."""

    supports_cfg = True

    def __init__(self, seed: int = 0, grid=GRID, vocab: int = VOCAB, scale: float = 2.5, class_scale: float = 0.7):
        super().__init__()
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

    def allocate_cache(self, rows, dtype=None, device=None) -> StaticKVCache:
        return StaticKVCache(1, rows, 1, 8, 1, torch.float64, device or "cpu")

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
        empty = torch.zeros(R, self.N, dtype=torch.long)
        logits = self.table[labels, self.prefix_id(empty, torch.zeros(R, dtype=torch.long))]
        return logits.float(), torch.ones(R, 1, dtype=torch.bool)

    def forward_tokens(self, tokens, slots, cache, attend_mask):
        R, T = tokens.shape
        k = tokens.double()[:, None, :, None]
        cache.write(0, slots, k, k)
        stored = cache.keys[0][:, 0, :, 0].round().long()  # [R, S]: slot 0 = class, slot 1 + j = token j
        token_slots = torch.arange(1, self.N + 1)
        own = slots - 1  # sequence index of each input
        visible = attend_mask[:, :, 1:self.N + 1]  # [R, T, N]
        must_see = token_slots[None, None] <= slots[..., None]
        real = own < self.N - 1  # padding queries (scratch slot) are ignored
        bad = (visible != must_see) & real[..., None]
        if bool(bad.any()):
            raise AssertionError("a query's mask is not exactly its raster prefix (hole or stale slot)")
        # Prefix codes of every length at once: code[r, l] = sum_{i<l} token_i * V^i.
        weights = self.V ** torch.arange(self.N)
        partial = torch.cat([torch.zeros(R, 1, dtype=torch.long),
                             (stored[:, 1:self.N + 1].clamp_min(0) * weights).cumsum(1)], dim=1)  # [R, N + 1]
        length = (own + 1).clamp(0, self.N - 1)
        rows = torch.tensor(self.offsets)[length] + partial.gather(1, length)
        labels = stored[:, 0][:, None].expand(R, T)
        return self.table[labels, rows].float()

    # ------------------------------------------------------------------ exact target
    def sequence_probabilities(self, label: int, sampling: SamplingConfig) -> np.ndarray:
        """Exact float64 probability of every sequence (index = base-V code, first token least significant)."""
        probs = np.zeros(self.V ** self.N)
        for seq in itertools.product(range(self.V), repeat=self.N):
            total = 1.0
            for j in range(self.N):
                prefix = torch.tensor(seq + (0,) * (self.N - len(seq)))
                row = self.prefix_id(prefix, torch.tensor(j))
                total *= exact_next_token(self.table[label, row], self.table[NUM_CLASSES, row], sampling, j)[seq[j]]
                if total == 0:
                    break
            probs[sequence_code(seq, self.V)] = total
        return probs


def exact_next_token(cond: torch.Tensor, uncond: torch.Tensor, s: SamplingConfig, index: int) -> np.ndarray:
    """The target distribution in float64, written out independently of arvis.engine.sampling."""
    logits = cond.double()
    if s.guidance_scale != 1.0 and (s.cfg_interval < 0 or index <= s.cfg_interval + 1):
        logits = uncond + (cond - uncond) * s.guidance_scale
    if s.temperature == 0:
        out = np.zeros(logits.numel())
        out[int(logits.argmax())] = 1.0
        return out
    logits = logits / s.temperature
    if s.top_k > 0:
        kth = torch.sort(logits, descending=True).values[min(s.top_k, logits.numel()) - 1]
        logits = torch.where(logits < kth, float("-inf"), logits)
    return logits.softmax(-1).numpy()


def sequence_code(seq, vocab: int) -> int:
    return sum(int(t) * vocab ** i for i, t in enumerate(seq))


def empirical(tokens: torch.Tensor, vocab: int) -> np.ndarray:
    codes = (tokens * vocab ** torch.arange(tokens.shape[1])).sum(1)
    return np.bincount(codes.numpy(), minlength=vocab ** tokens.shape[1]) / tokens.shape[0]


def compare(exact: np.ndarray, observed_freq: np.ndarray, n: int) -> tuple[float, float]:
    """(TV distance, chi-square p-value with cells of expected count < 5 pooled)."""
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


def run_method(backbone: TableBackbone, sampling: SamplingConfig, method: str, n: int, seed: int, label: int = 1,
               **options) -> np.ndarray:
    """Draw ``n`` sequences in one batched call; returns their empirical distribution."""
    condition = Condition(class_labels=torch.full((n,), label, dtype=torch.long))
    tokens, _ = decode(backbone, condition, sampling, method, torch.Generator().manual_seed(seed), **options)
    assert tokens.min() >= 0 and tokens.max() < backbone.V
    return empirical(tokens, backbone.V)
