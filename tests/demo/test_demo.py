"""The Gradio demo (arvis/demo), end to end against a running server on 127.0.0.1.

- input validation against :class:`DemoLimits`, with messages naming the input (no server);
- method options derived from the methods' dataclasses;
- nothing under ``arvis/`` imports Gradio at module level; ``arvis demo`` is registered;
- gradio_client end to end: a generation returns both images and the statistics; previews stream;
  bad inputs come back as clear errors; the REST routes cannot skip the queue; files and origins
  are refused; the server binds 127.0.0.1;
- eight concurrent clients are all served; beyond the queue's size callers get "queue full", the
  server keeps serving;
- ``arvis demo`` launches the app (tiny-random, with its banner) bound to 127.0.0.1 only.

All of it runs on a purpose-built tiny pipeline (8×8 tokens, random weights) in well under a minute.
"""

from __future__ import annotations

import ast
import math
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from tests import REPO_ROOT as ROOT

gr = pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")
httpx = pytest.importorskip("httpx")

from arvis.demo.core import (  # noqa: E402
    DemoInputError,
    DemoLimits,
    DemoModel,
    ModelSet,
    method_option_specs,
    validate_request,
)
from arvis.demo.page import build_demo, launch  # noqa: E402
from arvis.methods.catalog import method_names  # noqa: E402


# ----------------------------------------------------------------------------- a tiny pipeline
def small_pipeline(num_classes: int = 4, seed: int = 0, draft: bool = False):
    """8×8 tokens, vocabulary 64, 64×64 images: a request takes a fraction of a second on one core
    (``draft``: with a draft transformer, for speculative decoding)."""
    from arvis.models.llamagen import LlamaGenTransformer
    from arvis.pipelines import LlamaGenPipeline
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel

    g = torch.Generator().manual_seed(seed)
    transformer = LlamaGenTransformer(dim=32, n_layer=1, n_head=2, vocab_size=64, block_size=64, multiple_of=16,
                                      num_classes=num_classes, class_names=[f"class{i}" for i in range(num_classes)])
    transformer.init_weights(g)
    with torch.no_grad():
        transformer.output.weight.normal_(0.0, 0.3, generator=g)
    vqvae = LlamaGenVQModel(codebook_size=64, codebook_embed_dim=4, encoder_ch_mult=(1, 1, 2, 2),
                            decoder_ch_mult=(1, 1, 2, 2), z_channels=16, base_channels=8, norm_num_groups=4)
    vqvae.init_weights(g)
    drafter = None
    if draft:
        drafter = LlamaGenTransformer(dim=16, n_layer=1, n_head=2, vocab_size=64, block_size=64, multiple_of=16,
                                      num_classes=num_classes)
        drafter.init_weights(g)
        with torch.no_grad():
            drafter.output.weight.normal_(0.0, 0.3, generator=g)
        drafter = drafter.eval()
    return LlamaGenPipeline(transformer.eval(), vqvae.eval(), draft_transformer=drafter)


class GatedPipeline:
    """A pipeline whose calls wait for ``gate`` (to hold a request in the running slot); ``entered``
    is set when a call reaches the gate."""

    def __init__(self, pipe):
        self._pipe = pipe
        self.gate = threading.Event()
        self.entered = threading.Event()

    def __getattr__(self, name):
        return getattr(self._pipe, name)

    def __call__(self, *args, **kwargs):
        self.entered.set()
        assert self.gate.wait(timeout=60), "gate never opened"
        return self._pipe(*args, **kwargs)


class SlowPipeline(GatedPipeline):
    """A pipeline whose every forward takes at least ``delay`` seconds (its decode callback sleeps first)."""

    def __init__(self, pipe, delay: float = 0.05):
        super().__init__(pipe)
        self.delay = delay

    def __call__(self, *args, callback_on_step_end=None, **kwargs):
        def slow(*a):
            time.sleep(self.delay)
            return callback_on_step_end(*a) if callback_on_step_end is not None else None

        return self._pipe(*args, callback_on_step_end=slow, **kwargs)


def _serve(demo):
    launch(demo, port=None, prevent_thread_lock=True, quiet=True)
    return demo.local_url


def _client(url):
    return gradio_client.Client(url, verbose=False, download_files=True)


class PromptEncoder:
    """A stand-in text encoder: caption features from the prompt's characters (deterministic)."""

    def encode(self, prompts, length):
        feats = torch.zeros(len(prompts), length, 12)
        for i, p in enumerate(prompts):
            codes = torch.tensor([ord(c) % 97 for c in p[:length]], dtype=torch.float32) / 97
            feats[i, length - len(codes):, 0] = codes
        return feats, torch.ones(len(prompts), length, dtype=torch.bool)


def small_t2i_pipeline():
    from tests.conftest import tiny_llamagen

    pipe = small_pipeline()
    return type(pipe)(tiny_llamagen("t2i", grid=8, vocab=64), pipe.vqvae, text_encoder=PromptEncoder())


@pytest.fixture(scope="module")
def models():
    return {"small": DemoModel(pipeline=small_pipeline(draft=True), untrained=True, description="test model"),
            "small-t2i": DemoModel(loader=small_t2i_pipeline, untrained=True)}


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    # A cache folder of its own, as `arvis demo` gives every server: gradio's shutdown of any other app in
    # this process deletes the files *it* cached, and an identical file is one path for all apps.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADIO_TEMP_DIR", str(tmp_path_factory.mktemp("gradio-cache")))
        demo = build_demo(models, DemoLimits(max_queue=16, preview_interval_s=0.05))
        url = _serve(demo)
        yield demo, url
        demo.close()


