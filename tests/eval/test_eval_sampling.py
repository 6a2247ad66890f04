"""Sampling jobs (eval/sample.py, arvis.eval.jobs): sharding invariance, crash and resume, bad input.

The pipeline here is small (8x8 tokens, 32x32 images) so each job takes about a second. Worker
processes are forked from the test process (they inherit its imports, so a rank starts in
milliseconds instead of re-importing diffusers); they run eval/sample.py's ``main`` exactly as
``torchrun`` would, with the same environment variables and a gloo process group. The real
``torchrun`` launch is the slow-marked test at the end.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from glob import glob
from pathlib import Path

import numpy as np
import pytest
import torch

from arvis.errors import JobError
from arvis.eval.files import is_valid_image
from arvis.eval.jobs import PipelineSampler, SamplingJob, run_sampling_job, seed_for, shard
from arvis.models.llamagen import LlamaGenTransformer
from arvis.pipelines import LlamaGenPipeline
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from tests import REPO_ROOT as ROOT

N = 8


def _load_sample_script():
    spec = importlib.util.spec_from_file_location("arvis_eval_sample", ROOT / "eval" / "sample.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sample_script = _load_sample_script()


def small_pipeline() -> LlamaGenPipeline:
    g = torch.Generator().manual_seed(0)
    transformer = LlamaGenTransformer(dim=32, n_layer=2, n_head=4, vocab_size=64, block_size=64, multiple_of=16,
                                      num_classes=3)
    transformer.init_weights(g)
    with torch.no_grad():
        transformer.output.weight.normal_(0.0, 0.3, generator=g)
    vq = LlamaGenVQModel(codebook_size=64, codebook_embed_dim=4, encoder_ch_mult=(1, 1, 2), decoder_ch_mult=(1, 1, 2),
                         z_channels=8, base_channels=8, norm_num_groups=4)
    vq.init_weights(g)
    return LlamaGenPipeline(transformer.eval(), vq.eval())


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model")
    small_pipeline().save_pretrained(path)
    return path


def argv(model_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["--model", str(model_dir), "--num-images", str(N), "--seed", "7", "--output", str(out),
            "--guidance-scale", "2.0", "--no-progress", "--threads", "1", *extra]


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.png"))}


def clean_fid_visible(folder: Path) -> list[str]:
    """What clean-fid's folder reader would count (its own glob)."""
    from cleanfid.utils import EXTENSIONS

    return sorted(f for ext in EXTENSIONS for f in glob(os.path.join(folder, f"**/*.{ext}"), recursive=True))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fork_run(args: list[str], env: dict[str, str] | None = None) -> int:
    """Fork a process that runs eval/sample.py's main(args) and exits; returns its pid."""
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.environ.update(env or {})
            # A forked child inherits accelerate's process-state singleton from the test process (a
            # single-process state once any in-process run made one); a torchrun rank starts fresh.
            from accelerate import PartialState

            PartialState._reset_state()
            code = sample_script.main(args)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def wait(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.fixture(scope="module")
def reference(model_dir, tmp_path_factory) -> dict[str, str]:
    """An uninterrupted single-process run, batch size 3."""
    out = tmp_path_factory.mktemp("ref") / "images"
    assert sample_script.main(argv(model_dir, out, "--batch-size", "3")) == 0
    return digests(out)


# ----------------------------------------------------------------------------- unit pieces
def test_seed_for_is_a_pure_injective_looking_mix():
    assert seed_for(0, 1) == seed_for(0, 1)
    seeds = {seed_for(s, i) for s in range(20) for i in range(200)}
    assert len(seeds) == 20 * 200  # no collisions, unlike seed + index
    assert all(0 <= x < 2**63 for x in seeds)
    for bad in ((-1, 0), (0, -1), (1.5, 0), (True, 0)):
        with pytest.raises(ValueError):
            seed_for(*bad)


def test_shard_partitions_indices_without_padding():
    parts = [shard(range(11), r, 3) for r in range(3)]
    assert sorted(sum(parts, [])) == list(range(11))
    assert parts[0] == [0, 3, 6, 9]
    with pytest.raises(ValueError):
        shard(range(4), 2, 2)


def test_images_do_not_depend_on_batch_size_or_order():
    pipe = small_pipeline()
    sampler = PipelineSampler(pipe, seed=5, guidance_scale=2.0)
    one = np.concatenate([sampler([i]) for i in range(5)])
    batched = sampler([3, 0, 4, 1, 2])[[1, 3, 4, 0, 2]]
    assert one.dtype == np.uint8 and one.shape == (5, 32, 32, 3)
    np.testing.assert_array_equal(one, batched)
    assert not np.array_equal(one[0], one[1])


def test_sampler_accepts_methods_that_need_pipeline_resources():
    """Relaxed acceptance needs the tokenizer's neighbourhoods, which only the pipeline has: the sampler
    (and so `arvis fid --model` / eval/sample.py) must validate with them, not refuse the method."""
    sampler = PipelineSampler(small_pipeline(), seed=0, method="sjd", guidance_scale=2.0,
                              method_options={"window": 4, "acceptance": "bounded", "k": 3, "delta": 0.1})
    images = sampler([0, 1])
    assert images.shape[0] == 2 and sampler.last_stats.samples[0].extra["tv_kind"] == "realised per token given the prefix"


# ----------------------------------------------------------------------------- the script
def test_single_process_writes_n_pngs_and_manifest(model_dir, reference, tmp_path):
    assert len(reference) == N and list(reference) == [f"{i:06d}.png" for i in range(N)]
    out = tmp_path / "again"
    assert sample_script.main(argv(model_dir, out, "--batch-size", "1")) == 0
    assert digests(out) == reference  # batch size 1 vs 3: identical bytes
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["count"] == N
    from arvis.hub import folder_sha256

    assert manifest["job"]["model_sha256"] == folder_sha256(model_dir)  # the weights the images came from
    assert [r["sha256"] for r in manifest["images"]] == list(reference.values())
    assert [r["label"] for r in manifest["images"]] == [i % 3 for i in range(N)]
    assert manifest["images"][5]["seed"] == seed_for(7, 5)


def test_world_size_two_gives_identical_bytes(model_dir, reference, tmp_path):
    out = tmp_path / "ws2"
    port = str(free_port())
    pids = [fork_run(argv(model_dir, out, "--batch-size", "2"),
                     {"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}) for r in range(2)]
    assert [wait(p) for p in pids] == [0, 0]
    assert digests(out) == reference
    assert json.loads((out / "manifest.json").read_text())["complete"]


def test_sigkill_at_random_points_then_resume_is_exact(model_dir, reference, tmp_path):
    out = tmp_path / "crash"
    rng = np.random.default_rng(1234)
    base = argv(model_dir, out, "--batch-size", "1")
    kills = 0
    first = True
    for _ in range(4):
        pid = fork_run(base if first else [*base, "--resume"])
        first = False
        # Kill at a random point of the job: once a random number of its images is visible, plus a random fraction
        # of the next one (counted in images, not seconds, so that a fast machine cannot finish first).
        deadline = time.monotonic() + 30
        target = int(rng.integers(0, N - 1))
        while not (out / "manifest.json").exists() and time.monotonic() < deadline:
            time.sleep(0.001)
        while len(clean_fid_visible(out)) < target and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(float(rng.uniform(0.0, 0.02)))
        try:
            os.kill(pid, signal.SIGKILL)
            kills += wait(pid) == -signal.SIGKILL
        except ProcessLookupError:
            wait(pid)
        visible = clean_fid_visible(out)
        assert all(is_valid_image(f) for f in visible)  # only finished PNGs are ever visible
        if len(visible) == N:
            break
    assert kills >= 1
    assert sample_script.main([*base, "--resume"]) == 0
    assert digests(out) == reference  # exactly N valid images, bytes of the uninterrupted run
    assert len(clean_fid_visible(out)) == N
    assert not list(out.glob(".*"))  # no temporary files left
    assert json.loads((out / "manifest.json").read_text())["count"] == N


def test_resume_removes_temporaries_and_redraws_damaged_pngs(model_dir, reference, tmp_path):
    out = tmp_path / "damaged"
    assert sample_script.main(argv(model_dir, out)) == 0
    (out / ".000003.png.abcd.tmp").write_bytes(b"half")  # what a killed writer leaves
    (out / "000002.png").write_bytes((out / "000002.png").read_bytes()[:50])  # truncated by a bad disk
    (out / "000005.png").unlink()
    assert sample_script.main([*argv(model_dir, out), "--resume"]) == 0
    assert digests(out) == reference
    assert not list(out.glob(".*"))


def test_resume_can_extend_a_finished_job(model_dir, reference, tmp_path):
    out = tmp_path / "extend"
    small = argv(model_dir, out)
    small[small.index("--num-images") + 1] = "5"
    assert sample_script.main(small) == 0
    assert sample_script.main([*argv(model_dir, out), "--resume"]) == 0
    assert digests(out) == reference


def test_bad_input_is_refused_without_output(model_dir, tmp_path, capsys):
    out = tmp_path / "bad"
    for extra in (["--method", "nope"], ["--class-ids", "9"], ["--batch-size", "0"], ["--method", "ar:window=3"],
                  ["--threads", "0"]):
        assert sample_script.main(argv(model_dir, out, *extra)) == 2, extra
        assert not out.exists(), extra
    err = capsys.readouterr().err
    assert "unknown method 'nope'" in err and "class_labels: 9" in err and "--batch-size" in err

    done = tmp_path / "done"
    assert sample_script.main(argv(model_dir, done)) == 0
    assert sample_script.main(argv(model_dir, done)) == 2  # same job again without --resume
    assert sample_script.main([*argv(model_dir, done, "--guidance-scale", "3.0"), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "pass --resume" in err and "differs from this one in ['sampling']" in err

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "x.png").write_bytes(b"")
    assert sample_script.main(argv(model_dir, foreign)) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_resume_refuses_images_of_other_weights(tmp_path):
    """The same model name with other weights (a retrained model) is another job: resuming would mix them."""
    out = tmp_path / "o"
    draw = lambda idx: np.zeros((len(idx), 4, 4, 3), np.uint8)  # noqa: E731
    run_sampling_job(draw, SamplingJob(model="m", seed=0, num_samples=2, model_sha256="a" * 16), out, progress=False)
    with pytest.raises(JobError, match=r"differs from this one in \['model_sha256'\]"):
        run_sampling_job(draw, SamplingJob(model="m", seed=0, num_samples=3, model_sha256="b" * 16), out,
                         resume=True, progress=False)


def test_library_job_rejects_bad_batch_size(tmp_path):
    job = SamplingJob(model="m", seed=0, num_samples=2)
    with pytest.raises(ValueError, match="batch_size"):
        run_sampling_job(lambda idx: np.zeros((len(idx), 4, 4, 3), np.uint8), job, tmp_path / "o", batch_size=0)
    with pytest.raises(ValueError, match="num_samples"):
        SamplingJob(model="m", seed=0, num_samples=0)


@pytest.mark.slow
def test_torchrun_two_processes(model_dir, reference, tmp_path):
    """The documented launch: torchrun --nproc_per_node 2 eval/sample.py (slow: each rank imports diffusers)."""
    out = tmp_path / "torchrun"
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--nproc_per_node", "2", "--master_port", str(free_port()), str(ROOT / "eval" / "sample.py"),
           *argv(model_dir, out, "--batch-size", "3")]
    # The ranks import the arvis of this checkout (not whichever one is installed in the environment).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, env=env)
    assert digests(out) == reference


def test_a_pipelines_hash_covers_its_linked_components(tmp_path):
    """A pipeline links its tokenizer (``vqvae -> ../vq-emoji``): retraining the tokenizer changes every image, so
    it must change the hash that records and resumable sample folders are checked against."""
    from arvis.hub import folder_sha256

    vq, pipe = tmp_path / "vq", tmp_path / "pipe"
    (pipe / "transformer").mkdir(parents=True)
    vq.mkdir()
    (pipe / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(b"transformer")
    (vq / "diffusion_pytorch_model.safetensors").write_bytes(b"decoder v1")
    (vq / "README.md").write_text("a card")
    (pipe / "vqvae").symlink_to("../vq")
    before = folder_sha256(pipe)
    (vq / "README.md").write_text("another card")  # cards are not weights
    assert folder_sha256(pipe) == before
    (vq / "diffusion_pytorch_model.safetensors").write_bytes(b"decoder v2")
    assert folder_sha256(pipe) != before
