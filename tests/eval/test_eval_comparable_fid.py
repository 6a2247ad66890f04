"""FID people can compare with papers, and FID that is quick to rerun (issue 37).

ADM's sample / reference batches (arvis.eval.adm), the FID Inception from a user's weights file
(arvis.eval.inception), the bilinear resize, the reference-statistics cache (keys, staleness, folder), the
small-N warning with the floor beside it, and `arvis fid` / `eval/sample.py` writing ADM's .npz. Every file
these tests read is written by the tests (random stand-ins; no real weights or reference batches here).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from arvis.cli import main
from arvis.errors import CheckpointError
from arvis.eval import adm
from arvis.eval import fid as F
from arvis.eval.domain import DomainFeatures, save_domain_network
from tests.eval.test_eval_fid import images, tiny_domain_net, write_folder


@pytest.fixture(scope="module")
def extractor() -> DomainFeatures:
    return DomainFeatures(tiny_domain_net())


@pytest.fixture(scope="module")
def net_dir(extractor, tmp_path_factory) -> Path:
    return save_domain_network(extractor.network, tmp_path_factory.mktemp("net") / "net")


# ----------------------------------------------------------------------------- ADM's .npz layout
def test_sample_batch_is_written_in_pieces_and_reads_back_as_adm_layout(tmp_path):
    arr = images(11, 20, seed=0)
    path = tmp_path / "samples.npz"
    with adm.SampleBatchWriter(path, 11) as writer:
        for start in (0, 4, 8):
            writer.add(arr[start:start + 4], labels=list(range(start, min(start + 4, 11))))
        assert not path.exists()  # nothing at the destination until the archive is complete
    with np.load(path, allow_pickle=False) as z:  # what ADM's evaluator does with it
        assert z.files == ["arr_0", "arr_1"] and z["arr_0"].dtype == np.uint8
        np.testing.assert_array_equal(z["arr_0"], arr)
        np.testing.assert_array_equal(z["arr_1"], np.arange(11))
    batch = adm.open_batch(path)
    assert (batch.count, batch.image_size, batch.has_labels, batch.mu) == (11, (20, 20), True, None)
    np.testing.assert_array_equal(np.concatenate(list(batch.iter_images(3))), arr)

    short = tmp_path / "short.npz"
    writer = adm.SampleBatchWriter(short, 5)
    writer.add(arr[:2])
    with pytest.raises(ValueError, match="2 images added, 5 announced; nothing written"):
        writer.close()
    assert not short.exists() and not list(tmp_path.glob(".*.tmp"))
    with pytest.raises(ValueError, match="uint8 array"):
        adm.write_sample_batch(tmp_path / "f.npz", arr.astype(np.float32))
    np.savez(tmp_path / "nhwc1.npz", arr_0=arr[..., :1])
    with pytest.raises(ValueError, match=r"uint8 \[N, H, W, 3\]"):
        adm.open_batch(tmp_path / "nhwc1.npz")
    np.savez(tmp_path / "nothing.npz", other=np.zeros(3))
    with pytest.raises(ValueError, match="neither images"):
        adm.open_batch(tmp_path / "nothing.npz")


def test_fid_of_an_npz_sample_batch_equals_the_images_it_holds(extractor, tmp_path):
    arr, ref = images(24, 24, seed=1), write_folder(tmp_path / "ref", images(20, 24, seed=2, shift=40.0))
    adm.write_sample_batch(tmp_path / "s.npz", arr)
    from_npz = F.compute_fid(tmp_path / "s.npz", ref, extractor, progress=False)
    from_array = F.compute_fid(arr, ref, extractor, progress=False)
    assert from_npz.fid == pytest.approx(from_array.fid, rel=1e-9) and from_npz.generated.count == 24


def test_precomputed_reference_statistics_are_used_and_must_fit_the_extractor(extractor, tmp_path):
    gen, real = images(24, 24, seed=1), images(40, 24, seed=3, shift=20.0)
    stats = F.array_statistics(real, extractor, resize="bilinear")
    # ADM's reference batch: images and precomputed statistics of a larger set; the statistics win.
    np.savez(tmp_path / "ref.npz", arr_0=real[:10], mu=stats.mu, sigma=stats.sigma)
    result = F.compute_fid(gen, tmp_path / "ref.npz", extractor, progress=False)
    assert result.generated.resize == "bilinear"  # a third party's reference: pytorch-fid's resize by default
    expected = F.frechet_distance(F.array_statistics(gen, extractor, resize="bilinear"), stats)
    assert result.fid == pytest.approx(expected, rel=1e-6)
    assert result.reference.source.startswith("precomputed:") and result.to_dict()["num_reference"] is None

    np.savez(tmp_path / "inception.npz", mu=np.zeros(2048), sigma=np.eye(2048))
    with pytest.raises(ValueError, match=r"2048-dimensional statistics .* 8-dimensional features; .*inception:PATH"
                                         r".*pt_inception-2015-12-05"):
        F.compute_fid(gen, tmp_path / "inception.npz", extractor, progress=False)
    np.savez(tmp_path / "odd.npz", mu=np.zeros(5), sigma=np.eye(5))
    with pytest.raises(ValueError, match="use the extractor these statistics were computed with"):
        F.compute_fid(gen, tmp_path / "odd.npz", extractor, progress=False)
    np.savez(tmp_path / "half.npz", mu=np.zeros(8))
    with pytest.raises(ValueError, match="mu without sigma"):
        F.compute_fid(gen, tmp_path / "half.npz", extractor, progress=False)


# ----------------------------------------------------------------------------- the reference cache
def test_reference_batch_images_are_cached_by_content(extractor, tmp_path, monkeypatch):
    gen, real = images(16, 24, seed=1), images(30, 24, seed=4)
    adm.write_sample_batch(tmp_path / "ref.npz", real)
    kw = dict(cache_dir=tmp_path / "cache", progress=False)
    first = F.compute_fid(gen, tmp_path / "ref.npz", extractor, **kw)
    calls = []
    monkeypatch.setattr(F, "batch_statistics", lambda *a, **k: calls.append(1) or pytest.fail("recomputed"))
    second = F.compute_fid(gen, tmp_path / "ref.npz", extractor, **kw)
    assert (first.reference.extra["cache"], second.reference.extra["cache"]) == ("miss", "hit") and not calls
    assert second.fid == first.fid and len(list((tmp_path / "cache").glob("fid-ref-stats-*.npz"))) == 1
    monkeypatch.undo()
    adm.write_sample_batch(tmp_path / "ref.npz", real[::-1].copy())  # same name, other content: another key
    third = F.compute_fid(gen, tmp_path / "ref.npz", extractor, **kw)
    assert third.reference.extra["cache"] == "miss"
    assert len(list((tmp_path / "cache").glob("fid-ref-stats-*.npz"))) == 2


def test_stale_cached_reference_is_recomputed_and_replaced(extractor, tmp_path, monkeypatch):
    made = []

    def fake_heldout(num, resolution, seed, progress=True):
        made.append(progress)
        return images(num, resolution, seed=100 + seed)

    kw = dict(num=30, resolution=24, images_fn=fake_heldout, cache_dir=tmp_path, progress=False)
    fresh = F.heldout_statistics(extractor, **kw)
    assert fresh.extra["cache"] == "miss" and made == [False]  # --no-progress reaches the image maker
    (path,) = tmp_path.glob("fid-stats-*.npz")
    assert F.heldout_statistics(extractor, **kw).extra["cache"] == "hit" and len(made) == 1

    path.write_bytes(path.read_bytes()[:100])  # truncated by a crash or a full disk
    again = F.heldout_statistics(extractor, **kw)
    assert again.extra["cache"] == "stale" and len(made) == 2
    np.testing.assert_array_equal(again.mu, fresh.mu)
    wrong = F.FIDStatistics(mu=fresh.mu + 1, sigma=fresh.sigma, count=7, image_size=(24, 24), extractor="domain",
                            fingerprint=fresh.fingerprint, source=fresh.source)
    wrong.save(path)  # a file that does not hold what its name promises (another count)
    assert F.heldout_statistics(extractor, **kw).extra["cache"] == "stale" and len(made) == 3
    np.testing.assert_array_equal(F.FIDStatistics.load(path).mu, fresh.mu)  # replaced

    bilinear = F.heldout_statistics(extractor, **kw, resize="bilinear")  # the mode is part of the key
    assert bilinear.extra["cache"] == "miss" and bilinear.resize == "bilinear"
    assert len(list(tmp_path.glob("fid-stats-*.npz"))) == 2

    monkeypatch.setenv("ARVIS_CACHE", str(tmp_path / "env"))  # the folder a user can set
    kw.pop("cache_dir")
    assert F.heldout_statistics(extractor, **kw).extra["cache"] == "miss"
    assert len(list((tmp_path / "env").glob("fid-stats-*.npz"))) == 1


# ----------------------------------------------------------------------------- resize modes
def test_bilinear_resize_is_torch_bilinear_and_modes_never_mix(extractor):
    im = images(1, 20, seed=0)[0]
    out = F.make_resizer(32, "bilinear")(im)
    expected = torch.nn.functional.interpolate(torch.from_numpy(im).permute(2, 0, 1)[None].float(), size=(32, 32),
                                               mode="bilinear", align_corners=False)[0].permute(1, 2, 0).numpy()
    assert out.dtype == np.float32 and out.shape == (32, 32, 3)
    np.testing.assert_allclose(out, expected, atol=1e-4)
    with pytest.raises(ValueError, match="resize must be one of"):
        F.make_resizer(32, "lanczos")
    arr = images(10, 24, seed=1)
    clean, bilinear = (F.array_statistics(arr, extractor, resize=m) for m in ("clean", "bilinear"))
    with pytest.raises(ValueError, match="different resize modes"):
        F.frechet_distance(clean, bilinear)


# ----------------------------------------------------------------------------- the FID Inception
@pytest.fixture(scope="module")
def inception_files(tmp_path_factory):
    """A random stand-in for pytorch-fid's weights (fp16 to keep the files small), as .pth and .safetensors."""
    from safetensors.torch import save_file

    from arvis.eval.inception import FIDInceptionV3

    torch.manual_seed(0)  # the tests' own stand-in; the library never touches the global RNG
    net = FIDInceptionV3()
    for m in net.modules():  # BatchNorm statistics of one pass over random images: features of size ~100, not ~1e-8
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = None
            m.reset_running_stats()
    with torch.no_grad():
        net.train()(torch.rand(4, 3, 299, 299) * 255)
    net.eval()
    state = {k: v.half() if v.is_floating_point() else v for k, v in net.net.state_dict().items()}
    net.net.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    root = tmp_path_factory.mktemp("inception")
    torch.save(state, root / "pt_inception-2015-12-05-6726825d.pth")  # with BatchNorm's integer step counters
    save_file({k: v for k, v in state.items() if v.is_floating_point()}, str(root / "pt_inception.safetensors"))
    return net.eval(), root / "pt_inception-2015-12-05-6726825d.pth", root / "pt_inception.safetensors"