@pytest.fixture(scope="module")
def client(server):
    """One client for the tests that make one request at a time (tests of concurrency make their own)."""
    return _client(server[1])


def call(client, **kwargs):
    base = {"model": "small", "class_label": 1, "method": "sjd", "seed": 0, "num_images": 1, "live_preview": False}
    return client.predict(**{**base, **kwargs}, api_name="/generate")


# ----------------------------------------------------------------------------- validation (no server)
@pytest.fixture(scope="module")
def model_set(models):
    return ModelSet(models)


def _request(model_set, **kwargs):
    base = dict(model="small", class_label=0, prompt="", method="sjd", seed=0, num_images=1, guidance_scale=4.0,
                top_k=0, top_p=1.0, temperature=1.0, live_preview=True, options={})
    return validate_request(model_set, DemoLimits(), **{**base, **kwargs})


def test_valid_request_passes(model_set):
    r = _request(model_set, options={"window": 8, "init": "repeat_horizontal", "coupling": None}, class_label="2")
    assert r.class_label == 2 and dict(r.options) == {"window": 8, "init": "repeat_horizontal"}
    assert _request(model_set, class_label="class3").class_label == 3
    assert _request(model_set, class_label="1: class1").class_label == 1
    # The window box also offers "auto" (cost-aware windows), so it hands over text: numbers in it still count.
    assert dict(_request(model_set, options={"window": "auto"}).options) == {"window": "auto"}
    assert dict(_request(model_set, options={"window": " 8"}).options) == {"window": 8}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"options": {"window": 0}}, "sjd option window must be an integer in [1, 64], got 0"),
    ({"options": {"window": 65}}, "sjd option window must be an integer in [1, 64], got 65"),
    ({"options": {"window": 3.5}}, "sjd option window must be an integer in [1, 64], got 3.5"),
    ({"options": {"window": "fast"}}, "sjd option window must be an integer in [1, 64] or one of auto; got 'fast'"),
    ({"options": {"window": "8.5"}}, "sjd option window must be an integer in [1, 64], got 8.5"),
    ({"options": {"init": "zeros"}}, "sjd option init must be one of random, repeat_horizontal"),
    ({"method": "mc-sjd", "options": {"coupling": "none"}}, "mc-sjd option coupling must be one of maximal, gumbel"),
    ({"num_images": 5}, "num_images must be an integer in [1, 4], got 5"),
    ({"num_images": 0}, "num_images must be an integer in [1, 4], got 0"),
    ({"top_k": 65}, "top_k (0 = off) must be an integer in [0, 64], got 65"),
    ({"top_k": -1}, "top_k (0 = off) must be an integer in [0, 64]"),
    ({"guidance_scale": 20.5}, "guidance_scale must be a number in [0, 20], got 20.5"),
    ({"guidance_scale": float("nan")}, "guidance_scale must be a number in [0, 20], got nan"),
    ({"top_p": 0.0}, "top_p must be a number in (0, 1], got 0"),
    ({"temperature": -0.1}, "temperature (0 = greedy) must be a number in [0, 5]"),
    ({"seed": -1}, "seed must be an integer in [0, 2147483647], got -1"),
    ({"seed": 2**40}, "seed must be an integer in [0, 2147483647], got 1099511627776"),
    ({"seed": True}, "seed must be an integer"),
    ({"class_label": 4}, "class_label must be a class id in [0, 3] or a class name"),
    ({"class_label": "../etc/passwd"}, "class_label must be a class id in [0, 3]"),
    ({"class_label": "²"}, "class_label must be a class id in [0, 3]"),
    ({"class_label": [1]}, "class_label must be a class id in [0, 3]"),
    ({"model": "../../../etc/passwd"}, "model: '../../../etc/passwd' is not one of this demo's models: small, "),
    ({"model": "/work/main/arvis/weights/llamagen-c2i-photos"}, "is not one of this demo's models"),
    ({"method": "lookahead"}, "method: 'lookahead' does not run on model 'small'; choose one of ar, gsd, mc-sjd, "
                              "pjd, sjd, sjd-pac, speculative, zipar"),
    ({"method": "code"}, "method: 'code' does not run on model 'small'"),
    ({"live_preview": "yes"}, "live_preview must be true or false"),
])
def test_invalid_inputs_are_refused_with_a_clear_message(model_set, kwargs, message):
    with pytest.raises(DemoInputError) as info:
        _request(model_set, **kwargs)
    assert message in str(info.value)


def test_prompt_limits_on_a_text_model():
    models = ModelSet({"t2i": small_t2i_pipeline})  # a loader: built on first use
    base = dict(model="t2i", class_label=None, method="ar", seed=0, num_images=1, guidance_scale=1.0, top_k=0,
                top_p=1.0, temperature=1.0, live_preview=False, options={})
    assert validate_request(models, DemoLimits(), prompt="  a red house  ", **base).prompt == "a red house"
    for prompt, message in [("", "prompt: model 't2i' is text-conditional; write a prompt (1..200 characters)"),
                            ("x" * 201, "prompt must be at most 200 characters, got 201"),
                            ("bell\x07", "prompt must not contain control characters"),
                            (None, "write a prompt")]:
        with pytest.raises(DemoInputError, match=None) as info:
            validate_request(models, DemoLimits(), prompt=prompt, **base)
        assert message in str(info.value)


