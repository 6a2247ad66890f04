"""Hostile and careless command lines: every probe ends in one clear error (exit status 2) before any work.

"Before any work" is checked by making model loading fail loudly: the probes that the command line alone
decides must be refused before :func:`arvis.hub.load_pipeline` is ever called, and nothing is written.
Probes that need the model (an interval past its sequence, a batch too large for the memory) run after
loading but before decoding, and write nothing either.
"""

from __future__ import annotations

import pytest
import torch

import arvis.hub
from arvis import cli_args
from arvis.cli import main


@pytest.fixture
def no_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(arvis.hub, "load_pipeline", refuse)


def refused(capsys, argv, message):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, (argv, err)
    assert message in err, (argv, err)
    assert "Traceback" not in err
    return err


GENERATE = ["generate", "--model", "tiny-random", "--no-progress"]


@pytest.mark.parametrize(("argv", "message"), [
    (GENERATE + ["--num-images", "1000000000"], "--num-images must be an integer in [1, 1000]"),
    (["bench", "--model", "tiny-random", "--num-images", "1000000000"], "--num-images must be an integer in [1, 100000]"),
    (["fid", "--model", "tiny-random", "--num-images", "1000000000"], "--num-images must be an integer in [1, 100000]"),
    (GENERATE + ["--batch-size", "0"], "--batch-size must be an integer in [1, 1024]"),
    (GENERATE + ["--seed", "-1"], "--seed must be an integer in [0,"),
    (GENERATE + ["--threads", "1000000"], f"--threads must be an integer in [1, {cli_args.available_cores()}]"),
    (GENERATE + ["--threads", "0"], "--threads must be an integer in [1,"),
    (GENERATE + ["--device", "bogus"], "--device: 'bogus' is not a torch device"),
    (GENERATE + ["--device", "tpu"], "--device: 'tpu'"),
    (GENERATE + ["--class-ids", ""], "--class-ids: expected comma-separated class ids or names, got ''"),
    (GENERATE + ["--class-ids", "1,,2"], "--class-ids: expected comma-separated"),
    (GENERATE + ["--prompt", " "], "--prompt: empty prompt"),
    (GENERATE + ["--method", "sjd:jacobi_interval=5"], "--method 'sjd:jacobi_interval=5'"),
    (GENERATE + ["--method", "sjd:window=0"], "window must be an integer"),
    (GENERATE + ["--method", "magic"], "unknown method 'magic'"),
    (GENERATE + ["--rounds", "0"], "--rounds must be an integer in [1, 20]"),
])
def test_refused_before_any_work(no_loading, capsys, tmp_path, argv, message):
    refused(capsys, [*argv, "--output", str(tmp_path / "out")] if argv[0] == "generate" else argv, message)
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_a_clear_error(no_loading, capsys, tmp_path):
    refused(capsys, GENERATE + ["--device", "cuda", "--output", str(tmp_path / "o")], "has no usable CUDA GPU")


def test_an_output_that_is_a_file_is_refused_before_generating(no_loading, capsys, tmp_path):
    file = tmp_path / "taken.png"
    file.write_bytes(b"mine")
    refused(capsys, GENERATE + ["--output", str(file)], "is a file, not a folder")
    refused(capsys, GENERATE + ["--output", str(file / "sub")], "is a file; cannot create a folder under it")
    assert file.read_bytes() == b"mine"
    refused(capsys, ["bench", "--model", "tiny-random", "--json", str(tmp_path)], "is a folder; give a file path")


