"""The typed modes of arvis's vocabulary: every string option that selects a behaviour, as a ``Literal``.

One place, imported by every layer that names a mode (the acceptance math, the drafters, the methods' option
declarations, the pipelines), so a typo is a type error in a checked call and a ``ValueError`` listing the
allowed values at run time (:func:`check_mode`). Importing this module costs nothing (no torch): the command
line checks options with it before anything heavy loads.
"""

from __future__ import annotations

from typing import Literal, get_args

#: How drafts are verified: ``exact`` speculative acceptance (lossless) or a relaxed rule (lossy; LANTERN,
#: LANTERN++, arvis's bounded rule with a TV bound, GSD's grouped acceptance).
AcceptanceKind = Literal["exact", "lantern", "lantern++", "bounded", "gsd"]
#: How a Jacobi draft is refreshed from the forward that evaluated it (SJD: ``none``; MC-SJD: ``maximal``).
Coupling = Literal["none", "maximal", "gumbel"]
#: Initial drafts of a newly drafted position (the temporal ones on video layouts only).
JacobiInit = Literal["random", "repeat_horizontal", "repeat_vertical", "neighbour_distribution",
                     "repeat_temporal", "previous_frame_distribution"]
#: The verified window's shape: a contiguous raster window, or plus ZipAR's staircase bands.
WindowShape = Literal["contiguous", "staircase"]
#: How a batch advances: every sample by what it accepted (``ragged``) or all by the minimum (``lockstep``).
BatchMode = Literal["ragged", "lockstep"]
#: MAR's guidance strength over a decode: ramped with the share decoded (``linear``, MAR's) or ``constant``.
CfgSchedule = Literal["linear", "constant"]

ACCEPTANCE_KINDS: tuple[str, ...] = get_args(AcceptanceKind)
COUPLINGS: tuple[str, ...] = get_args(Coupling)
JACOBI_INITS: tuple[str, ...] = get_args(JacobiInit)
TEMPORAL_INITS: tuple[str, ...] = ("repeat_temporal", "previous_frame_distribution")
WINDOW_SHAPES: tuple[str, ...] = get_args(WindowShape)
BATCH_MODES: tuple[str, ...] = get_args(BatchMode)
CFG_SCHEDULES: tuple[str, ...] = get_args(CfgSchedule)


def check_mode(name: str, value: object, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of ``allowed``, else ``ValueError`` naming the option and the allowed values."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}, got {value!r}")
    return value


__all__ = ["ACCEPTANCE_KINDS", "BATCH_MODES", "CFG_SCHEDULES", "COUPLINGS", "JACOBI_INITS", "TEMPORAL_INITS",
           "WINDOW_SHAPES", "AcceptanceKind", "BatchMode", "CfgSchedule", "Coupling", "JacobiInit", "WindowShape",
           "check_mode"]