def test_limits_are_validated():
    with pytest.raises(ValueError, match="DemoLimits.window"):
        DemoLimits(window=(0, 8))
    with pytest.raises(ValueError, match="DemoLimits.max_images"):
        DemoLimits(max_images=0)
    with pytest.raises(ValueError, match="DemoLimits.top_p_max"):
        DemoLimits(top_p_max=1.5)


def test_method_options_come_from_the_method_declarations():
    from arvis.utils.modes import BATCH_MODES, COUPLINGS, JACOBI_INITS

    sjd = {s.name: s for s in method_option_specs("sjd")}
    assert sjd["window"].kind == "int" and sjd["window"].default == 16
    assert sjd["init"].choices == JACOBI_INITS
    assert sjd["coupling"].choices == COUPLINGS and sjd["batch_mode"].choices == BATCH_MODES
    assert "jacobi_interval" not in sjd  # a (l, r) tuple: keeps its default in the demo
    mc = {s.name: s for s in method_option_specs("mc-sjd")}
    assert mc["coupling"].default == "maximal" and "none" not in mc["coupling"].choices
    assert method_option_specs("ar", "token") == []
    assert [s.name for s in method_option_specs("ar", "continuous")] == ["final_std"]  # MAR's causal baseline


def test_acceptance_is_a_choice_and_only_the_chosen_rules_parameters_apply():
    from arvis.utils.modes import ACCEPTANCE_KINDS as RULES

    for method in ("sjd", "mc-sjd", "speculative"):
        specs = {s.name: s for s in method_option_specs(method)}
        assert specs["acceptance"].kind == "choice" and specs["acceptance"].choices == RULES
        defaults = {s.name: s.default for s in specs.values()}
        shown = {rule: sorted(n for n in ("k", "delta", "lam", "ranks", "gap")
                              if specs[n].applies({"acceptance": rule}, defaults)) for rule in RULES}
        assert shown == {"exact": [], "lantern": ["delta", "k"], "lantern++": ["k", "lam"], "bounded": ["delta", "k"],
                         "gsd": ["gap", "k", "ranks"]}
        assert specs["window"].applies({}, defaults)


def test_speculative_and_lantern_validate_with_the_pipelines_resources(model_set):
    r = _request(model_set, method="speculative", options={"window": 3})
    assert dict(r.options) == {"window": 3}
    r = _request(model_set, method="sjd", options={"acceptance": "lantern", "k": 4, "delta": 0.2, "lam": 9.0})
    assert dict(r.options) == {"acceptance": "lantern", "k": 4, "delta": 0.2}  # lam: not LANTERN's parameter
    r = _request(model_set, method="sjd", options={"acceptance": "exact", "delta": 0.5})
    assert dict(r.options) == {"acceptance": "exact"}  # delta does not apply to exact acceptance
    no_draft = ModelSet({"plain": small_pipeline()})  # no draft model: speculative does not run on it
    with pytest.raises(DemoInputError, match="'speculative' does not run on model 'plain'"):
        validate_request(no_draft, DemoLimits(), model="plain", class_label=0, prompt=None, method="speculative",
                         seed=0, num_images=1, guidance_scale=None, top_k=None, top_p=None, temperature=None,
                         live_preview=False, options={})


def test_sampling_inputs_left_out_take_the_models_defaults(models):
    pipe = small_pipeline()
    pipe.sampling_defaults = {"guidance_scale": 2.5, "top_k": 9}
    r = validate_request(ModelSet({"m": pipe}), DemoLimits(), model="m", class_label=0, prompt=None, method="ar",
                         seed=0, num_images=1, guidance_scale=None, top_k=None, top_p=None, temperature=None,
                         live_preview=False, options={})
    assert (r.guidance_scale, r.top_k, r.top_p, r.temperature) == (2.5, 9, 1.0, 1.0)


def test_lantern_and_speculative_run_through_the_api(client):
    out = call(client, method="speculative", opt_window=2, opt_acceptance="lantern", opt_k=4, opt_delta=0.1)
    assert out[4]["method"]["options"] == {"window": 2, "acceptance": "lantern", "k": 4, "delta": 0.1}
    assert out[4]["method"]["lossless"] is False and "(**lossy**)" in out[3]