def test_an_output_without_room_on_its_disk_is_refused(no_loading, capsys, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    refused(capsys, GENERATE + ["--num-images", "8", "--output", str(tmp_path / "o")], "GiB free; lower --num-images")


def test_an_interval_past_the_sequence_is_refused_before_decoding(capsys, tmp_path):
    refused(capsys, GENERATE + ["--threads", "1", "--method", "sjd:jacobi_interval=[0,100000]",
                                "--output", str(tmp_path / "o")], "reaches past the model's 256-token sequence")
    assert not (tmp_path / "o").exists()


def test_a_batch_larger_than_memory_is_refused_before_decoding(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(cli_args, "available_memory_bytes", lambda: 2**20)
    refused(capsys, GENERATE + ["--threads", "1", "--num-images", "8", "--batch-size", "8",
                                "--output", str(tmp_path / "o")], "more than the 0.0 GiB of memory available")
    assert not (tmp_path / "o").exists()


def test_the_sampling_script_takes_the_same_checks(no_loading, capsys, tmp_path):
    import eval.sample

    for argv, message in ((["--num-images", "1000000000"], "--num-images must be an integer in [1, 100000]"),
                          (["--num-images", "4", "--threads", "1000000"], "--threads must be an integer"),
                          (["--num-images", "4", "--method", "sjd:jacobi_interval=5"], "jacobi_interval")):
        assert eval.sample.main(["--model", "tiny-random", "--output", str(tmp_path / "s"), *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()


def test_an_unresolvable_demo_host_is_a_clear_error(no_loading, capsys):
    refused(capsys, ["demo", "--model", "tiny-random", "--host", "no-such-host.invalid", "--no-warmup"],
            "--host: cannot resolve 'no-such-host.invalid'")
    refused(capsys, ["demo", "--port", "70000"], "--port must be in [0, 65535]")


@pytest.mark.reliability(area="command lines",
                         probe="out-of-range sampling flags (--guidance-scale -1 or nan, --temperature -1 or inf, "
                               "--top-k -5, --top-p 0 or 1.5) for generate, bench, fid and eval/sample.py",
                         outcome="exit code 2 and one line naming the flag and its range, before any model is loaded "
                                 "(they were refused only after the model had loaded)")
@pytest.mark.parametrize("flag, value, words", [
    ("--guidance-scale", "-1", "--guidance-scale: guidance_scale must be >= 0"),
    ("--guidance-scale", "nan", "--guidance-scale: guidance_scale must be a finite number"),
    ("--temperature", "-1", "--temperature: temperature must be >= 0"),
    ("--temperature", "inf", "--temperature: temperature must be a finite number"),
    ("--top-k", "-5", "--top-k: top_k must be an integer >= 0"),
    ("--top-p", "0", "--top-p: top_p must be in (0, 1]"),
    ("--top-p", "1.5", "--top-p: top_p must be in (0, 1]"),
])
def test_sampling_flags_are_checked_before_loading(no_loading, capsys, tmp_path, flag, value, words):
    import eval.sample

    refused(capsys, GENERATE + [flag, value, "--output", str(tmp_path / "o")], words)
    refused(capsys, ["bench", "--model", "tiny-random", flag, value], words)
    refused(capsys, ["fid", "--model", "tiny-random", "--num-images", "4", flag, value], words)
    assert eval.sample.main(["--model", "tiny-random", "--num-images", "2", "--output", str(tmp_path / "s"),
                             flag, value]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "s").exists()


@pytest.mark.reliability(area="command lines",
                         probe="output paths that cannot be written although their folder exists: "
                               "`arvis bench --json /proc/x.json`, --markdown under /proc, `arvis generate --output "
                               "/proc/out`, `arvis fid --json /proc/x.json`",
                         outcome="exit code 2 and one line naming the flag and the folder, before any model is loaded "
                                 "(bench computed for minutes before the write failed); the check creates and removes "
                                 "a hidden probe file")
@pytest.mark.parametrize("argv, flag", [
    (["bench", "--model", "tiny-random", "--json", "/proc/x.json"], "--json"),
    (["bench", "--model", "tiny-random", "--markdown", "/proc/x.md"], "--markdown"),
    (GENERATE + ["--output", "/proc/out"], "--output"),
    (["fid", "--model", "tiny-random", "--num-images", "4", "--json", "/proc/x.json"], "--json"),
])
def test_unwritable_outputs_are_refused_before_loading(no_loading, capsys, argv, flag):
    refused(capsys, argv, f"{flag}: cannot write under '/proc'")


@pytest.mark.reliability(area="command lines",
                         probe="`arvis generate` under a real file-size limit (ulimit -f, 4 KB) smaller than its images",
                         outcome="exit code 2 and one line (StorageError: writing the outputs … failed: the file-size "
                                 "limit was reached (ulimit -f)), no traceback (it was PIL's OSError traceback)")
def test_generate_under_a_file_size_limit_is_one_line(tmp_path):
    import resource

    from tests.eval.test_hostile_jobs import in_child

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    code, _, stderr = in_child(lambda: main(GENERATE + ["--threads", "1", "--num-images", "2", "--output",
                                                        str(tmp_path / "o")]), setup=limit)
    errors = [line for line in stderr.splitlines() if "error" in line.lower()]
    assert code == 2, stderr
    assert len(errors) == 1 and errors[0].startswith("arvis generate: error: writing"), stderr
    assert "the file-size limit was reached (ulimit -f)" in errors[0] and "Traceback" not in stderr
