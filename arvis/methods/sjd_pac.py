"""SJD-PAC (Kang et al., CVPR 2026, arXiv:2603.18599): Speculative Jacobi Decoding with proactive drafting and
adaptive continuation. LOSSLESS (proved by tests/methods/test_sjd_pac.py; docs/methods.md, "SJD-PAC").

``SJD-PAC = raster window L with a tree over its first D − 1 positions × Jacobi drafts with K candidates there ×
exact multi-draft acceptance × prefix (path) commit``:

- *adaptive continuation* — after a rejection the drafts behind it are not all redrawn: each is kept with
  probability ``min(1, p/q)`` under this forward's ``p``, else replaced from the residual. That is MC-SJD's
  maximal coupling (:func:`arvis.acceptance.coupling.maximal_coupling`; ``coupling="maximal"``, the default;
  ``gumbel`` is the Gumbel coupling, ``none`` SJD's fresh draws: proactive drafting alone);
- *proactive drafting* — the forward evaluates a ``tree_width``-ary tree of candidates over the first
  ``tree_depth − 1`` positions after the last committed token (the paper's ``K`` and ``D``; the tree's root is
  that token), each node a query that sees the committed prefix and its own ancestors
  (:class:`arvis.engine.schedules.TreeWindow`, the engine's scratch slots). A rejection of the chain's draft
  there no longer ends the forward: the next candidate is tried, and an accepted one continues down its
  subtree (:mod:`arvis.drafting.tree`).

What arvis changes from the published code, to stay exact: the extra candidates are a draw *without
replacement* from the position's draft distribution (the reference draws them from the residual of the
previous forward), the verification is recursive rejection sampling without replacement, following the first
accepted candidate (the reference keeps the longest accepted path, which favours long paths), and every node
tests with its own random numbers (:mod:`arvis.acceptance.multidraft`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from arvis.acceptance.relaxed import AcceptanceRule
from arvis.drafting.jacobi import JacobiDrafter
from arvis.drafting.tree import TreeDrafter
from arvis.engine.engine import DecodeEngine
from arvis.engine.schedules import TreeWindow
from arvis.methods.base import DecodingMethod, register_method
from arvis.methods.catalog import DecoderKind, MethodInfo, method_info, tree_extra_nodes
from arvis.methods.draft_verify import DraftVerifyLoop
from arvis.utils.modes import Coupling, JacobiInit


@register_method
@dataclass(frozen=True)
class SJDPAC(DecodingMethod):
    """SJD-PAC (module docstring). Options (declared in :mod:`arvis.methods.catalog`): ``window``, ``init``,
    ``coupling``, ``tree_width``, ``tree_depth``, ``jacobi_interval``."""

    info: ClassVar[MethodInfo] = method_info("sjd-pac", DecoderKind.TOKEN)

    window: int = 16
    init: JacobiInit = "random"
    coupling: Coupling = "maximal"
    tree_width: int = 3
    tree_depth: int = 3
    jacobi_interval: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        self._check_declared()

    @property
    def extra_nodes(self) -> int:
        return tree_extra_nodes(self.tree_width, self.tree_depth)

    @property
    def positions_per_forward(self) -> int:
        """Queries per forward: the raster window and its bonus position, plus the tree's extra nodes."""
        return self.window + 1 + self.extra_nodes

    def scratch_slots(self, layout: Any) -> int:
        return self.extra_nodes

    def run(self, engine: DecodeEngine) -> dict[str, Any]:
        schedule = TreeWindow(self.window, engine.num_tokens, self.tree_width, self.tree_depth - 1)
        jacobi = JacobiDrafter(self.init, self.coupling, self.jacobi_interval)
        jacobi.check_layout(engine.layout)
        drafter = TreeDrafter(jacobi)
        loop = DraftVerifyLoop(engine, schedule, lambda p0, noise: drafter.start(engine, schedule, p0, noise),
                               rule=AcceptanceRule(), gumbel=self.coupling == "gumbel")
        return {**loop.run(), "window": self.window, "init": self.init, "coupling": self.coupling,
                "tree_width": self.tree_width, "tree_depth": self.tree_depth,
                "positions_per_forward": self.positions_per_forward}


__all__ = ["SJDPAC"]