# ----------------------------------------------------------------------------- layering
def test_only_the_page_imports_gradio_and_the_demo_needs_no_source_checkout():
    """The Gradio-free core lives in the package; only arvis/demo/page.py imports Gradio (at module level),
    and nothing imports the page or ``apps`` at module level."""
    offenders = []
    for path in (ROOT / "arvis").rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in tree.body:  # module level only; imports inside functions are fine
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for n in names:
                if n.split(".")[0] == "apps" or n == "arvis.demo.page" or (
                        n.split(".")[0] in ("gradio", "gradio_client") and path.name != "page.py"):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
    code = ("import sys, arvis.cli as c, arvis.demo.core, arvis.demo.compare; c.build_parser(); "
            "assert 'demo' in c.COMMANDS; print('gradio' in sys.modules, 'apps' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/",
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
    assert "sys.modules" not in (ROOT / "arvis" / "demo" / "command.py").read_text()  # no loading apps/ by path
    assert len((ROOT / "apps" / "demo.py").read_text().splitlines()) < 25  # a thin page


# ----------------------------------------------------------------------------- end to end
def test_generation_returns_both_images_and_the_statistics(client):
    assert list(client.view_api(print_info=False, return_format="dict")["named_endpoints"]) == ["/generate"]
    ar_path, method_path, status, table, stats, hist_path, order_path = call(
        client, method="mc-sjd", opt_window=8, opt_coupling="gumbel", num_images=2, seed=7)
    from PIL import Image

    for path in (ar_path, method_path, hist_path, order_path):
        with Image.open(path) as im:
            assert im.format == "PNG" and min(im.size) >= 64
    with Image.open(ar_path) as a, Image.open(method_path) as m:
        assert a.size == m.size
    assert status.startswith("Done:")
    for row in ("target forwards / image", "step compression", "latency (decode)", "speedup (latency)"):
        assert row in table
    assert "Untrained model" in table
    assert stats["model"] == "small" and stats["seed"] == 7 and stats["num_images"] == 2
    ar, m = stats["ar"], stats["method"]
    assert ar["method"] == "ar" and ar["target_forwards_per_image"] == 64 == ar["tokens_per_image"]
    assert m["method"] == "mc-sjd" and m["options"] == {"window": 8, "coupling": "gumbel"}
    # The method's figures agree with each other: the batch runs at least its mean image's forwards, and the
    # mean of tokens / forwards is at least tokens / (mean forwards) (arithmetic vs harmonic mean).
    assert m["batch_target_forwards"] >= m["target_forwards_per_image"]
    assert m["step_compression"] * m["target_forwards_per_image"] >= m["tokens_per_image"] * (1 - 1e-9)
    assert stats["speedup"] == pytest.approx(ar["decode_latency_s"] / m["decode_latency_s"])
    # Live preview off: the visible runs (whose callback only counts tokens) are the one timing round.
    assert len(ar["latency_rounds_s"]) == 1 == stats["timing_rounds"] and "single decode" in stats["timing"]
    # Same seed on both sides: Gumbel coupling reproduces plain AR token for token (per-sample generators).
    assert stats["tokens_identical_to_ar"] is True


def test_a_text_conditional_model_takes_a_prompt(client):
    out = call(client, model="small-t2i", class_label=None, prompt="a red house by the sea", method="sjd",
               guidance_scale=1.0)
    assert out[4]["condition"] == {"prompt": "a red house by the sea"} and out[4]["model"] == "small-t2i"
    assert os.path.isfile(out[0]) and os.path.isfile(out[1])
    with pytest.raises(gradio_client.exceptions.AppError, match="prompt must be at most 200 characters"):
        call(client, model="small-t2i", prompt="x" * 300)


def test_an_abandoned_request_stops_its_decode(models):
    """Closing the stream (client gone) stops the worker at its next callback; nothing keeps running."""
    from arvis.demo.core import Progress, side_by_side

    model_set = ModelSet({"slow": DemoModel(pipeline=SlowPipeline(small_pipeline(), delay=0.02))})
    request = validate_request(model_set, DemoLimits(), model="slow", class_label=0, prompt=None, method="ar", seed=0,
                               num_images=1, guidance_scale=4.0, top_k=0, top_p=1.0, temperature=1.0,
                               live_preview=False, options={})
    stream = side_by_side(model_set, request, DemoLimits(preview_interval_s=0.01))
    assert isinstance(next(stream), Progress)
    t0 = time.perf_counter()
    stream.close()
    assert time.perf_counter() - t0 < 5
    assert not [t for t in threading.enumerate() if t.name.startswith("arvis-demo-")]


def test_previews_stream_while_tokens_commit(client):
    job = client.submit(model="small", class_label=0, method="sjd", seed=1, num_images=1, live_preview=True,
                        opt_window=4, api_name="/generate")
    final = job.result(timeout=120)
    updates = job.outputs()
    statuses = [u[2] for u in updates if isinstance(u[2], str)]
    assert any("plain AR" in s and "tokens committed" in s for s in statuses), statuses
    assert any("sjd window=4" in s and "tokens committed" in s for s in statuses), statuses
    # At least one preview image per side before the final images (the first callback always renders).
    ar_previews = [u[0] for u in updates[:-1] if isinstance(u[0], str)]
    method_previews = [u[1] for u in updates[:-1] if isinstance(u[1], str)]
    assert len(ar_previews) >= 2 and len(method_previews) >= 2  # blank placeholder + preview(s) + result
    assert final[4]["live_preview"] is True and final[4]["ar"]["previews"] >= 1
    # With previews on, the timing comes from a separate decode without any callback.
    assert len(final[4]["ar"]["latency_rounds_s"]) == 1 and final[4]["ar"]["decode_latency_s"] > 0
    assert any("Timing" in s for s in statuses), statuses


@pytest.mark.parametrize("method", method_names("token"))
def test_every_token_method_is_offered_where_it_runs_and_runs(server, client, models, method):
    """The method choice lists the methods that run on the selected model (its capabilities), no others; each of
    them runs; the others are refused before anything runs."""
    _, url = server
    config = httpx.get(url + "config", timeout=30).json()
    dropdowns = [c["props"] for c in config["components"] if c["props"].get("label") == "method"]
    runs_here = models["small"].get().methods()
    assert [v for _, v in dropdowns[0]["choices"]] == runs_here == ["ar", "gsd", "mc-sjd", "pjd", "sjd", "sjd-pac", "speculative", "zipar"]
    if method not in runs_here:  # mulo needs a low-resolution drafter the test pipeline has not: a clear refusal
        from gradio_client.exceptions import AppError

        with pytest.raises(AppError, match=f"'{method}' does not run on model 'small'"):
            call(client, method=method, seed=3)
        return
    out = call(client, method=method, seed=3)  # speculative: with the model's draft transformer
    assert out[4]["method"]["method"] == method and out[4]["ar"]["tokens_per_image"] == 64
    lossless = out[4]["method"]["lossless"]
    assert ("(**lossy**)" not in out[3]) is lossless


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"opt_window": 65}, "sjd option window must be an integer in [1, 64], got 65"),
    ({"num_images": 9}, "num_images must be an integer in [1, 4], got 9"),
    ({"top_k": 1000}, "top_k (0 = off) must be an integer in [0, 64], got 1000"),
    ({"guidance_scale": 100}, "guidance_scale must be a number in [0, 20], got 100"),
    ({"model": "../../etc/passwd"}, "is not one of this demo's models"),
    ({"method": "nope"}, "method: 'nope' does not run on model 'small'"),
])
def test_bad_inputs_through_the_api_get_clear_errors(client, kwargs, message):
    with pytest.raises(gradio_client.exceptions.AppError) as info:
        call(client, **kwargs)
    assert message in str(info.value)


