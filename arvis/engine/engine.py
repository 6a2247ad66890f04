"""The decode engine: one object per request, owning every piece of decode state.

A method (plain AR, SJD, ZipAR, speculative decoding…) drives the engine through a handful of verbs:

- :meth:`DecodeEngine.prefill` — run the condition; returns ``p`` for sequence index 0;
- :meth:`DecodeEngine.evaluate` — one target forward over any set of sequence indices per sample
  ("evaluate these positions with these tokens, attending exactly to these keys"); returns ``p`` for
  the index after each input;
- :meth:`DecodeEngine.sample` — draw tokens from ``p`` with the request's generators;
- :meth:`DecodeEngine.commit` — fix tokens as final (this is where the statistics are counted);
- :meth:`DecodeEngine.truncate` — roll back cache slots that hold rejected drafts (a mask update:
  the static cache is never copied);
- :meth:`DecodeEngine.retire` — drop finished samples from later forwards (ragged batches);
- :meth:`DecodeEngine.check_finite` — raise if a sample's target distribution was ever non-finite.

State, all per request and never on the model: the static KV cache, the slot-validity mask, the
committed tokens, the active-sample list, the random streams and the statistics recorder.

Rows and samples: ``B`` samples; while ``A`` of them are active the backbone runs ``A`` rows (or
``2A`` with CFG: conditional rows then unconditional rows). Methods address active samples by their
position ``a`` in :attr:`DecodeEngine.active`.

The last sequence index ``N - 1`` is never an input (nothing follows it), so its slot doubles as a
scratch slot for padding: ragged windows pad with ``index = N - 1``; those queries are ignored.

Host synchronisation: none of the verbs reads a tensor value on the host except :meth:`retire`'s
caller-provided list and :meth:`finish`. Methods synchronise once per iteration, on purpose, through
:meth:`DecodeEngine.status`; :meth:`finish` reads once more, unless the method's last status read carried its
values (``closing``).

Non-finite numbers: every forward checks its logits and its target distribution for NaN / inf
(vectorised, flags kept on the device); the flags are read at the method's once-per-iteration
synchronisation (:meth:`status`) and at :meth:`finish`, and a request with a bad sample fails as a
whole with :class:`NonFiniteError`, naming the sample(s) and the probable cause. The healthy samples
of the batch were never affected (rows do not mix), so re-running them alone reproduces them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from arvis.engine.sampling import SamplingConfig, logits_to_probs
from arvis.engine.stats import BatchStats, ForwardClock, StatsRecorder, peak_memory_mb
from arvis.errors import ArvisError
from arvis.models.protocol import MASK_WIDTH_STEP, Backbone, Condition
from arvis.utils.random import GeneratorArg, RandomStreams, sample_categorical

NO_TOKEN = -1  # token id stored where a sequence index has no token (not committed, no draft)


class NonFiniteError(ArvisError):
    """A sample's logits or target distribution, or a decoder's pixels, held NaN or infinity (see the engine's
    module docstring); an :class:`~arvis.errors.ArvisError`, so a ``ValueError`` too."""


class DecodeEngine:
    """Per-request decode state and the primitives every method is built from.

    Class attribute ``host_syncs_total`` counts the deliberate host reads of device values made by every
    engine in the process (the bench reports them per iteration).

    Args:
        backbone: a model implementing :class:`arvis.models.protocol.Backbone`.
        condition: the batch's condition (``B`` samples).
        sampling: how logits become the target distribution ``p``.
        generator: one ``torch.Generator`` for the batch, one per sample, or ``None``.
        method: the method name recorded in the statistics.
        on_commit: called after every commit with the engine (progress bars, streaming previews).
        drafter_of: make this engine a *drafter engine* of another request's engine (a draft model's
            own cache and masks): it shares that engine's random streams, and its forwards are counted
            and timed as that engine's draft forwards.
        scratch_slots: cache slots after the sequence's own, for inputs that share a sequence index with
            another input of the same forward (a tree of candidates: :meth:`evaluate`'s ``scratch``). The
            backbone must accept ``allocate_cache(..., extra_slots=)`` and ``forward_tokens(...,
            positions=)`` (arvis's backbones do; :mod:`arvis.models.protocol`).
    """

    host_syncs_total = 0

    def __init__(self, backbone: Backbone, condition: Condition, sampling: SamplingConfig,
                 generator: GeneratorArg = None, method: str = "ar",
                 on_commit: Callable[[DecodeEngine], None] | None = None, drafter_of: DecodeEngine | None = None,
                 scratch_slots: int = 0):
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
        self.condition_length = C = self.layout.condition_length
        self.vocab_size = self.layout.vocab_size
        self.cfg = sampling.uses_cfg
        if self.cfg and not getattr(backbone, "supports_cfg", True):
            raise ValueError("guidance_scale must be 1.0: this model has no unconditional embedding")

        self.drafter_of = drafter_of
        self.random = drafter_of.random if drafter_of else RandomStreams(generator, B, self.device)
        self.clock = drafter_of.clock if drafter_of else ForwardClock(self.device)
        self._role = "draft" if drafter_of else "target"
        if scratch_slots < 0:
            raise ValueError(f"scratch_slots must be >= 0, got {scratch_slots}")
        rows = 2 * B if self.cfg else B
        if scratch_slots:
            self.cache = backbone.allocate_cache(rows, param.dtype, self.device, extra_slots=scratch_slots)
        else:
            self.cache = backbone.allocate_cache(rows, param.dtype, self.device)
        self.scratch_slots = scratch_slots
        self._scratch_base = self.cache.slots - scratch_slots  # scratch slot k lives at _scratch_base + k
        self.narrow_masks = bool(getattr(backbone, "narrow_masks", False))
        self.slot_valid = torch.zeros(self.cache.rows, self.cache.slots, dtype=torch.bool, device=self.device)
        self._slot_ids = torch.arange(self.cache.slots, device=self.device)
        # Sequence index of each slot; condition slots get -1 so that no rollback length drops them.
        self._slot_index = (self._slot_ids - C).clamp_min(-1)
        # Token buffers carry one scratch column (index N) that masked-out commits write to, so that a
        # selective commit needs no boolean indexing (no host synchronisation).
        self._tokens = torch.full((B, N + 1), NO_TOKEN, dtype=torch.long, device=self.device)
        self.tokens = self._tokens[:, :N]  # [B, N] committed token per sequence index (NO_TOKEN: not yet)
        self.active = torch.arange(B, device=self.device)  # sample ids of the active rows
        self.active_list: list[int] = list(range(B))
        forced = torch.full((N,), NO_TOKEN, dtype=torch.long, device=self.device)
        for index, token in self.layout.structural_tokens.items():
            forced[index] = token
        self.forced_tokens = forced if self.layout.structural_tokens else None
        self.stats = StatsRecorder(B, N, self.device)
        # Per sample, summed over forwards: its logits (entries [0, B)) and its target distributions
        # (entries [B, 2B)). A sum is NaN / non-finite iff some entry was (see _probs).
        self._health = drafter_of._health if drafter_of else torch.zeros(2 * B, device=self.device)
        self._health_index = self._health_slots()
        self._t0 = time.perf_counter()
        self._prefilled = False
        self._scratch_column = torch.tensor(N, device=self.device)  # where masked-out commits go
        self._active_rows: dict[torch.Size, torch.Tensor] = {}  # active sample ids expanded per commit shape
        self._commits = 0  # commits so far (a read's version, see _version)
        self._closing: tuple[tuple[int, int, int], list[float]] | None = None  # the last closing status read

    # ------------------------------------------------------------------ forwards
    @property
    def known(self) -> torch.Tensor:
        """``[B, N]`` bool: the sequence indices committed so far."""
        return self.tokens != NO_TOKEN

    def _health_slots(self) -> torch.Tensor:
        """Where each forward's per-row sums accumulate: logit rows (CFG pair included), then p rows."""
        rows = self._rows(self.active)
        return torch.cat([rows, self.active + self.batch_size])

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

    def _forward(self, fn: Callable[..., Any], *args: Any, positions: torch.Tensor | None = None) -> Any:
        """Run a backbone call, timed and counted under this engine's role (target or draft); ``positions``
        (inputs in scratch slots) is passed only when given, so backbones without scratch support still work."""
        with self.clock.measure(self._role):
            out = fn(*args) if positions is None else fn(*args, positions=positions)
        if self.drafter_of is None:
            self.stats.target_forward(self.active_list)
        else:
            self.drafter_of.stats.draft_forward(self.drafter_of.active_list)
        return out

    def _probs(self, logits: torch.Tensor, target_index: torch.Tensor) -> torch.Tensor:
        A = target_index.shape[0]
        cond, uncond = (logits[:A], logits[A:]) if self.cfg else (logits, None)
        probs = logits_to_probs(cond, uncond, self.sampling, target_index, self.forced_tokens,
                                self.layout.image_token_range)
        # Non-finite check, vectorised and on the device (4 ops, no sync): per row, the sum of its logits
        # and of its target distributions accumulates over forwards; NaN anywhere keeps the logit sum NaN,
        # NaN or ±inf anywhere keeps the p sum non-finite. Read at the next status() or at finish().
        self._health.index_add_(0, self._health_index, torch.cat([logits.sum((1, 2)), probs.sum((1, 2))]))
        return probs

    def _mask_width(self, extent: int | None) -> int:
        """Slots a forward's mask covers: all of them, or (narrow masks) the condition plus ``extent``
        sequence indices, rounded up to :data:`MASK_WIDTH_STEP`."""
        if extent is None or not self.narrow_masks:
            return self.cache.slots
        width = self.condition_length + extent
        return min(self.cache.slots, -(-width // MASK_WIDTH_STEP) * MASK_WIDTH_STEP)

    @torch.no_grad()
    def prefill(self) -> torch.Tensor:
        """Write the condition; returns ``p`` for sequence index 0, ``[B, V]`` fp32."""
        if self._prefilled:
            raise RuntimeError("prefill() runs once per request")
        self._prefilled = True
        cond = self.condition
        if self.cfg:
            cond = cond.concat(self.backbone.null_condition(cond))
        logits, valid = self._forward(self.backbone.prefill, cond, self.cache)
        self.slot_valid[:, : self.condition_length] = valid
        B = self.batch_size
        return self._probs(logits[:, None], torch.zeros(B, 1, dtype=torch.long, device=self.device))[:, 0]

    @torch.no_grad()
    def evaluate(self, inputs: torch.Tensor, input_index: torch.Tensor, pad: torch.Tensor | None = None,
                 extent: int | None = None, scratch: torch.Tensor | None = None,
                 ancestors: torch.Tensor | None = None) -> torch.Tensor:
        """One target forward.

        Args:
            inputs: ``[A, T]`` token ids fed at sequence indices ``input_index`` (committed tokens or drafts).
            input_index: ``[A, T]`` sequence indices of the inputs; each input is written to its slot
                and stays valid until :meth:`truncate` says otherwise.
            pad: ``[A, T]`` bool, queries that are padding (their index is replaced by :attr:`pad_index`
                and their output is meaningless).
            extent: a host-side bound, greater than every non-padded input index (lets a backbone with
                narrow masks attend over the prefix only; padded queries may then see only part of it,
                which does not matter); ``None``: no bound known.
            scratch: ``[T]`` or ``[A, T]`` int64: the query's input goes to scratch slot ``scratch`` (``0 <=
                scratch < scratch_slots``) instead of its sequence index's slot, at the same position (the
                positional encoding still sees ``input_index``); ``-1``: its own slot. For several inputs
                at one sequence index in one forward (a tree of candidates). Scratch slots never become
                valid: they are seen only through ``ancestors``.
            ancestors: ``[T, T]`` or ``[A, T, T]`` bool: query ``t`` sees the input of query ``s`` of this
                call iff ``ancestors[t, s]`` (itself included), plus the slots valid before this call at
                positions before its own — instead of every valid slot up to its own. Padded queries see
                no input of this call.

        Returns:
            ``[A, T, V]`` fp32: ``p`` of the sequence index ``input_index + 1`` given every valid slot
            before it (in slot order) and the inputs of this call before it (with ``ancestors``: its
            ancestors among them).
        """
        if pad is not None:
            input_index = input_index.masked_fill(pad, self.pad_index)
            inputs = inputs.masked_fill(pad, 0)
        if ancestors is not None:
            return self._evaluate_tree(inputs, input_index, pad, extent, scratch, ancestors)
        if scratch is not None:
            raise ValueError("evaluate: scratch slots need ancestors (which inputs each query sees)")
        slots = self._rows(input_index + self.condition_length)  # [R, T]
        # Written slots become valid. Padding writes the scratch slot, which no real query can see (it
        # lies after every real input), so marking it valid is harmless; a padded query always sees the
        # condition, so its attention row is never empty.
        self.slot_valid.scatter_(1, slots, True)
        width = self._mask_width(extent)
        ids, valid = ((self._slot_ids, self.slot_valid) if width == self.cache.slots else
                      (self._slot_ids[:width], self.slot_valid[:, :width]))
        mask = (ids <= slots[..., None]) & valid[:, None]  # [R, T, W]
        logits = self._forward(self.backbone.forward_tokens, self._rows(inputs), slots, self.cache, mask)
        return self._probs(logits, input_index + 1)

    def _evaluate_tree(self, inputs: torch.Tensor, input_index: torch.Tensor, pad: torch.Tensor | None,
                       extent: int | None, scratch: torch.Tensor | None, ancestors: torch.Tensor) -> torch.Tensor:
        """:meth:`evaluate` with explicit ancestors (and scratch slots): see its docstring."""
        A, T = inputs.shape
        C = self.condition_length
        positions = self._rows(input_index + C)  # [R, T]: the slot each input would own (its position)
        slots = positions
        if scratch is not None:
            scratch = scratch.expand(A, T)
            if self.scratch_slots == 0:
                raise ValueError("evaluate: scratch slots requested but the engine has none "
                                 "(DecodeEngine(scratch_slots=...))")
            if pad is not None:
                scratch = scratch.masked_fill(pad, -1)
            slots = torch.where(self._rows(scratch) >= 0, self._rows(scratch) + self._scratch_base, positions)
        # Slots valid before this call, strictly before each query's position, plus its ancestors' inputs.
        width = self.cache.slots if scratch is not None else self._mask_width(extent)
        mask = (self._slot_ids[:width] < positions[..., None]) & self.slot_valid[:, None, :width]  # [R, T, W]
        # A padded query's input is seen by nobody: it goes to an extra column, dropped after the scatter.
        column = slots if pad is None else torch.where(self._rows(pad), width, slots)
        seen = torch.zeros(mask.shape[0], T, width + 1, dtype=torch.bool, device=self.device)
        seen.scatter_(2, column[:, None, :].expand(-1, T, -1), self._rows(ancestors.expand(A, T, T)))
        mask |= seen[..., :width]
        # Own-slot inputs become valid (until a rollback); scratch inputs mark the padding slot instead, which
        # lies after every real position and so is harmless (see evaluate).
        pad_slot = self.pad_index + C
        self.slot_valid.scatter_(1, slots.masked_fill(slots >= self._scratch_base, pad_slot)
                                 if scratch is not None else slots, True)
        logits = self._forward(self.backbone.forward_tokens, self._rows(inputs), slots, self.cache, mask,
                               positions=positions if scratch is not None else None)
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

        Commits are attributed to the latest target forward (the one that produced them). No host
        synchronisation: masked-out entries are written to a scratch column.
        """
        self._commits += 1
        if mask is not None:
            index = torch.where(mask, index, self._scratch_column)
        rows = self._active_rows.get(index.shape)
        if rows is None:
            rows = self._active_rows[index.shape] = self.active[:, None].expand_as(index)
        where = (rows, index)
        self._tokens.index_put_(where, values)
        self.stats.commit_forward.index_put_(where, torch.full((), self.stats.forward_index - 1,
                                                               dtype=torch.long, device=self.device))
        if self.on_commit is not None:
            self.on_commit(self)

    def settle(self, scratch: torch.Tensor, input_index: torch.Tensor, mask: torch.Tensor) -> None:
        """Move the inputs of the last forward that were evaluated in scratch slots and are now final to their
        own slots, where later queries read them (their keys and values were computed at their own position
        with their final context, so they are the ones a plain forward would have written).

        Args:
            scratch: ``[T]`` or ``[A, T]`` the scratch slot of each query's input (``-1``: its own slot).
            input_index: ``[A, T]`` the inputs' sequence indices. mask: ``[A, T]`` the inputs now final.
        """
        A, T = input_index.shape
        scratch = scratch.expand(A, T)
        move = mask & (scratch >= 0)
        idle = self.pad_index + self.condition_length  # masked-out columns copy the padding slot onto itself
        source = torch.where(move, scratch + self._scratch_base, idle)
        target = torch.where(move, input_index + self.condition_length, idle)
        self.cache.copy_slots(self._rows(source), self._rows(target))

    def invalidate(self, index: torch.Tensor, mask: torch.Tensor) -> None:
        """Make the slots of sequence indices ``index [A, T]`` invalid where ``mask`` (inputs of the last forward
        that were not committed, when the commits are not a prefix: parallel rows). No host synchronisation."""
        slots = torch.where(mask, index + self.condition_length, self.pad_index + self.condition_length)
        self.slot_valid.scatter_(1, self._rows(slots), False)

    def truncate(self, lengths: torch.Tensor) -> None:
        """Keep valid only the input slots of sequence indices ``< lengths[a]`` (raster rollback)."""
        rows = self._rows(lengths)
        self.slot_valid &= self._slot_index < rows[:, None]
        self.cache.rollback(rows + self.condition_length)

    # ------------------------------------------------------------------ the once-per-iteration sync
    def status(self, *values: torch.Tensor, extra: torch.Tensor | None = None, closing: bool = False
               ) -> list[list[Any]]:
        """Read small per-active-sample integer tensors (``[A]`` each) on the host in ONE synchronisation,
        and raise :class:`NonFiniteError` if a sample's distribution was non-finite so far.

        Returns one list of ``A`` ints per tensor given; with ``extra`` (a small float tensor read in the same
        synchronisation, e.g. a window policy's estimates), its values follow as one more list of floats.

        ``closing``: this read may find every sample done (the caller's host-side bound says so). It then also
        carries what :meth:`finish` reads, so that a decode ending here needs no read of its own.
        """
        # One flat fp64 transfer (exact for these integers): the values, the per-sample health sums (their
        # NaN / inf tests run on the host: no device ops for them), then the extras and the closing payload.
        parts = [v.double() for v in values] + [self._health.double()]
        if extra is not None:
            parts.append(extra.double().flatten())
        if closing:
            parts.append(self._closing_payload())
        host = self.to_host(torch.cat(parts))
        A, B = self.num_active, self.batch_size
        out: list[list[Any]] = [[int(x) for x in host[i * A:(i + 1) * A]] for i in range(len(values))]
        at = len(values) * A
        self._check_health(host[at:at + 2 * B])
        at += 2 * B
        if extra is not None:
            out.append(host[at:at + extra.numel()])
            at += extra.numel()
        self._closing = (self._version(), host[at:]) if closing else None
        return out

    def _version(self) -> tuple[int, int, int]:
        """Changes with every forward and every commit: a read taken at one version is current while it holds."""
        return self.stats.forward_index, self.stats.draft_forwards, self._commits

    def _closing_payload(self) -> torch.Tensor:
        """What :meth:`finish` reads, flat fp64: the count of uncommitted tokens, then the decode order ``[B, N]``."""
        missing = (self.tokens == NO_TOKEN).sum().double()[None]
        return torch.cat([missing, self.stats.commit_forward[:, : self.num_tokens].flatten().double()])

    def _check_health(self, health: Sequence[float]) -> None:
        """Raise :class:`NonFiniteError` from the health sums read on the host (``[2B]``: logits, then p)."""
        B = self.batch_size
        bad_logits = [math.isnan(h) for h in health[:B]]
        bad_probs = [not math.isfinite(h) for h in health[B:]]
        if any(bad_logits) or any(bad_probs):
            self._raise_nonfinite(bad_logits, bad_probs, range(B))

    @staticmethod
    def to_host(tensor: torch.Tensor) -> Any:
        """``tensor.tolist()``: a deliberate host synchronisation, counted in :attr:`host_syncs_total`."""
        DecodeEngine.host_syncs_total += 1
        return tensor.tolist()

    def _raise_nonfinite(self, bad_logits: Sequence[int], bad_probs: Sequence[int], samples: Sequence[int]) -> None:
        ids = [s for s, a, b in zip(samples, bad_logits, bad_probs, strict=True) if a or b]
        if not ids:
            return
        if any(bad_logits):
            cause = ("the model's logits were NaN: check the weights (a NaN checkpoint or output head) "
                     "and the inputs (e.g. NaN prompt_embeds)")
        else:
            cause = (f"the target distribution was not finite although the logits had no NaN: guidance_scale="
                     f"{self.sampling.guidance_scale!r} or temperature={self.sampling.temperature!r} overflows fp32, "
                     f"or the model produced infinite logits")
        raise NonFiniteError(f"sample(s) {ids} of the batch: {cause}. The whole request fails; the other samples "
                             f"were unaffected and reproduce alone with their own generators.")

    # ------------------------------------------------------------------ ragged batches
    def retire(self, kept: Sequence[int]) -> torch.Tensor:
        """Keep only the active samples at positions ``kept`` (host list, in the old active order).

        Compacts the cache (:meth:`~arvis.models.protocol.KVCacheProtocol.select_rows`) and the masks to
        the kept rows: one copy per call, so call it only when some sample finished. Returns ``kept``
        as a tensor so the method can compact its own per-row state the same way.
        """
        kept_t = torch.tensor(list(kept), dtype=torch.long, device=self.device)
        if len(kept) == self.num_active:
            return kept_t
        rows = torch.cat([kept_t, kept_t + self.num_active]) if self.cfg else kept_t
        self.cache.select_rows(rows)
        self.slot_valid = self.slot_valid.index_select(0, rows)
        self.active = self.active.index_select(0, kept_t)
        self._active_rows.clear()
        self.active_list = [self.active_list[p] for p in kept]
        self._health_index = self._health_slots()
        return kept_t

    # ------------------------------------------------------------------ results
    def partial_stats(self) -> BatchStats:
        """The statistics of a decode stopped early (a pipeline's interrupt): no completeness or health
        check, peak memory not measured."""
        return self.stats.finish(self.method, time.perf_counter() - self._t0, 0.0)

    def finish(self, extra: dict[str, Any] | None = None) -> BatchStats:
        """Stop the clock and return the statistics (raises if a token was never committed, or
        :class:`NonFiniteError` if a sample's distribution was non-finite).

        One host read (the health sums, the count of uncommitted tokens and the decode order together), or none
        when the method's last :meth:`status` was a ``closing`` one and nothing changed since."""
        latency = time.perf_counter() - self._t0
        if self._closing is not None and self._closing[0] == self._version():
            payload = self._closing[1]  # health already checked by that status
        else:
            host = self.to_host(torch.cat([self._health.double(), self._closing_payload()]))
            self._check_health(host[: 2 * self.batch_size])
            payload = host[2 * self.batch_size:]
        missing = int(payload[0])
        if missing:
            raise RuntimeError(f"method {self.method!r} left {missing} tokens uncommitted")
        if extra:
            self.stats.extra.update(extra)
        commit = torch.tensor(payload[1:], dtype=torch.long).view(self.batch_size, self.num_tokens)
        return self.stats.finish(self.method, latency, peak_memory_mb(self.device), self.clock, commit=commit)