def test_fid_inception_loads_from_a_state_dict_safely(inception_files, tmp_path):
    net, pth, safetensors = inception_files
    x = torch.rand(1, 3, 299, 299) * 255
    expected = net(x)
    assert expected.shape == (1, 2048)
    for path in (pth, safetensors):
        ext = F.load_extractor(f"inception:{path}")
        assert (ext.name, ext.input_size, ext.kind) == ("inception", 299, "pytorch-fid")
        torch.testing.assert_close(ext(x), expected)
    # torchvision's ImageNet classifier is another network: refused, naming what to supply.
    tv = {k: v for k, v in torch.load(pth, weights_only=True).items()}
    tv["AuxLogits.fc.weight"] = torch.zeros(1000, 768)
    torch.save(tv, tmp_path / "inception_v3_google.pth")
    with pytest.raises(CheckpointError, match="torchvision's ImageNet classifier, not the FID Inception"):
        F.load_extractor(f"inception:{tmp_path / 'inception_v3_google.pth'}")
    # A pickle that asks for anything beyond tensors is refused before it runs.
    with open(tmp_path / "evil.pth", "wb") as f:
        pickle.dump({"fc.weight": Path("/")}, f)
    with pytest.raises(CheckpointError, match="allowlist"):
        F.load_extractor(f"inception:{tmp_path / 'evil.pth'}")
    with pytest.raises(CheckpointError, match="missing keys"):
        torch.save({"fc.weight": torch.zeros(1008, 2048)}, tmp_path / "partial.pth")
        F.load_extractor(f"inception:{tmp_path / 'partial.pth'}")
    for spec, message in (("inception", "needs the FID Inception weights, which arvis cannot download"),
                          (f"inception:{tmp_path / 'none.pth'}", "not found; this extractor needs the FID Inception")):
        with pytest.raises(ValueError, match=message):
            F.load_extractor(spec)


