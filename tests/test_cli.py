"""The arvis command line."""

from __future__ import annotations

import json

from arvis.cli import main


def test_help_lists_subcommands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "generate" in out and "methods" in out


def test_generate_writes_pngs_and_stats(tmp_path, capsys):
    out_dir = tmp_path / "out"
    rc = main(["generate", "--model", "tiny-random", "--class-ids", "0,b", "--num-images", "2", "--seed", "3",
               "--output", str(out_dir), "--threads", "1"])
    assert rc == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["0000.png", "0001.png", "0002.png", "0003.png", "stats.json"]
    stats = json.loads((out_dir / "stats.json").read_text())
    assert stats["target_forwards"] == 256 and stats["samples"] == 4
    assert "step_compression=1.00x" in capsys.readouterr().out


def test_generate_is_reproducible(tmp_path):
    for name in ("a", "b"):
        assert main(["generate", "--model", "tiny-random", "--class-ids", "1", "--seed", "5",
                     "--output", str(tmp_path / name), "--threads", "1"]) == 0
    assert (tmp_path / "a" / "0000.png").read_bytes() == (tmp_path / "b" / "0000.png").read_bytes()


def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    out_dir = tmp_path / "out"
    for argv in (["--class-ids", "99"], ["--top-k", "-3"], ["--method", "nope"], ["--top-p", "2"],
                 ["--guidance-scale", "-1"], ["-o", "window=3"]):
        rc = main(["generate", "--model", "tiny-random", "--output", str(out_dir), "--threads", "1", *argv])
        assert rc == 2, argv
        assert not out_dir.exists(), argv
    err = capsys.readouterr().err
    assert "class_labels: 99 is not a class id" in err and "top_k must be" in err and "unknown method" in err
    assert main(["generate", "--model", str(tmp_path / "nowhere"), "--output", str(out_dir)]) == 2
    assert "neither a shipped model" in capsys.readouterr().err
