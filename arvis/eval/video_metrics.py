"""Video quality figures: per-frame FID, a domain Fréchet video distance, I3D FVD from a local file, temporal consistency.

All of them take clips as ``uint8 [N, T, H, W, 3]`` arrays and reuse :mod:`arvis.eval.fid` (statistics,
the Fréchet distance, cached reference statistics):

- :func:`per_frame_fid` — the FID of every frame of the generated clips against frames of held-out real
  clips (:func:`heldout_clip_frames`), in the image domain network's feature space (or any extractor
  :func:`arvis.eval.fid.load_extractor` builds). Blind to motion by construction.
- :func:`frechet_video_distance` with :class:`VideoFeatures` over the video feature network trained here
  (:class:`arvis.models.video_features.VideoFeatureNet`, shipped as ``arvis/weights/video-features``):
  a *domain FVD*. It sees motion (the network was trained to tell motion classes apart), but its scale is
  this network's own: comparable between models measured with the same weights, **not** with published
  FVDs (which use a Kinetics-400 I3D).
- :class:`I3DFeatures` — the standard FVD feature extractor, when the user has the I3D TorchScript file
  that StyleGAN-V's FVD uses (``i3d_torchscript.pt``, 400-d pre-softmax features, called with
  ``rescale=True, resize=True, return_features=True`` on ``[B, 3, T, H, W]`` values in ``[0, 255]``).
  Nothing is downloaded: pass the local path. Clips shorter than ``min_frames`` are looped up to it
  (I3D's temporal pooling needs enough frames). TorchScript runs in its own interpreter (no arbitrary
  Python unpickling), but load only files you trust.
- :func:`subject_statistics` — where a subject drawn on white is and how big: a per-frame FID says clips differ
  from real ones, these say how (a subject too large, touching the border, changing size between frames).
- :func:`temporal_consistency` — how much consecutive frames differ: the mean absolute pixel change
  (in ``[0, 1]`` units) and the mean cosine similarity of consecutive frames' domain features. Read
  beside the same figures of real clips: too low a change is a frozen clip, too high a flickering one.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arvis.eval.fid import FIDResult, FIDStatistics, compute_fid, frechet_distance
from arvis.models.domain_net import DomainFeatures

__all__ = [
    "VIDEO_FEATURES_DIR",
    "FVDResult",
    "I3DFeatures",
    "VideoFeatures",
    "check_clips",
    "clip_features",
    "clip_statistics",
    "frechet_video_distance",
    "heldout_clip_frames",
    "heldout_clips",
    "load_video_features",
    "per_frame_fid",
    "subject_statistics",
    "temporal_consistency",
]

VIDEO_FEATURES_DIR = Path(__file__).resolve().parents[1] / "weights" / "video-features"
REFERENCE_SEED = 0  # held-out clips of reference statistics
FLOOR_SEED = 1  # an independent draw for real-vs-real floors


def check_clips(clips: Any, name: str = "clips") -> np.ndarray:
    """``clips`` as ``uint8 [N, T, H, W, 3]`` (``ValueError`` naming ``name`` otherwise)."""
    if not isinstance(clips, np.ndarray) or clips.dtype != np.uint8 or clips.ndim != 5 or clips.shape[-1] != 3:
        raise ValueError(f"{name} must be a uint8 array [N, T, H, W, 3], got "
                         f"{getattr(clips, 'dtype', type(clips).__name__)} {getattr(clips, 'shape', '')}")
    if clips.shape[0] < 2 or clips.shape[1] < 2:
        raise ValueError(f"{name}: need at least 2 clips of at least 2 frames, got shape {clips.shape}")
    return clips


# ----------------------------------------------------------------------------- held-out real clips
def heldout_clips(num: int, num_frames: int = 8, resolution: int = 64, seed: int = REFERENCE_SEED,
                  named: bool = False) -> np.ndarray:
    """``uint8 [num, T, R, R, 3]`` held-out clips of every kind (:func:`arvis.data.video.build_video_clips`), or with
    ``named`` held-out clips of the moving named emoji (other motions of the same emoji), cached.

    Seeds are offset by 100 from the training streams' so that a reference never repeats a validation clip.
    """
    from arvis.data.video import build_video_clips

    extra = {"kinds": ("emoji",), "named": True} if named else {}
    return build_video_clips(num, "heldout", num_frames, resolution, seed=100 + seed, cache=True,
                             progress=num > 500, **extra).clips


def heldout_clip_frames(num: int, resolution: int, seed: int, named: bool = False) -> np.ndarray:
    """``num`` frames ``uint8 [num, R, R, 3]`` of held-out 8-frame clips (the per-frame FID reference)."""
    clips = heldout_clips(-(-num // 8), 8, resolution, seed, named)
    return np.ascontiguousarray(clips.reshape(-1, *clips.shape[2:])[:num])


def _named_clip_frames(num: int, resolution: int, seed: int) -> np.ndarray:
    return heldout_clip_frames(num, resolution, seed, named=True)


def per_frame_fid(clips: np.ndarray, extractor: Any = None, reference_frames: int = 4000, floor: bool = True,
                  cache_dir: str | os.PathLike | None = None, progress: bool = False, named: bool = False) -> FIDResult:
    """FID of all frames of ``clips`` against ``reference_frames`` frames of held-out clips.

    Args:
        clips: ``uint8 [N, T, H, W, 3]`` generated clips.
        extractor: an FID feature extractor (default: the shipped image domain network).
        reference_frames: frames in the reference statistics (cached per extractor).
        floor: also the real-vs-real floor at the same number of frames.
        named: the reference is held-out clips of the moving named emoji (a model trained on them).
    """
    clips = check_clips(clips)
    frames = np.ascontiguousarray(clips.reshape(-1, *clips.shape[2:]))
    return compute_fid(frames, "heldout", extractor, reference_num=reference_frames, floor=floor, cache_dir=cache_dir,
                       images_fn=_named_clip_frames if named else heldout_clip_frames, progress=progress)


# ----------------------------------------------------------------------------- video feature extractors
class VideoFeatures(DomainFeatures):
    """A :class:`~arvis.models.video_features.VideoFeatureNet` as a clip feature extractor.

    Call with ``[B, T, 3, S, S]`` values in ``[0, 255]``; ``input_size`` is ``S`` (clips of another side
    are resized per frame first, bicubic).
    """

    def __init__(self, network: Any, name: str = "video-features"):
        super().__init__(network, name)  # forward (features) and fingerprint as for images


def load_video_features(path: str | os.PathLike | None = None, device: str | torch.device = "cpu") -> VideoFeatures:
    """The shipped video feature network (``arvis/weights/video-features``) or a folder saved by ``save_pretrained``."""
    from arvis.models.video_features import VideoFeatureNet

    folder = Path(path) if path is not None else VIDEO_FEATURES_DIR
    if not (folder / "config.json").is_file():
        raise ValueError(f"extractor: {str(folder)!r} holds no video feature network (no config.json); train one "
                         f"with python -m arvis.training.train_video_features")
    net = VideoFeatureNet.from_pretrained(str(folder), torch_dtype=torch.float32)
    return VideoFeatures(net.to(device), name="video-features" if path is None else f"video-features:{folder.name}")


class I3DFeatures(torch.nn.Module):
    """Kinetics-400 I3D features from a local TorchScript file (StyleGAN-V's FVD detector); never downloaded.

    Args:
        path: the ``i3d_torchscript.pt`` file.
        min_frames: clips with fewer frames are looped (frame ``t`` repeated as ``t mod T``) up to this many.
        device: where it runs.
    """

    input_size = 224  # the detector resizes itself (resize=True); clips are passed at their own size

    def __init__(self, path: str | os.PathLike, min_frames: int = 16, device: str | torch.device = "cpu"):
        super().__init__()
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"i3d: no such file {str(path)!r}; pass the local i3d_torchscript.pt (arvis never "
                             f"downloads it)")
        if isinstance(min_frames, bool) or not isinstance(min_frames, int) or min_frames < 1:
            raise ValueError(f"min_frames must be an integer >= 1, got {min_frames!r}")
        try:
            with warnings.catch_warnings():  # torch >= 2.10 flags TorchScript as deprecated; the FVD detector is one
                warnings.simplefilter("ignore", FutureWarning)
                self.detector = torch.jit.load(str(path), map_location=device).eval()
        except (RuntimeError, ValueError) as err:
            raise ValueError(f"i3d: {str(path)!r} is not a TorchScript file ({err})") from None
        self.min_frames = min_frames
        self.path = path
        self.name = f"i3d:{path.name}"
        self._fingerprint: str | None = None

    @torch.no_grad()
    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        """``[B, T, 3, H, W]`` in ``[0, 255]`` → ``[B, 400]``."""
        T = clips.shape[1]
        if T < self.min_frames:
            clips = clips[:, torch.arange(self.min_frames) % T]
        x = clips.float().permute(0, 2, 1, 3, 4).contiguous()  # [B, 3, T, H, W]
        out = self.detector(x, rescale=True, resize=True, return_features=True)
        return out.flatten(1).float()

    def fingerprint(self) -> str:
        """sha256 of the TorchScript file."""
        if self._fingerprint is None:
            from arvis.eval.files import sha256_file

            self._fingerprint = sha256_file(self.path)
        return self._fingerprint


def _resize_clips(clips: np.ndarray, size: int) -> np.ndarray:
    if clips.shape[2] == size and clips.shape[3] == size:
        return clips
    from PIL import Image

    out = np.empty((*clips.shape[:2], size, size, 3), dtype=np.uint8)
    for i, clip in enumerate(clips):
        for t, frame in enumerate(clip):
            out[i, t] = np.asarray(Image.fromarray(frame).resize((size, size), Image.Resampling.BICUBIC))
    return out


def clip_features(clips: np.ndarray, extractor: Any, batch_size: int = 16) -> np.ndarray:
    """Features ``[N, D]`` of ``clips: uint8 [N, T, H, W, 3]`` (resized to the extractor's side unless it is I3D)."""
    clips = check_clips(clips)
    if not isinstance(extractor, I3DFeatures):
        clips = _resize_clips(clips, int(extractor.input_size))
    out = []
    for start in range(0, len(clips), batch_size):
        batch = torch.from_numpy(clips[start:start + batch_size]).permute(0, 1, 4, 2, 3).float()
        out.append(extractor(batch).detach().cpu().numpy())
    return np.concatenate(out)


def clip_statistics(clips: np.ndarray, extractor: Any, source: str = "clips", batch_size: int = 16) -> FIDStatistics:
    """Feature mean / covariance of ``clips`` (an :class:`arvis.eval.fid.FIDStatistics`)."""
    feats = clip_features(clips, extractor, batch_size)
    stats = FIDStatistics.from_features(feats, clips.shape[2:4], extractor, source=source)
    stats.extra["num_frames"] = int(clips.shape[1])
    return stats


@dataclass
class FVDResult:
    """A Fréchet video distance, its reference, and the real-vs-real floor at the same size (if asked)."""

    fvd: float
    generated: FIDStatistics
    reference: FIDStatistics
    floor: float | None = None
    kind: str = "domain"

    def to_dict(self) -> dict[str, Any]:
        return {"fvd": self.fvd, "kind": self.kind, "real_vs_real_floor": self.floor,
                "num_generated": self.generated.count, "num_reference": self.reference.count,
                "extractor": self.generated.extractor, "extractor_fingerprint": self.generated.fingerprint}


def _reference_clip_statistics(extractor: Any, num: int, num_frames: int, resolution: int, seed: int,
                               cache_dir: str | os.PathLike | None, named: bool = False) -> FIDStatistics:
    """Held-out clip statistics, cached per extractor (through :func:`arvis.eval.fid.heldout_statistics`'s cache)."""
    from arvis.data.cache import cache_path

    fingerprint = extractor.fingerprint() if hasattr(extractor, "fingerprint") else None
    path = None
    if fingerprint:
        params = {"num": num, "num_frames": num_frames, "resolution": resolution, "seed": seed, "extractor": fingerprint}
        if named:  # only then, so the other caches keep their names
            params["named"] = True
        path = cache_path("fvd-stats", params, cache_dir)
        if path.is_file():
            return FIDStatistics.load(path)
    stats = clip_statistics(heldout_clips(num, num_frames, resolution, seed, named), extractor,
                            source=f"heldout-{'named-emoji-' if named else ''}clips:n={num},T={num_frames},"
                                   f"res={resolution},seed={seed}")
    if path is not None:
        stats.save(path)
    return stats


def frechet_video_distance(clips: np.ndarray, extractor: Any = None, reference: np.ndarray | FIDStatistics | None = None,
                           reference_num: int = 1000, floor: bool = True,
                           cache_dir: str | os.PathLike | None = None, named: bool = False) -> FVDResult:
    """Fréchet distance between clip features of ``clips`` and a reference.

    Args:
        clips: ``uint8 [N, T, H, W, 3]`` generated clips.
        extractor: :class:`VideoFeatures` (default: the shipped video feature network, a *domain* FVD) or
            :class:`I3DFeatures` (the standard FVD feature space).
        reference: real clips ``uint8 [M, T, H, W, 3]`` or their statistics; default ``reference_num``
            held-out clips at the generated clips' size (statistics cached per extractor).
        floor: also the real-vs-real floor: ``N`` independent held-out clips against the same reference.
        named: the default reference and floor are held-out clips of the moving named emoji.
    """
    clips = check_clips(clips)
    if extractor is None:
        extractor = load_video_features()
    gen = clip_statistics(clips, extractor, source="generated")
    N, T, R = clips.shape[0], clips.shape[1], clips.shape[2]
    if reference is None:
        ref = _reference_clip_statistics(extractor, reference_num, T, R, REFERENCE_SEED, cache_dir, named)
    elif isinstance(reference, FIDStatistics):
        ref = reference
    else:
        ref = clip_statistics(check_clips(reference, "reference"), extractor, source="reference")
    result = FVDResult(fvd=frechet_distance(gen, ref), generated=gen, reference=ref,
                       kind="i3d" if isinstance(extractor, I3DFeatures) else "domain")
    if floor:
        other = clip_statistics(heldout_clips(N, T, R, FLOOR_SEED, named), extractor, source="heldout-floor")
        result.floor = frechet_distance(other, ref)
    return result


# ----------------------------------------------------------------------------- temporal consistency
def temporal_consistency(clips: np.ndarray, extractor: Any = None, batch_size: int = 64) -> dict[str, float]:
    """How much consecutive frames differ.

    Returns:
        ``frame_change``: mean absolute pixel difference of consecutive frames (``[0, 1]`` units);
        ``feature_similarity``: mean cosine similarity of consecutive frames' features under ``extractor``
        (default: the image domain network), 1 = identical content.
    """
    from arvis.eval.fid import array_features, load_extractor

    clips = check_clips(clips)
    change = float(np.abs(np.diff(clips.astype(np.float32) / 255.0, axis=1)).mean())
    if extractor is None:
        extractor = load_extractor(None)
    N, T = clips.shape[:2]
    feats = array_features(np.ascontiguousarray(clips.reshape(-1, *clips.shape[2:])), extractor, batch_size=batch_size)
    feats = torch.from_numpy(feats).view(N, T, -1)
    sim = torch.nn.functional.cosine_similarity(feats[:, 1:], feats[:, :-1], dim=-1)
    return {"frame_change": change, "feature_similarity": float(sim.mean())}


def subject_statistics(clips: np.ndarray, white: float = 0.85) -> dict[str, float]:
    """Where the subject of clips drawn on a white background is, and how big (emoji clips).

    A pixel is the subject's where its darkest channel is below ``white`` (``[0, 1]`` units).

    Returns:
        ``subject_share``: the mean share of a frame's pixels that are the subject's;
        ``subject_share_spread``: that share's standard deviation over frames;
        ``subject_share_change``: mean absolute change of the share between consecutive frames (a subject that
        grows or shrinks, or flickers);
        ``border_share``: the mean share of a frame's outermost pixels that are the subject's (a subject cut by
        the frame, or a frame-filling texture);
        ``centre_offset``: the mean distance, in pixels, of the subject's centroid from the frame's centre
        (frames with no subject pixel count as centred).
    """
    clips = check_clips(clips)
    subject = (clips.min(axis=-1).astype(np.float32) / 255.0) < white  # [N, T, H, W]
    share = subject.mean(axis=(2, 3))
    border = np.concatenate([subject[:, :, 0, :], subject[:, :, -1, :], subject[:, :, 1:-1, 0],
                             subject[:, :, 1:-1, -1]], axis=-1).mean(axis=-1)
    H, W = subject.shape[2:]
    ys, xs = np.mgrid[:H, :W].astype(np.float32)
    count = subject.sum(axis=(2, 3))
    present, per = count > 0, np.maximum(count, 1)
    cy = np.where(present, (subject * ys).sum(axis=(2, 3)) / per, (H - 1) / 2)
    cx = np.where(present, (subject * xs).sum(axis=(2, 3)) / per, (W - 1) / 2)
    return {"subject_share": float(share.mean()), "subject_share_spread": float(share.std()),
            "subject_share_change": float(np.abs(np.diff(share, axis=1)).mean()),
            "border_share": float(border.mean()),
            "centre_offset": float(np.hypot(cy - (H - 1) / 2, cx - (W - 1) / 2).mean())}