def test_fid_inception_matches_pytorch_fid(inception_files, monkeypatch):
    """Same weights, same images → pytorch-fid's own features (runs where pytorch-fid is installed)."""
    inception = pytest.importorskip("pytorch_fid.inception")
    net, pth, _ = inception_files
    monkeypatch.setattr(inception, "load_state_dict_from_url", lambda *a, **k: torch.load(pth, weights_only=True))
    theirs = inception.InceptionV3([3], resize_input=True, normalize_input=True, use_fid_inception=True).eval()
    ours = F.load_extractor(f"inception:{pth}")
    imgs = images(2, 64, seed=5)
    with torch.no_grad():
        expected = theirs(torch.from_numpy(imgs).permute(0, 3, 1, 2).float() / 255)[0].flatten(1).numpy()
    got = F.array_features(imgs, ours, resize="bilinear")
    assert expected.std() > 10  # features large enough to tell two networks apart
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


# ----------------------------------------------------------------------------- the command
def test_small_n_warns_and_prints_the_floor_beside_it(net_dir, tmp_path, capsys):
    pytest.importorskip("skimage")  # the held-out crops come from scikit-image's photos
    folder = write_folder(tmp_path / "few", images(12, 16, seed=1))
    out = tmp_path / "fid.json"
    argv = ["fid", "--folder", str(folder), "--extractor", str(net_dir), "--ref-num", "20", "--cache-dir",
            str(tmp_path / "cache"), "--json", str(out), "--no-progress", "--threads", "1"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "real-vs-real floor (N=12):" in captured.out  # computed although --floor was not given
    assert "reference statistics: computed and cached in" in captured.out
    assert "warning: N=12 generated images is too few for FID to mean anything (below 100" in captured.err
    assert "the real-vs-real floor at the same N=12 is" in captured.err
    record = json.loads(out.read_text())
    assert record["small_sample"] and record["real_vs_real_floor"] is not None and record["resize"] == "clean"
    assert record["reference_cache"] == "miss" and str(tmp_path) not in out.read_text()
    assert main(argv) == 0
    assert "reference statistics: read from the cache in" in capsys.readouterr().out


def test_fid_command_writes_adm_samples_per_class_and_reads_them_back(net_dir, tmp_path, capsys):
    ref = write_folder(tmp_path / "ref", images(20, 32, seed=2))
    npz = tmp_path / "samples.npz"
    common = ["--ref", str(ref), "--extractor", str(net_dir), "--no-progress", "--threads", "1"]
    assert main(["fid", "--model", "tiny-random", "--per-class", "2", "--save-npz", str(npz),
                 "--json", str(tmp_path / "a.json"), *common]) == 0
    out = capsys.readouterr().out
    assert f"wrote {npz} (ADM sample batch: arr_0 8 images, arr_1 labels)" in out
    with np.load(npz, allow_pickle=False) as z:
        assert z["arr_0"].shape[0] == 8 and z["arr_0"].dtype == np.uint8 and z["arr_0"].shape[-1] == 3
        assert np.bincount(z["arr_1"]).tolist() == [2, 2, 2, 2]  # tiny-random has 4 classes: 2 of each
    assert main(["fid", "--sample-batch", str(npz), "--json", str(tmp_path / "b.json"), *common]) == 0
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")
    assert a["fid"] == pytest.approx(b["fid"], rel=1e-9) and a["per_class"] == 2 and a["num_generated"] == 8

    bad = tmp_path / "bad.json"
    for args, message in ((["--sample-batch", str(npz), "--model", "tiny-random"], "pass one of"),
                          (["--sample-batch", str(npz), "--per-class", "2"], "--per-class: only when sampling from a model"),
                          (["--model", "tiny-random", "--per-class", "2", "--num-images", "3"], "give one"),
                          (["--model", "tiny-random", "--save-npz", str(tmp_path / "s.png")], "must end in .npz"),
                          (["--folder", str(ref), "--extractor", "inception"], "which arvis cannot download"),
                          (["--folder", str(ref), "--ref", str(tmp_path / "none.npz")], "no such file"),
                          (["--sample-batch", str(ref / "000000.png")], "must be an .npz")):
        assert main(["fid", *args, "--json", str(bad), "--no-progress"]) == 2, args
        assert message in capsys.readouterr().err, args
        assert not bad.exists()


def test_sampling_job_draws_k_per_class_and_packs_adm_npz(tmp_path):
    from tests.eval.test_eval_sampling import sample_script, small_pipeline

    model = tmp_path / "model"
    small_pipeline().save_pretrained(model)
    out, npz = tmp_path / "job", tmp_path / "job.npz"
    assert sample_script.main(["--model", str(model), "--per-class", "2", "--class-ids", "2,0", "--seed", "3",
                               "--output", str(out), "--save-npz", str(npz), "--no-progress", "--threads", "1"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["count"] == 4 and [r["label"] for r in manifest["images"]] == [2, 0, 2, 0]
    from PIL import Image

    with np.load(npz, allow_pickle=False) as z:
        assert z["arr_1"].tolist() == [2, 0, 2, 0]
        for i, image in enumerate(z["arr_0"]):
            np.testing.assert_array_equal(image, np.asarray(Image.open(out / f"{i:06d}.png").convert("RGB")))
    with pytest.raises(SystemExit):  # --per-class and --num-images are exclusive (argparse's usage error)
        sample_script.main(["--model", str(model), "--per-class", "1", "--num-images", "3", "--output",
                            str(tmp_path / "x")])
