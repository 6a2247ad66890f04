"""Video metrics: per-frame FID, domain FVD, I3D FVD from a local TorchScript file, temporal consistency."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arvis.eval import video_metrics as vm
from arvis.eval.fid import CallableFeatures
from arvis.models.video_features import VideoFeatureNet
from tests import REPO_ROOT


def tiny_video_net(seed: int = 0, size: int = 16, frames: int = 4) -> VideoFeatureNet:
    torch.manual_seed(seed)
    return VideoFeatureNet(num_classes=3, image_size=size, num_frames=frames, channels=(4, 8, 8), norm_groups=2).eval()


def moving_clips(n: int, frames: int = 4, size: int = 16, seed: int = 0, speed: int = 2) -> np.ndarray:
    """Bright squares on noise, moving right by ``speed`` pixels a frame."""
    rng = np.random.default_rng(seed)
    clips = (rng.random((n, frames, size, size, 3)) * 60).astype(np.uint8)
    for i in range(n):
        y, x = rng.integers(0, size // 2, size=2)
        for t in range(frames):
            x0 = (x + speed * t) % (size - 4)
            clips[i, t, y:y + 4, x0:x0 + 4] = 230
    return clips


def image_extractor() -> CallableFeatures:
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(3, 6, 3, stride=2)
    return CallableFeatures(lambda x: conv(x / 255.0).mean(dim=(2, 3)), input_size=16, name="tiny", fingerprint="tiny-1")


def test_domain_fvd_orders_controls() -> None:
    extractor = vm.VideoFeatures(tiny_video_net())
    real = moving_clips(40, seed=0)
    other = moving_clips(40, seed=1)
    frozen = np.repeat(other[:, :1], 4, axis=1)
    same = vm.frechet_video_distance(real, extractor, reference=real, floor=False)
    assert same.fvd == pytest.approx(0.0, abs=1e-6)
    close = vm.frechet_video_distance(other, extractor, reference=real, floor=False).fvd
    far = vm.frechet_video_distance(frozen, extractor, reference=real, floor=False).fvd
    assert 0 < close < far
    assert extractor.fingerprint() == vm.VideoFeatures(tiny_video_net()).fingerprint()
    assert extractor.fingerprint() != vm.VideoFeatures(tiny_video_net(seed=3)).fingerprint()


def test_domain_fvd_against_heldout_clips_is_cached_with_a_floor(tmp_path) -> None:
    extractor = vm.VideoFeatures(tiny_video_net())
    clips = vm.heldout_clips(6, num_frames=4, resolution=16, seed=7)
    result = vm.frechet_video_distance(clips, extractor, reference_num=8, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("fvd-stats-*.npz"))) == 1
    again = vm.frechet_video_distance(clips, extractor, reference_num=8, cache_dir=tmp_path)
    assert again.fvd == pytest.approx(result.fvd) and result.floor is not None and result.floor >= 0
    assert result.to_dict()["kind"] == "domain" and result.reference.count == 8


def test_per_frame_fid_uses_heldout_clip_frames(tmp_path) -> None:
    clips = vm.heldout_clips(4, num_frames=3, resolution=16, seed=5)
    result = vm.per_frame_fid(clips, image_extractor(), reference_frames=24, cache_dir=tmp_path)
    assert result.generated.count == 12 and result.reference.count == 24
    assert result.floor is not None and np.isfinite(result.fid)
    frames = vm.heldout_clip_frames(10, 16, 0)
    assert frames.shape == (10, 16, 16, 3)


def test_i3d_features_from_a_local_torchscript_stand_in(tmp_path) -> None:
    class StandIn(torch.nn.Module):
        """The I3D FVD detector's call signature: [B, 3, T, H, W], rescale/resize/return_features -> [B, 400]."""

        def forward(self, x: torch.Tensor, rescale: bool = False, resize: bool = False,
                    return_features: bool = False) -> torch.Tensor:
            if rescale:
                x = x / 127.5 - 1
            pooled = torch.cat([x.mean(dim=(3, 4)).flatten(1), x.std(dim=(2, 3, 4))], dim=1)
            return pooled.repeat(1, 400)[:, :400] * float(x.shape[2])

    path = tmp_path / "i3d_torchscript.pt"
    torch.jit.script(StandIn()).save(str(path))
    i3d = vm.I3DFeatures(path, min_frames=8)
    clips = moving_clips(6, frames=4)
    feats = vm.clip_features(clips, i3d)
    assert feats.shape == (6, 400)
    looped = np.concatenate([clips, clips], axis=1)  # 4 frames looped to 8 == an 8-frame clip of the same loop
    np.testing.assert_allclose(feats, vm.clip_features(looped, i3d), rtol=1e-5)
    result = vm.frechet_video_distance(clips, i3d, reference=moving_clips(6, frames=4, seed=3), floor=False)
    assert result.kind == "i3d" and np.isfinite(result.fvd)
    assert len(i3d.fingerprint()) == 64
    with pytest.raises(ValueError, match="i3d"):
        vm.I3DFeatures(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a torchscript file")
    with pytest.raises(ValueError, match="TorchScript"):
        vm.I3DFeatures(tmp_path / "junk.pt")


def test_temporal_consistency() -> None:
    extractor = image_extractor()
    moving = moving_clips(5)
    frozen = np.repeat(moving[:, :1], 4, axis=1)
    still = vm.temporal_consistency(frozen, extractor)
    assert still["frame_change"] == 0.0 and still["feature_similarity"] == pytest.approx(1.0, abs=1e-6)
    moved = vm.temporal_consistency(moving, extractor)
    assert moved["frame_change"] > 0 and moved["feature_similarity"] < 1.0


def test_subject_statistics_measure_a_square_that_grows_and_one_cut_by_the_frame() -> None:
    clips = np.full((2, 2, 16, 16, 3), 255, np.uint8)
    clips[0, 0, 6:10, 6:10] = 0  # 4 x 4 at the centre, then 8 x 8 at the centre
    clips[0, 1, 4:12, 4:12] = 0
    clips[1, :, 0:4, 0:4] = 40  # 4 x 4 in a corner, both frames (dark in every channel: the subject's)
    clips[1, :, 8, 8] = (255, 255, 120)  # a light pixel with one dark channel counts too
    stats = vm.subject_statistics(clips)
    shares = np.array([[16, 64], [17, 17]]) / 256
    assert stats["subject_share"] == pytest.approx(shares.mean())
    assert stats["subject_share_spread"] == pytest.approx(shares.std())
    assert stats["subject_share_change"] == pytest.approx((48 / 256 + 0) / 2)
    # 60 border pixels; the corner square covers 7 of them
    assert stats["border_share"] == pytest.approx((0 + 0 + 7 / 60 + 7 / 60) / 4)
    corner = np.hypot((16 * 1.5 + 8) / 17 - 7.5, (16 * 1.5 + 8) / 17 - 7.5)  # centroid of the square and pixel
    assert stats["centre_offset"] == pytest.approx((0 + 0 + corner + corner) / 4, rel=1e-5)
    blank = vm.subject_statistics(np.full((2, 2, 8, 8, 3), 255, np.uint8))
    assert blank == {"subject_share": 0.0, "subject_share_spread": 0.0, "subject_share_change": 0.0,
                     "border_share": 0.0, "centre_offset": 0.0}


def test_clip_errors() -> None:
    with pytest.raises(ValueError, match="clips"):
        vm.check_clips(np.zeros((2, 4, 8, 8), np.uint8))
    with pytest.raises(ValueError, match="clips"):
        vm.check_clips(np.zeros((2, 4, 8, 8, 3), np.float32))
    with pytest.raises(ValueError, match="at least 2"):
        vm.check_clips(np.zeros((1, 4, 8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="video feature network"):
        vm.load_video_features("/nonexistent/folder")


def test_tokenizer_comparison_temporal_path_with_a_tiny_emu3_vq(tmp_path) -> None:
    """eval/video_tokenizer.py's temporal candidate: a tiny random Emu3VQVAE with 4x temporal compression."""
    import importlib.util

    from transformers import Emu3VQVAE, Emu3VQVAEConfig

    spec = importlib.util.spec_from_file_location("video_tokenizer", REPO_ROOT / "eval" / "video_tokenizer.py")
    vt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vt)
    config = Emu3VQVAEConfig(codebook_size=16, embed_dim=4, latent_channels=4, base_channels=32, channel_multiplier=[1, 2],
                             num_res_blocks=1, attn_resolutions=[], hidden_size=64, temporal_downsample_factor=4)
    torch.manual_seed(0)
    Emu3VQVAE(config).save_pretrained(tmp_path / "emu3-vq")
    clips = moving_clips(2, frames=8, size=16)
    recon, grid = vt.temporal_reconstruct(str(tmp_path / "emu3-vq"), clips)
    assert recon.shape == clips.shape and recon.dtype == np.uint8 and grid == (2, 8, 8)
    psnr = vt.psnr_by_kind(clips, clips, np.array([0, 14]))
    assert set(psnr) == {"camera", "digits", "all"} and psnr["all"] > 90  # identical clips
    assert vt.downsample(clips, 8).shape == (2, 8, 8, 8, 3)
