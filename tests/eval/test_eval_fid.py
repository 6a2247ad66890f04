"""FID (arvis.eval.fid, arvis.eval.domain, `arvis fid`): fidelity to clean-fid, caching, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from arvis.cli import main
from arvis.eval import fid as F
from arvis.eval.domain import DomainClassifier, DomainFeatures, load_domain_network, save_domain_network


def tiny_domain_net(seed: int = 0) -> DomainClassifier:
    net = DomainClassifier(num_classes=3, class_names=["a", "b", "c"], image_size=16, channels=(4, 8),
                           norm_groups=2)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return net.eval()


@pytest.fixture(scope="module")
def extractor() -> DomainFeatures:
    return DomainFeatures(tiny_domain_net())


def images(n: int, size: int, seed: int, shift: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0, 1, (n, 1, 1, 3)) * 180 + shift
    noise = rng.normal(0, 40, (n, size, size, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def write_folder(folder: Path, arr: np.ndarray) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, a in enumerate(arr):
        Image.fromarray(a).save(folder / f"{i:06d}.png")
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path, np.ndarray]:
    root = tmp_path_factory.mktemp("fid")
    a = images(24, 24, seed=1)
    b = images(20, 24, seed=2, shift=40.0)
    return write_folder(root / "a", a), write_folder(root / "b", b), a


def test_fid_equals_clean_fid_own_computation(folders, extractor):
    from cleanfid import fid as cleanfid

    a, b, _ = folders
    ours = F.compute_fid(a, b, extractor, progress=False).fid
    theirs = cleanfid.compute_fid(str(a), str(b), mode="clean", custom_feat_extractor=extractor,
                                  custom_fn_resize=F.make_resizer(extractor.input_size), num_workers=0,
                                  batch_size=8, device=torch.device("cpu"), verbose=False)
    assert ours > 0
    assert abs(ours - theirs) / theirs <= 1e-4


def test_arrays_folders_and_saved_statistics_agree(folders, extractor, tmp_path):
    a, b, arr = folders
    from_folder, size = F.folder_features(a, extractor, progress=False)
    from_array = F.array_features(arr, extractor, batch_size=5)
    assert size == (24, 24) and from_folder.shape == (24, 8)
    np.testing.assert_allclose(from_array, from_folder, rtol=1e-6, atol=1e-6)  # PNG is lossless; same resize

    stats = F.folder_statistics(b, extractor, progress=False)
    stats.save(tmp_path / "b.npz")
    loaded = F.FIDStatistics.load(tmp_path / "b.npz")
    assert loaded.count == 20 and loaded.fingerprint == extractor.fingerprint()
    direct = F.compute_fid(a, b, extractor, progress=False).fid
    via_npz = F.compute_fid(arr, tmp_path / "b.npz", extractor, progress=False).fid
    assert abs(direct - via_npz) / direct <= 1e-6
    assert F.compute_fid(a, a, extractor, progress=False).fid < 1e-6 * direct


def test_generator_source_equals_its_folder(folders, extractor):
    a, b, arr = folders
    calls = []

    def source(indices):
        calls.append(list(indices))
        return arr[indices]

    gen = F.compute_fid(source, b, extractor, num=24, source_batch_size=10, progress=False).fid
    folder = F.compute_fid(a, b, extractor, progress=False).fid
    assert calls == [list(range(0, 10)), list(range(10, 20)), list(range(20, 24))]
    assert abs(gen - folder) / folder <= 1e-6


def test_heldout_reference_is_cached_and_floor_reported(extractor, tmp_path):
    made = []

    def fake_heldout(num, resolution, seed):
        made.append((num, resolution, seed))
        return images(num, resolution, seed=100 + seed)

    generated = images(16, 24, seed=5, shift=60.0)
    kw = dict(reference_num=30, cache_dir=tmp_path, images_fn=fake_heldout, progress=False)
    first = F.compute_fid(generated, "heldout", extractor, floor=True, **kw)
    assert made == [(30, 24, F.REFERENCE_SEED), (16, 24, F.FLOOR_SEED)]  # floor: independent draw, same N
    second = F.compute_fid(generated, "heldout", extractor, floor=True, **kw)
    assert len(made) == 2  # both statistics came from the cache
    assert len(list(tmp_path.glob("fid-stats-*.npz"))) == 2
    assert second.fid == first.fid and second.floor == first.floor
    assert 0 <= first.floor < first.fid  # real vs real is closer than a shifted generator
    record = first.to_dict()
    assert record["num_generated"] == 16 and record["num_reference"] == 30 and record["real_vs_real_floor"] > 0


def test_heldout_reference_from_real_crops(extractor, tmp_path):
    pytest.importorskip("skimage")
    result = F.compute_fid(images(12, 16, seed=3), "heldout", extractor, reference_num=12, cache_dir=tmp_path,
                           progress=False)
    assert result.reference.source == "heldout:n=12,res=16,seed=0" and np.isfinite(result.fid)


def test_bad_input_gives_clear_errors(folders, extractor, tmp_path):
    a, _, arr = folders
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".000001.png.x.tmp").write_bytes(b"partial")  # temporaries are not images
    mixed = write_folder(tmp_path / "mixed", images(3, 24, seed=0))
    Image.fromarray(images(1, 20, seed=0)[0]).save(mixed / "odd.png")
    cases = [(tmp_path / "missing", "no such folder"), (empty, "contains no images"),
             (mixed, "mixed sizes: 1 of 20x20 (e.g. odd.png); 3 of 24x24")]
    for folder, message in cases:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            F.compute_fid(folder, a, extractor, progress=False)
    with pytest.raises(ValueError, match="uint8 array"):
        F.compute_fid(arr.astype(np.float32), a, extractor, progress=False)
    with pytest.raises(ValueError, match="num: required"):
        F.compute_fid(lambda idx: arr[idx], a, extractor, progress=False)
    with pytest.raises(ValueError, match="floor"):
        F.compute_fid(arr, a, extractor, floor=True, progress=False)
    with pytest.raises(ValueError, match="input_size"):
        F.compute_fid(arr, a, lambda x: x.mean((2, 3)), progress=False)


def test_domain_network_round_trip_and_loader_errors(tmp_path):
    net = tiny_domain_net(seed=3)
    folder = save_domain_network(net, tmp_path / "domain-classifier")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "diffusion_pytorch_model.safetensors"]
    loaded = load_domain_network(folder)
    x = torch.rand(2, 3, 16, 16) * 255
    assert torch.equal(loaded.features(x), net.features(x)) and loaded(x).shape == (2, 3)
    assert loaded.config.class_names == ["a", "b", "c"]
    assert DomainFeatures(loaded).fingerprint() == DomainFeatures(net).fingerprint()
    assert sum(p.numel() for p in DomainClassifier().parameters()) == pytest.approx(1.2e6, rel=0.1)
    with pytest.raises(ValueError, match="not a domain-network folder"):
        load_domain_network(tmp_path)
    with pytest.raises(ValueError, match="class_names has 2 names"):
        DomainClassifier(num_classes=3, class_names=["a", "b"])
    with pytest.raises(ValueError, match="images must be"):
        net.features(torch.zeros(2, 16, 16))


def test_inception_from_a_local_torchscript_file(tmp_path):
    class Layers(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.adaptive_avg_pool2d(x, 4).flatten(1)

    class Fake(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = Layers()

        def forward(self, x):
            return self.layers(x)

    path = tmp_path / "inception-2015-12-05.pt"
    torch.jit.script(Fake()).save(str(path))
    ext = F.load_extractor(f"inception:{path}")
    assert ext.input_size == 299 and ext.name == "inception"
    out = ext(torch.full((2, 3, 299, 299), 128.0))
    assert out.shape == (2, 48) and torch.allclose(out, torch.zeros_like(out))  # (x - 128) / 128
    with pytest.raises(ValueError, match="not found"):
        F.load_extractor(tmp_path / "nowhere.pt")


def test_fid_command(folders, extractor, tmp_path, capsys):
    a, b, _ = folders
    net_dir = save_domain_network(extractor.network, tmp_path / "net")
    out = tmp_path / "fid.json"
    rc = main(["fid", "--folder", str(a), "--ref", str(b), "--extractor", str(net_dir), "--json", str(out),
               "--no-progress"])
    assert rc == 0
    record = json.loads(out.read_text())
    expected = F.compute_fid(a, b, extractor, progress=False).fid
    assert abs(record["fid"] - expected) / expected <= 1e-6
    assert record["num_generated"] == 24 and record["threads"] >= 1 and record["git_commit"]
    assert "FID (domain:" in capsys.readouterr().out

    bad = tmp_path / "bad.json"
    empty = tmp_path / "empty"
    empty.mkdir()
    mixed = write_folder(tmp_path / "mixed", images(2, 24, seed=0))
    Image.fromarray(images(1, 20, seed=0)[0]).save(mixed / "odd.png")
    for args, message in ((["--folder", str(tmp_path / "none")], "no such folder"),
                          (["--folder", str(empty)], "contains no images"),
                          (["--folder", str(mixed), "--ref", str(b), "--extractor", str(net_dir)], "mixed sizes"),
                          (["--model", "tiny-random", "--method", "nope"], "unknown method 'nope'"),
                          (["--folder", str(a), "--ref", str(b), "--floor"], "--floor"),
                          (["--folder", str(a), "--model", "tiny-random"], "pass one of"),
                          (["--folder", str(a), "--extractor", str(tmp_path)], "not a domain-network folder")):
        assert main(["fid", *args, "--json", str(bad), "--no-progress"]) == 2, args
        assert message in capsys.readouterr().err
        assert not bad.exists()
