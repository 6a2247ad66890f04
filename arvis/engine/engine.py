"""The decode engine: one object per request, owning every piece of decode state.

A method (plain AR, SJD, ZipAR, speculative decoding…) drives the engine through a handful of verbs:

- :meth:`DecodeEngine.prefill` — run the condition; returns ``p`` for sequence index 0;
- :meth:`DecodeEngine.evaluate` — one target forward over any set of sequence indices per sample
  ("evaluate these positions with these tokens, attending exactly to these keys"); returns ``p`` for
  the index after each input;
- :meth:`DecodeEngine.sample` — draw tokens from ``p`` with the request's generators;
- :meth:`DecodeEngine.commit` — fix tokens as final (this is where the statistics are counted);
- :meth:`DecodeEngine.truncate` / :meth:`DecodeEngine.invalidate` — roll back cache slots that hold
  rejected drafts (a mask update: the static cache is never copied);
- :meth:`DecodeEngine.retire` — drop finished samples from later forwards (ragged batches).

State, all per request and never on the model: the static KV cache, the slot-validity mask, the
committed tokens, the active-sample list, the random streams and the statistics recorder.

Rows and samples: ``B`` samples; while ``A`` of them are active the backbone runs ``A`` rows (or
``2A`` with CFG: conditional rows then unconditional rows). Methods address active samples by their
position ``a`` in :attr:`DecodeEngine.active`.

The last sequence index ``N - 1`` is never an input (nothing follows it), so its slot doubles as a
scratch slot for padding: ragged windows pad with ``index = N - 1``; those queries are ignored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from arvis.engine.sampling import SamplingConfig, logits_to_probs
from arvis.engine.stats import BatchStats, StatsRecorder, peak_memory_mb
from arvis.models.protocol import Backbone, Condition
from arvis.utils.random import GeneratorArg, RandomStreams, sample_categorical


class DecodeEngine:
    """Per-request decode state and the primitives every method is built from.

    Args:
        backbone: a model implementing :class:`arvis.models.protocol.Backbone`.
        condition: the batch's condition (``B`` samples).
        sampling: how logits become the target distribution ``p``.
        generator: one ``torch.Generator`` for the batch, one per sample, or ``None``.
        method: the method name recorded in the statistics.
        on_commit: called after every commit with the engine (progress bars, streaming previews).
    """

    def __init__(self, backbone: Backbone, condition: Condition, sampling: SamplingConfig,
                 generator: GeneratorArg = None, method: str = "ar",
                 on_commit: Callable[[DecodeEngine], None] | None = None):
        self.backbone = backbone
        self.layout = backbone.layout
        self.sampling = sampling
        self.method = method
        self.on_commit = on_commit
        param = next(backbone.parameters())  # type: ignore[attr-defined]
        self.device = param.device
        self.condition = condition
        self.batch_size = B = condition.batch_size
        self.num_tokens = N = self.layout.num_tokens
        self.condition_length = self.layout.condition_length
        self.vocab_size = self.layout.vocab_size
        self.cfg = sampling.uses_cfg
        if self.cfg and not getattr(backbone, "supports_cfg", True):
            raise ValueError("guidance_scale must be 1.0: this model has no unconditional embedding")

        self.random = RandomStreams(generator, B, self.device)
        self.cache = backbone.allocate_cache(2 * B if self.cfg else B, param.dtype, self.device)
        self.slot_valid = torch.zeros(self.cache.rows, self.cache.slots, dtype=torch.bool, device=self.device)
        self._slot_ids = torch.arange(self.cache.slots, device=self.device)
        self.tokens = torch.full((B, N), -1, dtype=torch.long, device=self.device)
        self.known = torch.zeros(B, N, dtype=torch.bool, device=self.device)
        self.active = torch.arange(B, device=self.device)  # sample ids of the active rows
        self.active_list: list[int] = list(range(B))
        forced = torch.full((N,), -1, dtype=torch.long, device=self.device)
        for index, token in self.layout.structural_tokens.items():
            forced[index] = token
        self.forced_tokens = forced if self.layout.structural_tokens else None
        self.stats = StatsRecorder(B, N, self.device)
        self._t0 = time.perf_counter()
        self._prefilled = False

    # ------------------------------------------------------------------ forwards
    @property
    def pad_index(self) -> int:
        """Sequence index whose slot serves as scratch for padded queries."""
        return self.num_tokens - 1

    @property
    def num_active(self) -> int:
        return len(self.active_list)

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        """Per-active-sample tensor → per-row tensor (duplicated for the CFG pair)."""
        return torch.cat([x, x]) if self.cfg else x

    def _probs(self, logits: torch.Tensor, target_index: torch.Tensor) -> torch.Tensor:
        A = target_index.shape[0]
        cond, uncond = (logits[:A], logits[A:]) if self.cfg else (logits, None)
        return logits_to_probs(cond, uncond, self.sampling, target_index, self.forced_tokens,
                               self.layout.image_token_range)

    @torch.no_grad()
    def prefill(self) -> torch.Tensor:
        """Write the condition; returns ``p`` for sequence index 0, ``[B, V]`` fp32."""
        if self._prefilled:
            raise RuntimeError("prefill() runs once per request")
        self._prefilled = True
        cond = self.condition
        if self.cfg:
            cond = cond.concat(self.backbone.null_condition(cond))
        logits, valid = self.backbone.prefill(cond, self.cache)
        self.slot_valid[:, : self.condition_length] = valid
        self.stats.target_forward(self.active)
        B = self.batch_size
        return self._probs(logits[:, None], torch.zeros(B, 1, dtype=torch.long, device=self.device))[:, 0]

    @torch.no_grad()
    def evaluate(self, inputs: torch.Tensor, input_index: torch.Tensor, pad: torch.Tensor | None = None
                 ) -> torch.Tensor:
        """One target forward.

        Args:
            inputs: ``[A, T]`` token ids fed at sequence indices ``input_index`` (committed tokens or drafts).
            input_index: ``[A, T]`` sequence indices of the inputs; each input is written to its slot
                and stays valid until :meth:`truncate` / :meth:`invalidate` says otherwise.
            pad: ``[A, T]`` bool, queries that are padding (their index is replaced by :attr:`pad_index`
                and their output is meaningless).

        Returns:
            ``[A, T, V]`` fp32: ``p`` of the sequence index ``input_index + 1`` given every valid slot
            before it (in slot order) and the inputs of this call before it.
        """
        if pad is not None:
            input_index = input_index.masked_fill(pad, self.pad_index)
            inputs = inputs.masked_fill(pad, 0)
        slots = self._rows(input_index + self.condition_length)  # [R, T]
        written = torch.zeros_like(self.slot_valid).scatter_(1, slots, True)
        if pad is not None:  # the scratch slot never becomes valid
            written[:, self.condition_length + self.pad_index] = False
        self.slot_valid |= written
        causal = self._slot_ids <= slots[..., None]  # [R, T, S]
        mask = causal & self.slot_valid[:, None, :]
        mask |= self._slot_ids == slots[..., None]  # every query sees itself (padding included)
        logits = self.backbone.forward_tokens(self._rows(inputs), slots, self.cache, mask)
        self.stats.target_forward(self.active)
        return self._probs(logits, input_index + 1)

    # ------------------------------------------------------------------ sampling and commits
    def sample(self, probs: torch.Tensor) -> torch.Tensor:
        """Draw from ``probs: [A, ..., V]`` with the active samples' generators → ``[A, ...]`` int64."""
        noise = self.random.exponential(probs.shape[1:], rows=self.active_list)
        return sample_categorical(probs, noise)

    def uniform(self, shape: tuple[int, ...]) -> torch.Tensor:
        """``U(0, 1)`` draws ``[A, *shape]`` from the active samples' generators."""
        return self.random.uniform(shape, rows=self.active_list)

    def exponential(self, shape: tuple[int, ...]) -> torch.Tensor:
        """``Exp(1)`` draws ``[A, *shape]`` from the active samples' generators."""
        return self.random.exponential(shape, rows=self.active_list)

    def commit(self, index: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Fix ``values`` at sequence ``index`` (both ``[A, T]``) for the active samples where ``mask``.

        Commits are attributed to the latest target forward (the one that produced them).
        """
        samples = self.active[:, None].expand_as(index)
        if mask is None:  # no selection: no host synchronisation (plain AR's per-token path)
            s, i, v = samples, index, values
        else:  # boolean selection syncs once per call; padded entries never reach the buffers
            s, i, v = samples[mask], index[mask], values[mask]
        self.tokens[s, i] = v
        self.known[s, i] = True
        self.stats.commit_forward[s, i] = self.stats.forward_index - 1
        if self.on_commit is not None:
            self.on_commit(self)

    def truncate(self, lengths: torch.Tensor) -> None:
        """Keep valid only the input slots of sequence indices ``< lengths[a]`` (raster rollback)."""
        token_slot = self._slot_ids - self.condition_length  # sequence index of each slot (<0: condition)
        keep = (token_slot < 0) | (token_slot < self._rows(lengths)[:, None])
        self.slot_valid &= keep
        self.backbone_rollback(lengths)

    def invalidate(self, index: torch.Tensor, mask: torch.Tensor) -> None:
        """Mark the input slots of sequence ``index[a, t]`` (where ``mask``) as not holding valid keys."""
        slots = self._rows(index + self.condition_length)
        drop = torch.zeros_like(self.slot_valid).scatter_(1, slots, self._rows(mask))
        self.slot_valid &= ~drop

    def backbone_rollback(self, lengths: torch.Tensor) -> None:
        self.cache.rollback(self._rows(lengths + self.condition_length))

    def count_draft_forward(self, count: int = 1) -> None:
        """Record ``count`` drafter forwards over the active samples."""
        self.stats.draft_forward(self.active, count)

    # ------------------------------------------------------------------ ragged batches
    def retire(self, keep: torch.Tensor) -> torch.Tensor:
        """Drop active samples where ``keep`` is false from all later forwards.

        Compacts the cache and masks to the kept rows (one copy per call; call it only when some
        sample finished). Returns the positions (in the old active order) that were kept, so the
        method can compact its own per-row state the same way.
        """
        kept = keep.nonzero().squeeze(1)
        if kept.numel() == self.num_active:
            return kept
        rows = torch.cat([kept, kept + self.num_active]) if self.cfg else kept
        self.cache.select_rows(rows)
        self.slot_valid = self.slot_valid.index_select(0, rows)
        self.active = self.active.index_select(0, kept)
        self.active_list = self.active.tolist()  # host sync: once per retirement, not per token
        return kept

    # ------------------------------------------------------------------ results
    def finished(self) -> bool:
        return bool(self.known.all())

    def finish(self, extra: dict[str, Any] | None = None) -> BatchStats:
        """Stop the clock and return the statistics (raises if a token was never committed)."""
        latency = time.perf_counter() - self._t0
        missing = (~self.known).sum().item()
        if missing:
            raise RuntimeError(f"method {self.method!r} left {missing} tokens uncommitted")
        if extra:
            self.stats.extra.update(extra)
        return self.stats.finish(self.method, latency, peak_memory_mb(self.device))
