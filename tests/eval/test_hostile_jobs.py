"""Hostile and careless conditions for sampling jobs (arvis.eval.jobs, eval/sample.py).

Each test declares the docs/reliability.md row it proves (tests/reliability_rows.py). Most use a
stand-in sampler (each image a pure function of its index, drawn in microseconds); the command-line
cases run eval/sample.py's ``main`` on a tiny pipeline. File-system failures are real where the
kernel can produce them for root too (``ulimit -f``), and injected at the system call otherwise
(``ENOSPC`` at ``fsync``, ``EROFS`` at ``mkdir`` / ``rename``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import resource
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from arvis.errors import JobError, StorageError
from arvis.eval.jobs import MANIFEST, JobLock, SamplingJob, run_sampling_job

N = 6


def draw(indices: Sequence[int]) -> np.ndarray:
    """Stand-in sampler: image ``i`` is noise seeded by ``i`` (16x16 RGB)."""
    return np.stack([np.random.default_rng(i).integers(0, 256, (16, 16, 3), dtype=np.uint8) for i in indices])


def job(seed: int = 0, num_samples: int = N) -> SamplingJob:
    return SamplingJob(model="stand-in", seed=seed, num_samples=num_samples)


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.png"))}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("reference") / "images"
    run_sampling_job(draw, job(), out, progress=False)
    return digests(out)


def crashing_after(count: int) -> Callable[[Sequence[int]], np.ndarray]:
    """A sampler that dies (like a killed process would stop) after drawing ``count`` images."""
    drawn = []

    def sampler(indices):
        if len(drawn) >= count:
            raise KeyboardInterrupt("killed")
        drawn.extend(indices)
        return draw(indices)

    return sampler


def in_child(fn: Callable[[], object], setup: Callable[[], None] | None = None) -> tuple[int, str, str]:
    """Run ``fn`` in a forked child; returns ``(exit code, "ok" or "Class: message", stderr)``."""
    result_r, result_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.dup2(err_w, 2)
            sys.stderr = open(2, "w", buffering=1, closefd=False)  # pytest had replaced sys.stderr
            if setup is not None:
                setup()
            value = fn()
            code = value if isinstance(value, int) else 0
            message = "ok"
        except BaseException as err:  # noqa: BLE001 - reported to the parent
            message = f"{type(err).__name__}: {err}"
        finally:
            sys.stderr.flush()
            os.write(result_w, message.encode())
            os._exit(code)
    os.close(result_w)
    os.close(err_w)
    with os.fdopen(result_r, "rb") as r, os.fdopen(err_r, "rb") as e:
        message, stderr = r.read().decode(), e.read().decode()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), message, stderr


# ----------------------------------------------------------------------------- trusted resumes
@pytest.mark.reliability(area="sampling jobs",
                         probe="on --resume, a wrong but valid PNG in place of a sample: another sample's image (same size "
                               "and mode), a grayscale image, an image of another size — in a finished job and in a killed one",
                         outcome="each file whose sha256 differs from the one recorded when the sample was written is drawn "
                                 "again; the folder ends byte-identical to an uninterrupted run and the manifest certifies "
                                 "only those bytes (it kept and certified any decodable PNG)")
@pytest.mark.parametrize("finished", [True, False])
def test_resume_replaces_wrong_but_valid_pngs(tmp_path, reference, finished):
    out = tmp_path / "job"
    if finished:
        run_sampling_job(draw, job(), out, progress=False)
    else:
        with pytest.raises(KeyboardInterrupt):
            run_sampling_job(crashing_after(5), job(), out, batch_size=1, progress=False)
        assert len(digests(out)) == 5 and not json.loads((out / MANIFEST).read_text())["complete"]
    (out / "000001.png").write_bytes((out / "000002.png").read_bytes())  # a valid sample, of another index
    Image.fromarray(draw([3])[0]).convert("L").save(out / "000003.png")
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(out / "000004.png")
    result = run_sampling_job(draw, job(), out, resume=True, progress=False)
    assert result.replaced == 3
    assert digests(out) == reference
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["complete"] and [r["sha256"] for r in manifest["images"]] == list(reference.values())
    assert manifest["image"] == {"height": 16, "width": 16, "mode": "RGB"}
    assert not list(out.glob(".*"))  # journals folded into the manifest, lock released


@pytest.mark.reliability(area="sampling jobs",
                         probe="a sample replaced by another file while the job runs (after it was written, before the "
                               "closing manifest)",
                         outcome="JobError: the manifest is not written (nothing is certified); --resume draws it again")
def test_manifest_never_certifies_a_changed_file(tmp_path, reference):
    out = tmp_path / "job"

    def tampering(indices):
        if N - 1 in indices:
            (out / "000000.png").write_bytes((out / "000001.png").read_bytes())
        return draw(indices)

    with pytest.raises(JobError, match="1 images are missing or differ from what this job wrote .*index 0.*--resume"):
        run_sampling_job(tampering, job(), out, batch_size=1, progress=False)
    assert not json.loads((out / MANIFEST).read_text())["complete"]
    assert run_sampling_job(draw, job(), out, resume=True, progress=False).replaced == 1
    assert digests(out) == reference


@pytest.mark.reliability(area="sampling jobs",
                         probe="a job killed while appending to its journal (a torn last line), then resumed",
                         outcome="the torn record is ignored and its sample drawn again; every other sample is kept; the "
                                 "result is byte-identical to an uninterrupted run")
def test_torn_journal_line_costs_one_redraw(tmp_path, reference):
    out = tmp_path / "job"
    with pytest.raises(KeyboardInterrupt):
        run_sampling_job(crashing_after(4), job(), out, batch_size=1, progress=False)
    journal = next(out.glob(".journal-*.jsonl"))
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[:-1]) + lines[-1][:20])  # the last record cut mid-write
    result = run_sampling_job(draw, job(), out, resume=True, batch_size=1, progress=False)
    assert (result.skipped, result.replaced, result.written) == (3, 1, 3)
    assert digests(out) == reference


# ----------------------------------------------------------------------------- one job per folder
def wait_for_lock(out: Path, pid: int, timeout: float = 30) -> None:
    """Wait until process ``pid`` holds ``out``'s job lock. The lock file exists before its flock is taken, and the
    holder writes its pid only once it holds it: waiting for the file alone let the test's own job take the lock
    first on a busy machine."""
    lock = out / ".arvis-job.lock"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            if lock.read_text().strip() == str(pid):
                return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not take the lock of {out} within {timeout} s")


@pytest.mark.reliability(area="sampling jobs",
                         probe="two different jobs started at once on the same empty folder",
                         outcome="the first holds an OS lock (flock) for its lifetime and finishes; the second is refused "
                                 "with JobError naming the holder's pid (they used to delete each other's temporary "
                                 "manifest: a raw FileNotFoundError)")
def test_second_job_on_a_folder_in_use_is_refused(tmp_path):
    out = tmp_path / "shared"

    def slow(indices):
        time.sleep(0.15)
        return draw(indices)

    first = os.fork()
    if first == 0:
        code = 1
        try:
            run_sampling_job(slow, job(seed=1), out, batch_size=1, progress=False)
            code = 0
        finally:
            os._exit(code)
    wait_for_lock(out, first)
    code, message, _ = in_child(lambda: run_sampling_job(slow, job(seed=2), out, batch_size=1, progress=False))
    _, status = os.waitpid(first, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert code == 1 and message.startswith("JobError:") and f"another sampling job (pid {first})" in message
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["complete"] and manifest["job"]["seed"] == 1 and len(digests(out)) == N


@pytest.mark.reliability(area="sampling jobs",
                         probe="a job SIGKILLed while it holds the folder's lock, then resumed",
                         outcome="the kernel releases the lock with the process: the resume starts at once and completes")
def test_lock_of_a_killed_job_does_not_block_resume(tmp_path, reference):
    out = tmp_path / "job"
    out.mkdir()
    holder = os.fork()
    if holder == 0:
        try:  # the child never returns into pytest, whatever happens
            JobLock.acquire(out)
            time.sleep(60)
        finally:
            os._exit(0)
    wait_for_lock(out, holder)
    with pytest.raises(JobError, match=f"pid {holder}"):
        run_sampling_job(draw, job(), out, progress=False)
    os.kill(holder, signal.SIGKILL)
    os.waitpid(holder, 0)
    run_sampling_job(draw, job(), out, resume=True, progress=False)
    assert digests(out) == reference and not (out / ".arvis-job.lock").exists()


# ----------------------------------------------------------------------------- file-system errors
@pytest.mark.reliability(area="sampling jobs",
                         probe="disk full (ENOSPC) while writing the second image",
                         outcome="StorageError: \"writing 000001.png in … failed: the disk is full (…). The images already "
                                 "written are kept: … run the same command with --resume\"; no partial or temporary file; "
                                 "--resume then completes byte-identically")
def test_disk_full_stops_cleanly_and_resume_continues(tmp_path, reference, monkeypatch):
    out = tmp_path / "job"
    calls = []
    real_fsync = os.fsync

    def fsync(fd):  # a full disk shows up at write/fsync; calls: opening manifest, image 0, image 1
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(StorageError, match=r"writing 000001.png in .* failed: the disk is full\. .*--resume"):
        run_sampling_job(draw, job(), out, batch_size=1, progress=False)
    monkeypatch.undo()
    assert sorted(p.name for p in out.glob("*.png")) == ["000000.png"]
    assert not list(out.glob(".*.tmp"))
    result = run_sampling_job(draw, job(), out, resume=True, progress=False)
    assert (result.skipped, result.written) == (1, N - 1) and digests(out) == reference


@pytest.mark.reliability(area="sampling jobs",
                         probe="a read-only file system (EROFS) when the output folder is created, and when the closing "
                               "manifest is renamed into place",
                         outcome="StorageError saying the file system is read-only and how to continue; the images already "
                                 "written are kept and --resume completes")
def test_read_only_file_system_is_reported(tmp_path, reference, monkeypatch):
    out = tmp_path / "job"

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(out))

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(StorageError, match="preparing the output folder .* failed: the file system is read-only"):
        run_sampling_job(draw, job(), out, progress=False)
    monkeypatch.undo()

    real_replace = os.replace

    def replace(src, dst):
        if Path(dst).name == MANIFEST and len(digests(out)) == N:
            raise OSError(errno.EROFS, "Read-only file system", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(StorageError, match=f"writing {MANIFEST} .* failed: the file system is read-only"):
        run_sampling_job(draw, job(), out, progress=False)
    monkeypatch.undo()
    assert len(digests(out)) == N
    result = run_sampling_job(draw, job(), out, resume=True, progress=False)
    assert (result.skipped, result.written) == (N, 0) and digests(out) == reference


@pytest.mark.reliability(area="sampling jobs",
                         probe="eval/sample.py under a real file-size limit (ulimit -f, 2 KB) smaller than one image",
                         outcome="exit code 2 and one error line, no traceback: \"…failed: the file-size limit was reached (ulimit -f) … --resume\"; "
                                 "after raising the limit, --resume completes byte-identically")
def test_file_size_limit_via_command_line(tmp_path):
    from tests.eval.test_eval_sampling import argv, sample_script, small_pipeline
    from tests.eval.test_eval_sampling import digests as script_digests

    model = tmp_path / "model"
    small_pipeline().save_pretrained(model)
    out = tmp_path / "limited"

    def limit():
        from accelerate import PartialState

        PartialState._reset_state()
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    code, _, stderr = in_child(lambda: sample_script.main(argv(model, out)), setup=limit)
    errors = [line for line in stderr.splitlines() if "error" in line.lower()]  # besides the loading bar
    assert code == 2, stderr
    assert len(errors) == 1 and errors[0].startswith("eval/sample.py: error: writing 000000.png"), stderr
    assert "file-size limit was reached (ulimit -f)" in errors[0] and "--resume" in errors[0]
    assert "Traceback" not in stderr
    assert not list(out.glob("*.png"))
    reference = tmp_path / "reference"
    assert sample_script.main(argv(model, reference)) == 0
    assert sample_script.main([*argv(model, out), "--resume"]) == 0
    assert script_digests(out) == script_digests(reference)


@pytest.mark.reliability(area="sampling jobs",
                         probe="the permissions of written files under umask 022 and 077 (images, manifest, exported "
                               "checkpoints, atomically written folders)",
                         outcome="files get 0666 and folders 0777 less the umask, as open() / mkdir() give (they were 0600 / "
                                 "0700 whatever the umask)")
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_outputs_respect_the_umask(tmp_path, umask):
    from arvis.eval.domain import DomainClassifier, save_domain_network
    from arvis.models.checkpoint import export_llamagen_checkpoint
    from tests.conftest import tiny_llamagen

    previous = os.umask(umask)
    try:
        out = tmp_path / "job"
        run_sampling_job(draw, job(num_samples=2), out, progress=False)
        export_llamagen_checkpoint(tiny_llamagen("c2i"), tmp_path / "m.safetensors")
        save_domain_network(DomainClassifier(num_classes=2, image_size=16, channels=(4,), norm_groups=2),
                            tmp_path / "domain")
    finally:
        os.umask(previous)
    domain = tmp_path / "domain"
    for path in [out / "000000.png", out / MANIFEST, tmp_path / "m.safetensors", domain / "config.json",
                 domain / "diffusion_pytorch_model.safetensors"]:
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path
    assert domain.stat().st_mode & 0o777 == 0o777 & ~umask


@pytest.mark.reliability(area="saving models",
                         probe="save_pretrained of a pipeline and of a model, and a training export, under umask 022 "
                               "and 077, into a folder that already holds a private file of the user's",
                         outcome="the written safetensors/JSON files get 0666 less the umask (safetensors wrote 0600 "
                                 "whatever the umask); the user's own file keeps its mode")
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_save_pretrained_respects_the_umask(tmp_path, umask):
    from arvis.pipelines import LlamaGenPipeline
    from arvis.training.assemble import assemble
    from tests.conftest import tiny_llamagen
    from tests.pipelines.test_llamagen import tiny_vq

    pipe_dir, model_dir, assembled = tmp_path / "pipe", tmp_path / "model", tmp_path / "assembled"
    pipe_dir.mkdir()
    (pipe_dir / "notes.txt").write_text("mine")
    os.chmod(pipe_dir / "notes.txt", 0o600)
    previous = os.umask(umask)
    try:
        LlamaGenPipeline(tiny_llamagen("c2i"), tiny_vq()).save_pretrained(pipe_dir)
        tiny_llamagen("c2i").save_pretrained(model_dir)
        tiny_vq().save_pretrained(tmp_path / "vq")
        assemble(model_dir, tmp_path / "vq", out=assembled, data="photos")
    finally:
        os.umask(previous)
    written = [*pipe_dir.glob("*/*.safetensors"), *pipe_dir.glob("*/config.json"), pipe_dir / "model_index.json",
               *model_dir.iterdir(), *assembled.glob("transformer/*"), assembled / "model_index.json"]
    assert len([p for p in written if p.suffix == ".safetensors"]) == 4
    for path in written:
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path
    assert assembled.stat().st_mode & 0o777 == 0o777 & ~umask
    assert (pipe_dir / "notes.txt").stat().st_mode & 0o777 == 0o600


def test_atomic_directory_keeps_named_entries_and_is_untouched_on_error(tmp_path):
    from arvis.utils.files import atomic_directory

    out = tmp_path / "out"
    with atomic_directory(out) as staged:
        (staged / "weights").write_text("v1")
        (staged / "README.md").write_text("card")
    with atomic_directory(out, keep=("README.md", "absent.txt")) as staged:
        (staged / "weights").write_text("v2")
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "weights"]
    assert (out / "weights").read_text() == "v2" and (out / "README.md").read_text() == "card"
    with pytest.raises(RuntimeError, match="crash"), atomic_directory(out) as staged:
        (staged / "weights").write_text("v3")
        raise RuntimeError("crash")
    assert (out / "weights").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging folder left behind


@pytest.mark.reliability(area="sampling jobs",
                         probe="a symbolic link (or a hard link) planted at a job's journal (.journal-0.jsonl) or lock "
                               "file pointing at another file, for a fresh job and for a --resume; a link planted at "
                               "an image a resumed job has still to draw",
                         outcome="JobError naming the journal or lock file (it is opened with O_NOFOLLOW and must have "
                                 "one name); the other file is untouched (it was appended to, or truncated by the lock); "
                                 "a link at an image is replaced by the atomic rename, never written through")
@pytest.mark.parametrize("name, resume", [(".journal-0.jsonl", False), (".journal-0.jsonl", True),
                                          (".arvis-job.lock", False), ("hardlink", True), ("000004.png", True)])
def test_links_in_the_output_folder_are_never_written_through(tmp_path, reference, name, resume):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    if resume:
        with pytest.raises(KeyboardInterrupt):
            run_sampling_job(crashing_after(2), job(), out, batch_size=1, progress=False)
    out.mkdir(exist_ok=True)
    if name == "hardlink":
        (out / ".journal-0.jsonl").unlink()
        os.link(victim, out / ".journal-0.jsonl")
        words = ".journal-0.jsonl.* has 2 names"
    else:
        (out / name).unlink(missing_ok=True)
        (out / name).symlink_to(victim)
        words = f"{name}.* is a symbolic link"
    if name.endswith(".png"):
        run_sampling_job(draw, job(), out, resume=True, progress=False)
        assert digests(out) == reference and not (out / name).is_symlink()
    else:
        with pytest.raises(JobError, match=words):
            run_sampling_job(draw, job(), out, resume=resume, progress=False)
    assert victim.read_text() == "precious\n"