def test_rest_routes_cannot_skip_the_queue_and_nothing_else_is_served(server):
    demo, url = server
    body = {"data": ["small", 0, "", "ar", 0, 1, 4.0, 0, 1.0, 1.0, False, None, None, None, None]}
    for route in ("gradio_api/run/generate", "gradio_api/api/generate"):
        r = httpx.post(url + route, json=body, timeout=30)
        assert r.status_code == 404 and "join the queue" in r.json()["detail"], (route, r.text)
    for path in ("/etc/passwd", str(ROOT / "pyproject.toml"), "..%2f..%2f..%2fetc%2fpasswd", ".env"):
        r = httpx.get(url + "gradio_api/file=" + path, timeout=30)
        assert r.status_code in (403, 404) and "root:" not in r.text, (path, r.status_code)
    for size in (10, 2 * 2**20):  # the page has no upload widget: the route is closed
        r = httpx.post(url + "gradio_api/upload", files={"files": ("x.bin", b"0" * size)}, timeout=30)
        assert r.status_code == 404, r.text
    r = httpx.get(url + "config", headers={"Origin": "http://evil.example"}, timeout=30)
    assert r.headers.get("access-control-allow-origin") not in ("*", "http://evil.example")
    assert demo.server_name == "127.0.0.1" and demo.share is False
    assert _listening_addresses(demo.server_port) == {"127.0.0.1"}


