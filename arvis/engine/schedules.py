"""Schedules: which sequence positions each forward evaluates (index math, no model).

Four schedules, all used through the engine's one primitive ("evaluate these positions"):

- :class:`RasterWindow` — the verification window of SJD / MC-SJD and draft-model speculative decoding:
  a forward over ``[x_{n−1}, d_n … d_{n+L−1}]`` predicts ``n … n+L`` (``L`` drafts, then the *bonus*
  position, which has no draft);
- :class:`StaircaseWindow` — the raster window plus ZipAR's staircase as refresh-only *bands* in the
  next rows (an arvis composition: spatial parallelism with every token still verified in raster order);
- :func:`zipar_schedule` — ZipAR's own lossy schedule (below);
- :class:`TreeWindow` — the raster window plus a tree of candidates over its first positions (SJD-PAC).

ZipAR (He et al., ICML 2025, arXiv:2412.04062): spatially parallel decoding on an ``H × W`` grid
with row lag ``w`` (the paper calls it a window; in arvis ``window`` only means a verified window). Every
active row decodes one token per forward; row ``r + 1`` starts once row ``r`` has ``w`` tokens. Its first
token is predicted by the query at the slot of ``(r, W − 1)``,
which is not decoded yet, so a *proxy* token — the latest decoded token of row ``r − 1`` — is fed
there (LlamaGen has no end-of-line token); when ``(r, W − 1)`` is decoded, the real token is
*re-fed* into that slot so later queries read it. Row 1 has no row above its predecessor, so it
waits for row 0 to finish (as in the reference LlamaGen code). Forwards, prefill included:
``2W + (H − 2)·w`` for ``w < W`` (16×16, w = 4: 88), and ``H·W`` (plain AR) for ``w >= W``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Query:
    """One input of a forward.

    Attributes:
        input_index: sequence index whose slot the input is written to (its rotary position too).
        source_index: sequence index whose (already decoded) token is fed there — equal to
            ``input_index`` except for proxies.
        predicts: the sequence index this query's output decodes, or ``None`` (a re-feed).
    """

    input_index: int
    source_index: int
    predicts: int | None


@dataclass(frozen=True)
class Forward:
    queries: tuple[Query, ...] = field(default_factory=tuple)


def zipar_schedule(height: int, width: int, row_lag: int) -> list[Forward]:
    """The forwards after the prefill (which decodes index 0), for an ``height × width`` grid."""
    if height < 1 or width < 1:
        raise ValueError(f"grid must be positive, got {height}x{width}")
    if row_lag < 1:
        raise ValueError(f"row_lag must be >= 1, got {row_lag}")
    decoded = [0] * height  # tokens decoded per row
    decoded[0] = 1  # index 0 comes from the prefill
    active = [0]
    next_row = 1  # the next row to start
    pending_refeed: list[int] = []  # rows whose last token must be re-fed over a proxy
    proxied: set[int] = set()  # rows r whose slot (r, W-1) holds a proxy
    forwards: list[Forward] = []
    while any(d < width for d in decoded):
        queries: list[Query] = []
        for r in pending_refeed:
            last = r * width + width - 1
            queries.append(Query(last, last, None))
        pending_refeed = []
        starting: list[int] = []
        for r in active:
            c = decoded[r]
            if c < width:
                queries.append(Query(r * width + c - 1, r * width + c - 1, r * width + c))
        # Start the next row: after row r has `row_lag` tokens (proxy), or when row r is complete.
        nxt = next_row
        if nxt < height:
            above = nxt - 1
            if decoded[above] == width:
                last = above * width + width - 1
                queries.append(Query(last, last, nxt * width))
                starting.append(nxt)
            elif decoded[above] >= row_lag and above >= 1:
                proxy = (above - 1) * width + decoded[above - 1] - 1  # latest decoded token two rows up
                queries.append(Query(above * width + width - 1, proxy, nxt * width))
                proxied.add(above)
                starting.append(nxt)
        forwards.append(Forward(tuple(queries)))
        for q in queries:
            if q.predicts is not None:
                r = q.predicts // width
                decoded[r] += 1
                if decoded[r] == width and r in proxied and r + 1 < height:
                    pending_refeed.append(r)
        next_row += len(starting)
        active = sorted({*[r for r in active if decoded[r] < width], *starting})
    return forwards


def zipar_forward_count(height: int, width: int, row_lag: int) -> int:
    """Target forwards of ZipAR including the prefill: ``2W + (H−2)·w`` (w < W, H ≥ 2), else ``H·W``."""
    if row_lag >= width or height == 1:
        return height * width
    return 2 * width + (height - 2) * row_lag


def zipar_schedule_eol(height: int, width: int, row_lag: int, tail: int = 0) -> list[Forward]:
    """ZipAR on a layout whose rows end with a known end-of-line token (Emu3, Lumina-mGPT): no proxies.

    Sequence index ``r·(W+1) + c`` is cell ``(r, c)``, ``r·(W+1) + W`` row ``r``'s end-of-line; ``tail``
    structural tokens (end-of-frame, end-of-image) follow the last row. Row ``r + 1`` starts once row ``r``
    has ``row_lag`` tokens: its first token is predicted by the query at row ``r``'s end-of-line slot, fed
    with that (known) token while the rest of row ``r`` is still a hole. When row ``r``'s last cell is
    decoded, it is fed (its query predicts the forced end-of-line) together with the end-of-line again, so
    that slot's keys see the whole row from then on (LlamaGen's re-feed, without a proxy). The tail is fed
    in one forward after the last row. With ``row_lag >= W`` every query sees exactly the prefix plain AR
    sees; forwards after the prefill: ``H·W`` then, about ``W + (H−1)·row_lag`` otherwise.
    """
    if height < 1 or width < 1:
        raise ValueError(f"grid must be positive, got {height}x{width}")
    if row_lag < 1:
        raise ValueError(f"row_lag must be >= 1, got {row_lag}")
    if tail < 0:
        raise ValueError(f"tail must be >= 0, got {tail}")
    stride = width + 1

    def eol(r: int) -> int:
        return r * stride + width

    decoded = [0] * height
    decoded[0] = 1  # cell (0, 0) comes from the prefill
    started = 1  # rows [0, started) have begun
    closed = [False] * height  # the row's last cell has been fed (its end-of-line re-fed)
    forwards: list[Forward] = []
    while not closed[height - 1]:
        queries: list[Query] = []
        for r in range(started):
            c = decoded[r]
            if c < width:
                queries.append(Query(r * stride + c - 1, r * stride + c - 1, r * stride + c))
            elif not closed[r]:
                last = r * stride + width - 1
                queries.append(Query(last, last, eol(r)))
                if r + 1 < height:  # re-feed the end-of-line; it starts row r + 1 if that has not begun
                    queries.append(Query(eol(r), eol(r), (r + 1) * stride if started == r + 1 else None))
                else:  # the last row: end-of-line, then the tail, all known
                    for i in range(tail):
                        queries.append(Query(eol(r) + i, eol(r) + i, eol(r) + i + 1))
        if started < height and started - 1 >= 0 and row_lag <= decoded[started - 1] < width:
            queries.append(Query(eol(started - 1), eol(started - 1), started * stride))
        forwards.append(Forward(tuple(queries)))
        new_started = started
        for q in queries:
            if q.predicts is None:
                continue
            r, c = divmod(q.predicts, stride)
            if r < height and c < width:
                decoded[r] += 1
                new_started = max(new_started, r + 1)
            elif r < height and c == width:
                closed[r] = True
        started = new_started
    return forwards


# ----------------------------------------------------------------------------- verification windows
@dataclass(frozen=True)
class WindowPlan:
    """What one verification forward evaluates, per active sample.

    Attributes:
        targets: ``[A, T]`` sequence index each query predicts (its input is at ``targets − 1``).
        real: ``[A, T]`` bool, the query lies inside the sequence (others are padding).
        verified: the first ``verified`` columns are the raster window, verified left to right (the
            last of them is the bonus position); later columns are refresh-only bands.
        extent: host-side bound on the input indices (``> (targets − 1).max()`` over real queries).
        tree: the tree of candidates after the first ``verified`` columns (:class:`TreeWindow`), or ``None``.
    """

    targets: torch.Tensor
    real: torch.Tensor
    verified: int
    extent: int
    tree: TreeShape | None = None

    @functools.cached_property
    def inputs_index(self) -> torch.Tensor:
        """``[A, T]`` sequence index of each query's input (``targets − 1``, 0 for padding at index 0); computed
        once per plan (the drafter and the forward both read it)."""
        return (self.targets - 1).clamp_min(0)


class RasterWindow:
    """``window`` drafts after the committed prefix, plus the bonus position: ``window + 1`` queries.

    Args:
        window: drafts verified per forward (``L``).
        num_tokens: sequence length ``N``.
    """

    def __init__(self, window: int, num_tokens: int):
        self.window, self.num_tokens = window, num_tokens
        self.verified = window + 1
        self._offsets: dict[torch.device, torch.Tensor] = {}

    @property
    def positions_per_forward(self) -> int:
        return self.verified

    @property
    def reach(self) -> int:
        """Targets lie in ``[n, n + reach)`` for a sample with ``n`` committed tokens."""
        return self.verified

    def _offsets_on(self, device: torch.device) -> torch.Tensor:
        if device not in self._offsets:
            self._offsets[device] = torch.arange(self.verified, device=device)
        return self._offsets[device]

    def plan(self, committed: torch.Tensor, max_committed: int, single: bool = False, window: int | None = None
             ) -> WindowPlan:
        """The plan for samples with ``committed [A]`` tokens (``max_committed`` its host-side max);
        ``single``: only the first query (a plain AR step, when no sample has drafts to verify); ``window``: this
        forward's drafts, at most the schedule's (cost-aware windows choose it per forward)."""
        N = self.num_tokens
        width = 1 if single else self.verified if window is None else min(window, self.window) + 1
        offsets = self._offsets_on(committed.device)[:width]
        targets = committed[:, None] + offsets  # [A, K]
        real = targets < N
        extent = min(max_committed + offsets.shape[0], N)
        return WindowPlan(targets.clamp_max(N - 1), real, offsets.shape[0], extent)


class StaircaseWindow(RasterWindow):
    """The raster window plus bands of ``window`` positions in each of the next ``rows`` rows, shifted
    left by ``step`` columns per row (ZipAR's staircase). Band queries are refresh-only: their ``p``
    conditions on the committed prefix and this forward's inputs (holes masked), so it only seeds the
    drafts there; every token is still verified by the raster window.
    """

    def __init__(self, window: int, num_tokens: int, width: int, rows: int, step: int):
        super().__init__(window, num_tokens)
        self.width, self.rows, self.step = width, rows, step
        self._bands: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def positions_per_forward(self) -> int:
        return self.verified + self.rows * self.window

    @property
    def reach(self) -> int:
        # A band position of row r0 + i lies at most i·W + window − 1 after n = r0·W + c0.
        return max(self.verified, self.rows * self.width + self.window)

    def plan(self, committed: torch.Tensor, max_committed: int, single: bool = False) -> WindowPlan:
        window = super().plan(committed, max_committed)
        device = committed.device
        if device not in self._bands:
            self._bands[device] = (torch.arange(1, self.rows + 1, device=device).repeat_interleave(self.window),
                                   torch.arange(self.window, device=device).repeat(self.rows))
        band_row, band_col = self._bands[device]
        N, W = self.num_tokens, self.width
        rows = (committed // W)[:, None] + band_row
        cols = ((committed % W)[:, None] - band_row * self.step).clamp_min(0) + band_col
        band = rows * W + cols
        # A band position must lie in its row, inside the grid, after the raster window.
        real = (cols < W) & (band < N) & (band > window.targets[:, -1:])
        targets = torch.cat([window.targets, band.masked_fill(~real, N - 1)], dim=1)
        extent = min(max_committed + self.reach, N)
        return WindowPlan(targets, torch.cat([window.real, real], dim=1), window.verified, extent)


@dataclass(frozen=True)
class TreeShape:
    """The fixed shape of a :class:`TreeWindow` forward: ``T = window + 1 + extra`` queries (nodes).

    Columns ``0 … window`` are the raster window (the *chain*: column ``c`` is the node at depth ``c``, its
    input the token at ``n − 1 + c``); columns after it are the *extra* nodes of the tree, depth by depth. A
    node at depth ``d`` holds a candidate for sequence index ``n − 1 + d``; every node at depth ``d < depth``
    has ``width`` children (the candidates of index ``n − 1 + d + 1``, rank 0 first); the chain node at depth
    ``depth`` continues the chain; extra nodes at depth ``depth`` are leaves. Candidate rank 0 at every depth
    is the chain's draft, so the all-rank-0 path is the chain.

    Attributes:
        width: candidates per branching position (``K``). depth: branching positions after the root.
        window: chain drafts (``L``). extra: extra nodes.
        children: ``[T, width]`` column of each node's child of each rank, ``-1`` none.
        node_depth: ``[T]`` depth of each node (the root is 0). rank: ``[T]`` its candidate rank.
        ancestors: ``[T, T]`` bool, ``[t, s]``: node ``s`` is ``t`` or an ancestor of it.
        scratch: ``[T]`` the scratch slot of each extra node, ``-1`` for chain nodes.
    """

    width: int
    depth: int
    window: int
    extra: int
    children: torch.Tensor
    node_depth: torch.Tensor
    rank: torch.Tensor
    ancestors: torch.Tensor
    scratch: torch.Tensor

    @staticmethod
    def build(window: int, width: int, depth: int, device: torch.device | str = "cpu") -> TreeShape:
        """The shape of a chain of ``window`` drafts with a ``width``-ary tree over its first ``depth`` positions."""
        if not 0 <= depth <= window:
            raise ValueError(f"tree depth must be in [0, window={window}], got {depth}")
        if width < 1:
            raise ValueError(f"tree width must be >= 1, got {width}")
        chain = window + 1
        # Nodes by path of ranks (r_1 … r_d); chain node c is the all-zero path of length c.
        column: dict[tuple[int, ...], int] = {(0,) * c: c for c in range(chain)}
        order: list[tuple[int, ...]] = []
        level = [()]
        for _ in range(depth):
            level = [path + (r,) for path in level for r in range(width)]
            order += [path for path in level if any(path)]
        for path in order:
            column[path] = len(column)
        T = len(column)
        paths = {c: path for path, c in column.items()}
        children = torch.full((T, width), -1, dtype=torch.long)
        node_depth = torch.zeros(T, dtype=torch.long)
        rank = torch.zeros(T, dtype=torch.long)
        ancestors = torch.zeros(T, T, dtype=torch.bool)
        for c, path in paths.items():
            node_depth[c] = len(path)
            rank[c] = path[-1] if path else 0
            for i in range(len(path) + 1):
                ancestors[c, column[path[:i]]] = True
            if len(path) < depth:
                for r in range(width):
                    children[c, r] = column[path + (r,)]
            elif not any(path) and c + 1 < chain:  # the chain goes on past the tree
                children[c, 0] = c + 1
        scratch = torch.where(torch.arange(T) >= chain, torch.arange(T) - chain, -1)
        return TreeShape(width, depth, window, T - chain, children.to(device), node_depth.to(device),
                         rank.to(device), ancestors.to(device), scratch.to(device))


class TreeWindow(RasterWindow):
    """The raster window plus a tree of candidates over its first ``depth`` positions (SJD-PAC's proactive
    drafting, :class:`TreeShape`): every node's query sees the committed prefix and its own ancestors; the
    extra nodes' inputs go to the engine's scratch slots (:meth:`arvis.engine.DecodeEngine.evaluate`).

    Args:
        window: chain drafts per forward (``L``). num_tokens: ``N``.
        width: candidates per branching position (``1``: the plain raster window). depth: branching positions.
    """

    def __init__(self, window: int, num_tokens: int, width: int, depth: int):
        super().__init__(window, num_tokens)
        self.width, self.depth = width, depth
        self.extra = TreeShape.build(window, width, depth).extra
        self._shapes: dict[torch.device, TreeShape] = {}

    @property
    def positions_per_forward(self) -> int:
        return self.verified + self.extra

    def shape_on(self, device: torch.device) -> TreeShape:
        if device not in self._shapes:
            self._shapes[device] = TreeShape.build(self.window, self.width, self.depth, device)
        return self._shapes[device]

    def plan(self, committed: torch.Tensor, max_committed: int, single: bool = False) -> WindowPlan:
        if single or self.extra == 0:
            return super().plan(committed, max_committed, single)
        shape = self.shape_on(committed.device)
        N = self.num_tokens
        targets = committed[:, None] + shape.node_depth
        extent = min(max_committed + self.verified, N)
        return WindowPlan(targets.clamp_max(N - 1), targets < N, self.verified, extent, shape)


# ----------------------------------------------------------------------------- parallel Jacobi rows (PJD)
@dataclass(frozen=True)
class RowSegment:
    """One row's part of a parallel-Jacobi forward (:func:`row_windows`): ``queries`` consecutive queries.

    Query ``j`` takes the token at sequence index ``first_input + j`` as input (query 0 takes the token at
    ``source`` instead: a row start fed a proxy) and predicts ``first_input + j + 1``.

    Attributes:
        row: the row. first_input: the first input's sequence index. queries: how many.
        source: the sequence index whose token query 0 takes (``first_input`` unless a proxy).
        scratch: query 0 is written to a scratch slot (a row start while the row above is unfinished: its
            input position belongs to the row above, which may be decoding it in the same forward).
        decodes: the queries predict cells of the row (``False``: a re-feed, whose prediction is unused).
    """

    row: int
    first_input: int
    queries: int
    source: int
    scratch: bool
    decodes: bool


def row_lengths(num_tokens: int, row_stride: int) -> list[int]:
    """Sequence indices per row: ``row_stride`` each, the last row taking whatever follows (a tail)."""
    rows = max(1, num_tokens // row_stride)
    return [row_stride] * (rows - 1) + [num_tokens - (rows - 1) * row_stride]


def row_windows(done: list[int], lengths: list[int], window: int, row_lag: int, known_row_ends: bool,
                settled: list[bool]) -> list[RowSegment]:
    """The rows one parallel-Jacobi forward decodes (PJD; Liao et al., CVPR 2026, arXiv:2606.05703), for one
    sample whose row ``r`` has its first ``done[r]`` indices committed.

    - A row starts once the row above has ``row_lag`` committed indices (ZipAR's rule); without known row
      ends (no end-of-line token), row 1 waits for row 0 to finish and a row start is fed a *proxy* — the
      latest committed token two rows up — at the position of the unfinished row above's last index.
    - Each active row gets ``window`` drafts plus its bonus query (``window + 1`` queries), clipped so that
      a row never overtakes the row above: its index ``c`` is decoded only while ``c <= done[r − 1] −
      row_lag`` (any ``c`` once the row above is finished).
    - A finished row's last index (committed as a recovered or bonus token, so never an input) is re-fed once
      (``settled[r]`` false) so later queries read it.

    Args:
        done: committed indices per row (index 0 of row 0 comes from the prefill).
        lengths: indices per row (:func:`row_lengths`). window: drafts per row. row_lag: as ZipAR's.
        known_row_ends: every row but the last ends with a known (structural) token.
        settled: per row, its last index has been fed (its keys are in the cache).

    Returns:
        The segments in row order.
    """
    starts = [sum(lengths[:r]) for r in range(len(lengths))]
    out: list[RowSegment] = []
    for r, (start, length) in enumerate(zip(starts, lengths, strict=True)):
        if done[r] == length:
            if r + 1 < len(lengths) and not settled[r] and done[r + 1] > 0:
                last = start + length - 1  # the row below started on a proxy: re-feed this row's real end
                out.append(RowSegment(r, last, 1, last, False, False))
            continue
        above_done = r == 0 or done[r - 1] == lengths[r - 1]
        if done[r] == 0:  # not started
            if not above_done and (done[r - 1] < row_lag or (r == 1 and not known_row_ends)):
                break  # rows below cannot start either
        allowed = length - done[r] if above_done else min(length, done[r - 1] - row_lag + 1) - done[r]
        if allowed <= 0:
            continue
        queries = min(window + 1, allowed)
        first = start + done[r] - 1
        if done[r] > 0 or above_done:
            out.append(RowSegment(r, first, queries, first, False, True))
        else:
            source = first if known_row_ends else starts[r - 2] + done[r - 2] - 1
            out.append(RowSegment(r, first, queries, source, True, True))
    return out


def max_active_rows(width: int, rows: int, row_lag: int) -> int:
    """An upper bound on the segments of one :func:`row_windows` forward: active rows trail each other by at
    least ``row_lag`` indices, plus re-feeds."""
    return min(rows, -(-width // max(row_lag, 1)) + 2) + 2
