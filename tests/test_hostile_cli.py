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