def _listening_addresses(port: int) -> set[str]:
    """Local addresses listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(name):
            continue
        for line in Path(name).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A = LISTEN
                found.add(socket.inet_ntoa(bytes.fromhex(addr)[::-1]) if len(addr) == 8 else f"ipv6:{addr}")
    if not found:
        pytest.skip("no /proc/net/tcp on this system")
    return found


def test_eight_concurrent_clients_are_all_served(server):
    _, url = server

    def one(seed):
        client = _client(url)
        return call(client, method="sjd", opt_window=8, seed=seed)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(100, 108)))
    assert [r[4]["seed"] for r in results] == list(range(100, 108))
    assert all(r[2].startswith("Done:") and os.path.isfile(r[0]) and os.path.isfile(r[1]) for r in results)


def test_requests_beyond_the_queue_get_queue_full_not_a_crash():
    gated = GatedPipeline(small_pipeline())
    demo = build_demo({"small": DemoModel(pipeline=gated)}, DemoLimits(concurrency_limit=1, max_queue=2))
    url = _serve(demo)
    try:
        client = _client(url)
        jobs = [client.submit(model="small", class_label=0, method="ar", seed=0, api_name="/generate")]
        assert gated.entered.wait(timeout=60)  # the first request holds the only running slot
        jobs += [client.submit(model="small", class_label=0, method="ar", seed=s, api_name="/generate")
                 for s in (1, 2)]
        deadline = time.monotonic() + 30
        while len(demo._queue) < 2 and time.monotonic() < deadline:  # both are waiting in the queue
            time.sleep(0.05)
        assert len(demo._queue) == 2
        overflow = [client.submit(model="small", class_label=0, method="ar", seed=s, api_name="/generate")
                    for s in (3, 4)]
        for job in overflow:
            with pytest.raises(Exception, match="(?i)queue is full"):
                job.result(timeout=60)
        gated.gate.set()
        results = [job.result(timeout=120) for job in jobs]
        assert [r[4]["seed"] for r in results] == [0, 1, 2]
        # Still serving after the overflow.
        assert call(client, method="ar", seed=5)[4]["seed"] == 5
    finally:
        gated.gate.set()
        demo.close()


# ----------------------------------------------------------------------------- the CLI
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_arvis_demo_command_launches_the_app_on_loopback(monkeypatch):
    """`arvis demo` in-process (the launch made non-blocking): tiny-random with its banner, 127.0.0.1."""
    import arvis.demo.page
    from arvis.cli import main

    launched = []
    real_launch = arvis.demo.page.launch

    def non_blocking(demo, **kwargs):
        launched.append((demo, kwargs))
        return real_launch(demo, **kwargs, prevent_thread_lock=True, quiet=True)

    monkeypatch.setattr(arvis.demo.page, "launch", non_blocking)
    monkeypatch.setenv("GRADIO_TEMP_DIR", os.environ.get("GRADIO_TEMP_DIR", ""))  # restored after the test
    port = _free_port()
    assert main(["demo", "--model", "tiny-random", "--port", str(port), "--no-warmup", "--threads", "1"]) == 0
    demo, kwargs = launched[0]
    try:
        assert kwargs == {"host": "127.0.0.1", "port": port, "share": False}
        assert _listening_addresses(port) == {"127.0.0.1"}
        config = httpx.get(f"http://127.0.0.1:{port}/config", timeout=30).json()
        assert any("Untrained model" in str(c.get("props", {}).get("value", "")) for c in config["components"])
        out = _client(f"http://127.0.0.1:{port}/").predict(model="tiny-random", class_label=0, method="sjd",
                                                          live_preview=False, api_name="/generate")
        assert out[4]["ar"]["target_forwards_per_image"] == 256 and os.path.isfile(out[1])
    finally:
        demo.close()


@pytest.mark.slow
def test_arvis_demo_script_serves_on_loopback(tmp_path):
    """The real process, started from another folder: binds 127.0.0.1 only."""
    port = _free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    # Through arvis.cli.main (what the `arvis` script runs); `python -m arvis.cli` would register the
    # optional commands on a second copy of the module.
    main = "import sys; from arvis.cli import main; sys.exit(main())"
    proc = subprocess.Popen([sys.executable, "-c", main, "demo", "--model", "tiny-random", "--port", str(port),
                             "--no-warmup"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/config", timeout=5)
                if r.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.5)
        else:
            pytest.fail("arvis demo did not start")
        assert _listening_addresses(port) == {"127.0.0.1"}
        assert any("Untrained model" in str(c.get("props", {}).get("value", "")) for c in r.json()["components"])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_tile_size_rule():
    from PIL import Image

    from arvis.demo.core import tile_images

    one = tile_images([Image.new("RGB", (64, 64))], 256)
    four = tile_images([Image.new("RGB", (64, 64))] * 4, 256)
    assert one.size == (256, 256)
    assert four.size == (2 * 128 + 4, 2 * 128 + 4)
    assert math.isclose(one.size[0] / 64, 4)


# ----------------------------------------------------------------------------- leftovers (hardening)
def test_an_invalid_input_logs_one_line_and_no_traceback(client, caplog, capfd):
    import logging

    capfd.readouterr()
    with caplog.at_level(logging.WARNING, logger="arvis.demo"):
        with pytest.raises(gradio_client.exceptions.AppError, match="num_images must be"):
            call(client, num_images=99)
    records = [r for r in caplog.records if r.name == "arvis.demo"]
    assert len(records) == 1 and "num_images must be" in records[0].getMessage() and records[0].exc_info is None
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err + captured.out


def test_result_images_are_removed_when_the_server_shuts_down(tmp_path, monkeypatch):
    cache = tmp_path / "gradio-cache"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(cache))  # before the page's components exist
    demo = build_demo({"small": DemoModel(pipeline=small_pipeline())}, DemoLimits())
    url = _serve(demo)
    try:
        out = call(_client(url), method="ar", num_images=1)
        assert os.path.isfile(out[0])
        assert list(cache.rglob("*.png")), "the server cached its result images here"
    finally:
        demo.close()
    assert not list(cache.rglob("*.png")), list(cache.rglob("*"))


def test_a_page_closing_leaves_the_files_of_another_live_page(tmp_path, monkeypatch):
    """Pages sharing a cache folder: the same image is the same cached path (content hash). Closing one page
    must not pull it from under the other (a 403 on its download, seen under load), and the last page to
    close removes it."""
    cache = tmp_path / "gradio-cache"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(cache))
    pages = [build_demo({"small": DemoModel(pipeline=small_pipeline())}, DemoLimits()) for _ in range(2)]
    urls = [_serve(page) for page in pages]
    try:
        first, second = (call(_client(url), method="ar", num_images=1, seed=7) for url in urls)
        assert first[0] == second[0] and os.path.isfile(first[0]), "the same image, cached once for both pages"
        pages[0].close()
        assert os.path.isfile(second[0])
    finally:
        for page in pages:
            page.close()
    assert not list(cache.rglob("*.png")), list(cache.rglob("*"))


# ----------------------------------------------------------------------------- a newcomer's first five minutes
def test_the_examples_and_landing_methods_fit_the_shipped_models():
    """Every entry of arvis/demo/examples.py against its folder's metadata (milliseconds, no weights): each class is
    one of the model's class names, each prompt uses only the words its text encoder knows, each landing spec
    parses and names a method of its kind."""
    from arvis.demo.examples import LANDING_METHODS, MODEL_EXAMPLES
    from arvis.families import folder_capabilities
    from arvis.hub import SHIPPED_PIPELINES, WEIGHTS_DIR
    from arvis.methods.spec import parse_method_specs

    assert set(MODEL_EXAMPLES) <= set(SHIPPED_PIPELINES.values())
    for folder, entry in MODEL_EXAMPLES.items():
        if not (WEIGHTS_DIR / folder / "model_index.json").is_file():
            continue  # not shipped in this installation
        caps = folder_capabilities(WEIGHTS_DIR / folder)
        assert set(entry.get("classes", ())) <= set(caps.class_names), folder
        assert bool(entry.get("classes")) == (caps.conditioning == "class"), folder
        for prompt in entry.get("prompts", ()):
            assert caps.conditioning == "text" and (not caps.vocabulary or set(prompt.split()) <= set(caps.vocabulary))
        if entry.get("method"):
            spec = parse_method_specs(entry["method"])[0]
            caps.check(spec.name, spec.options_dict)
    for kind, texts in LANDING_METHODS.items():
        for text in texts:
            assert parse_method_specs(text)[0].name in method_names(kind)


def test_arvis_demo_lands_on_emoji_names_a_red_apple_and_lossless_mc_sjd():
    """`arvis demo`'s models are described from their folders (no weights load), the first is emoji-names, and the
    page lands on it with "red apple" and MC-SJD with Gumbel coupling; every model lands on a method it runs."""
    from arvis.demo.command import default_models, load_models
    from arvis.demo.core import landing_condition, landing_method
    from arvis.hub import SHIPPED_PIPELINES, shipped_names

    if "emoji-names" not in shipped_names():
        pytest.skip("the shipped emoji-names model is not in this installation")
    t0 = time.perf_counter()
    models = load_models(default_models(), torch.float32, "cpu")
    assert time.perf_counter() - t0 < 30 and not any(m.loaded for m in models.values())
    assert list(models)[0] == "emoji-names" == next(iter(SHIPPED_PIPELINES))
    entry = models["emoji-names"]
    label, _ = landing_condition(entry)
    assert entry.caps().class_names[label] == "red apple"
    assert landing_method(entry.caps(), None, entry.examples.method) == ("mc-sjd", {"coupling": "gumbel"})
    for name, m in models.items():
        method, _ = landing_method(m.caps(), None, m.examples.method)
        assert method in m.caps().methods() and method != "ar", name
        if m.caps().conditioning == "text":
            assert landing_condition(m)[1], name  # an example prompt is filled in
    assert landing_method(models["mar-causal"].caps())[0] == "cspd-exact"
    assert not any(m.loaded for m in models.values())


def test_the_page_is_built_from_metadata_before_any_weights_load(tmp_path, monkeypatch):
    """A model described by its capabilities is not loaded to build the page; the page's method choice holds the
    methods that run on the first model, and a request for a method that does not run on it is refused before
    anything loads."""
    from arvis.demo.core import ModelExamples

    loads = []

    def loader():
        loads.append(1)
        pipe = small_pipeline(num_classes=4)
        pipe.sampling_defaults = {"guidance_scale": 3.0}  # what its folder's sampling_defaults.json would say
        return pipe

    caps = small_pipeline(num_classes=4).capabilities  # no draft model: speculative does not run on it
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "cache"))
    entry = DemoModel(loader=loader, capabilities=caps, sampling_defaults={"guidance_scale": 3.0},
                      examples=ModelExamples(classes=("class2",)))
    demo = build_demo({"lazy": entry}, DemoLimits(), warm_up=False)
    url = _serve(demo)
    try:
        assert not loads
        config = httpx.get(url + "config", timeout=30).json()
        props = {c["props"].get("label"): c["props"] for c in config["components"] if "props" in c}
        assert [v for _, v in props["method"]["choices"]] == caps.methods() == ["ar", "gsd", "mc-sjd", "pjd", "sjd", "sjd-pac", "zipar"]
        assert props["method"]["value"] == "mc-sjd" and props["class"]["value"] == 2
        assert any(p.get("placeholder") == "model default: 3" for p in props.values())
        client = _client(url)
        with pytest.raises(gradio_client.exceptions.AppError, match="'speculative' does not run on model 'lazy'"):
            client.predict(model="lazy", class_label=0, method="speculative", api_name="/generate")
        assert not loads, "refused from the metadata, before anything loaded"
        out = client.predict(model="lazy", class_label=2, method="mc-sjd", live_preview=False, api_name="/generate")
        assert loads == [1] and out[4]["sampling"]["guidance_scale"] == 3.0
        # opt_coupling left out: what the page fills in for MC-SJD (Gumbel coupling), so AR's very tokens.
        assert out[4]["method"]["options"] == {"coupling": "gumbel"} and out[4]["tokens_identical_to_ar"] is True
        assert out[2].endswith("tokens identical to AR: yes.")
    finally:
        demo.close()


def test_a_text_model_shows_the_words_it_knows_and_refuses_others_before_running():
    from arvis.demo.core import ModelExamples, check_choice
    from arvis.demo.page import prompt_hint
    from tests.pipelines.tiny import llamagen_t2i

    pipe = llamagen_t2i()
    vocabulary = pipe.capabilities.vocabulary
    models = ModelSet({"t2i": DemoModel(loader=lambda: pytest.fail("nothing loads to check a prompt"),
                                        capabilities=pipe.capabilities,
                                        examples=ModelExamples(prompts=("a red circle on grass",)))})
    info = models.info("t2i")
    assert info["vocabulary"] == list(vocabulary) and not info["class_conditional"]
    hint = prompt_hint(info)
    assert f"knows {len(vocabulary)} words" in hint and all(w in hint for w in vocabulary)
    choice = check_choice(models, DemoLimits(), model="t2i", class_label=None, prompt="A red circle, on grass",
                          method="sjd", options={})
    assert choice.prompt == "A red circle, on grass"
    with pytest.raises(DemoInputError, match=r"does not know the word\(s\) 'house'; it knows only these 7: a, red"):
        check_choice(models, DemoLimits(), model="t2i", class_label=None, prompt="a red house", method="sjd",
                     options={})


def test_method_notes_and_speed_words_match_the_method():
    from arvis.demo.core import method_promise, speed_words

    assert speed_words(1 / 1.23) == "1.23× slower" and speed_words(1.9) == "1.90× faster"
    assert speed_words(1.001) == "as fast as plain AR"
    gumbel = method_promise("mc-sjd", "token", {"coupling": "gumbel"})
    assert gumbel.lossless and gumbel.identical and "Gumbel coupling" in gumbel.note
    maximal = method_promise("mc-sjd", "token", {})  # its declared default: maximal coupling
    assert maximal.lossless and not maximal.identical and "coupling=maximal" in maximal.note
    assert not method_promise("sjd", "token", {"acceptance": "lantern"}).lossless
    assert method_promise("zipar", "token", {}).label == "**lossy**"
    spec = method_promise("speculative", "token", {})
    assert spec.lossless and not spec.identical and "Gumbel" not in spec.note
    mulo = method_promise("mulo", "token", {"coupling": "gumbel"})  # its low-resolution drafter draws too
    assert mulo.lossless and not mulo.identical and "low-resolution" in mulo.note
    exact = method_promise("cspd-exact", "continuous", {})
    assert exact.lossless and not exact.identical and exact.label == "exact in distribution"
    assert "distributional claim" in exact.note and "Gumbel" not in exact.note
    assert not method_promise("cspd", "continuous", {}).lossless


def test_a_request_during_the_warm_up_waits_with_a_message_then_runs(tmp_path, monkeypatch):
    """The page is served while a model still loads in the background: a request says it waits for the warm-up,
    then runs; the warm-up takes no step while a request runs; the page shows the progress."""
    from arvis.demo.core import WarmUp

    gate = threading.Event()
    pipe = small_pipeline(num_classes=4)

    def slow_loader():
        assert gate.wait(timeout=120), "gate never opened"
        return pipe

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "cache"))
    models = {"ready": DemoModel(pipeline=small_pipeline(num_classes=4)),
              "slow": DemoModel(loader=slow_loader, capabilities=pipe.capabilities)}
    demo = build_demo(models, DemoLimits(), warm_up=True)
    warmup = demo.arvis_warmup
    assert isinstance(warmup, WarmUp) and not warmup.started
    url = _serve(demo)  # launch() starts the warm-up once the page is served
    try:
        deadline = time.monotonic() + 120
        while warmup.busy() != "loading slow":
            assert time.monotonic() < deadline, warmup.status()
            time.sleep(0.05)
        assert "step 4/6: loading slow" in warmup.status() and "1/2 models loaded" in warmup.status()
        job = _client(url).submit(model="ready", class_label=1, method="sjd", live_preview=False, api_name="/generate")
        deadline = time.monotonic() + 60
        while not any("Waiting: the warm-up is loading slow" in str(u[2]) for u in job.outputs()):
            assert time.monotonic() < deadline and not job.done(), job.outputs()
            time.sleep(0.05)
        gate.set()  # the load ends; the request runs, and the warm-up waits for it
        out = job.result(timeout=120)
        assert out[2].startswith("Done:")
        deadline = time.monotonic() + 120
        while not warmup.finished:
            assert time.monotonic() < deadline, warmup.status()
            time.sleep(0.05)
        assert warmup.status() == "Warm-up done: 2/2 models loaded." and not warmup.failed
    finally:
        gate.set()
        demo.close()


def test_the_warm_up_holds_its_steps_while_a_request_runs():
    from arvis.demo.core import WarmUp

    models = ModelSet({"a": small_pipeline(), "b": small_pipeline(seed=1)})
    warmup = WarmUp(models)
    assert [what for _, what, _ in warmup.steps] == ["loading", "warming up ar on", "warming up mc-sjd on"] * 2
    with warmup.request():  # a request holds the warm-up from its first step
        warmup.start()
        time.sleep(0.5)
        assert warmup.done == 0 and "waiting for a request to finish" in warmup.status()
    deadline = time.monotonic() + 120
    while not warmup.finished:
        assert time.monotonic() < deadline, warmup.status()
        time.sleep(0.05)
    warmup.stop()


def test_a_request_stops_a_warm_up_decode_at_its_next_forward():
    """A warm-up decode (64 forwards of at least 50 ms here) gives way to a request within a forward or so; its step
    is taken again after the request."""
    from arvis.demo.core import WarmUp

    warmup = WarmUp(ModelSet({"slow": DemoModel(pipeline=SlowPipeline(small_pipeline()))}))
    warmup.start()
    deadline = time.monotonic() + 60
    while warmup.busy() != "warming up ar on slow":
        assert time.monotonic() < deadline, warmup.status()
        time.sleep(0.01)
    time.sleep(0.3)  # a few forwards into the decode
    t0 = time.perf_counter()
    with warmup.request():
        waited = time.perf_counter() - t0
        assert warmup.busy() is None and warmup.done == 1  # the decode stopped; its step is not counted
    assert waited < 2.0, waited
    deadline = time.monotonic() + 120
    while not warmup.finished:
        assert time.monotonic() < deadline, warmup.status()
        time.sleep(0.05)
    assert warmup.done == 3 and not warmup.failed
    warmup.stop()


def test_launch_gives_the_command_line_hint_not_gradios(capsys):
    """Gradio's own banner says "set share=True in launch()", wrong for `arvis demo` users: launch says --share."""
    demo = build_demo({"small": small_pipeline()}, DemoLimits())
    try:
        launch(demo, port=None, prevent_thread_lock=True)
        out = capsys.readouterr().out
        assert f"Serving the demo on {demo.local_url}" in out and "`arvis demo --share`" in out
        assert "set `share=True` in `launch()`" not in out
    finally:
        demo.close()
