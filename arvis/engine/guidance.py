"""Classifier-free guidance, one rule per model family: the combination, its strength schedule and its "off" value.

Every family combines the conditional and unconditional predictions the same way,
``guided = u + w · (c − u)``, on logits (LlamaGen, Emu3, video, VAR) or on the diffusion head's noise prediction
(MAR). What differs is the *strength* ``w`` at a given step and which ``guidance_scale`` turns guidance off (no
unconditional rows are run at all):

=============  ================================================  =====================
rule           strength ``w`` at progress ``t ∈ [0, 1]``          off at
=============  ================================================  =====================
``llamagen``   ``s`` (LlamaGen, Emu3, video; ``cfg_interval``)    ``s = 1``
``var``        ``1 + s · t``, ``t = k/(S − 1)`` at scale ``k``     ``s = 0``
``mar``        ``1 + (s − 1) · t`` (``linear``) or ``s``           ``s = 1``
               (``constant``), ``t`` = share of tokens decoded
=============  ================================================  =====================

(VAR writes its combination ``(1 + t)·c − t·u``, which is ``u + (1 + t)·(c − u)``.)

A pipeline names its rule in its :class:`~arvis.engine.sampling.SamplingConfig` (``guidance``); everything
that asks "does this call run unconditional rows?" asks :attr:`SamplingConfig.uses_cfg`, which reads the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch

GuidanceKind = Literal["llamagen", "var", "mar"]
GUIDANCE_KINDS: tuple[str, ...] = get_args(GuidanceKind)


@dataclass(frozen=True)
class GuidanceRule:
    """One family's classifier-free guidance (module docstring).

    Attributes:
        kind: the rule's name.
        off: the ``guidance_scale`` that disables guidance.
        formula: the strength in words (docs, errors).
    """

    kind: str
    off: float
    formula: str

    def active(self, guidance_scale: float) -> bool:
        """Whether ``guidance_scale`` runs unconditional rows under this rule."""
        return guidance_scale != self.off

    def strength(self, guidance_scale: float, progress: float, schedule: str = "constant",
                 total: int | None = None) -> float:
        """``w`` at ``progress`` ∈ [0, 1] (``schedule``: ``mar`` only, ``linear`` or ``constant``).

        With ``total``, ``progress`` is a count out of ``total`` (MAR: tokens decoded of ``L``) and the ramp is
        divided last, as the official samplers compute it (``(s − 1)·n / L``): the same float, bit for bit, which
        ``(s − 1)·(n / L)`` is not for every ``L``."""
        if self.kind == "var":
            ramp = guidance_scale * progress
        elif self.kind == "mar" and schedule == "linear":
            ramp = (guidance_scale - 1.0) * progress
        else:
            return float(guidance_scale)
        return 1.0 + (ramp if total is None else ramp / total)


RULES: dict[str, GuidanceRule] = {
    "llamagen": GuidanceRule("llamagen", 1.0, "u + s·(c − u) on the logits"),
    "var": GuidanceRule("var", 0.0, "(1 + s·k/(S − 1))·c − s·k/(S − 1)·u on the logits at scale k"),
    "mar": GuidanceRule("mar", 1.0, "u + w·(c − u) on the head's noise prediction, w = 1 + (s − 1)·(share decoded) "
                                    "(linear) or s (constant)"),
}


def combine(cond: torch.Tensor, uncond: torch.Tensor, strength: float | torch.Tensor) -> torch.Tensor:
    """``u + w · (c − u)``: the one guidance combination (in the inputs' dtype; callers pass fp32 logits)."""
    return uncond + (cond - uncond) * strength


def guided_rows(x: torch.Tensor, guided: bool) -> torch.Tensor:
    """The CFG pair's rows of per-sample inputs ``x [B, …]``: ``[x; x]`` (``[2B, …]``) when ``guided``, else ``x``."""
    return torch.cat([x, x]) if guided else x


def split_rows(out: torch.Tensor, batch: int, guided: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A forward's output over the CFG pair's rows → ``(conditional [B, …], unconditional [B, …] or None)``."""
    return (out[:batch], out[batch:]) if guided else (out, None)


__all__ = ["GUIDANCE_KINDS", "RULES", "GuidanceKind", "GuidanceRule", "combine", "guided_rows", "split_rows"]
