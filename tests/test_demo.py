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

ROOT = Path(__file__).resolve().parent.parent


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


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"options": {"window": 0}}, "sjd option window must be an integer in [1, 64], got 0"),
    ({"options": {"window": 65}}, "sjd option window must be an integer in [1, 64], got 65"),
    ({"options": {"window": 3.5}}, "sjd option window must be an integer in [1, 64], got 3.5"),
    ({"options": {"window": "8"}}, "sjd option window must be an integer"),
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

    class Slow(GatedPipeline):
        def __call__(self, *args, callback_on_step_end=None, **kwargs):
            def slow(*a):
                time.sleep(0.02)
                return callback_on_step_end(*a)

            return self._pipe(*args, callback_on_step_end=slow, **kwargs)

    model_set = ModelSet({"slow": DemoModel(pipeline=Slow(small_pipeline()))})
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
def test_every_token_method_is_offered_and_runs(server, client, method):
    _, url = server
    config = httpx.get(url + "config", timeout=30).json()
    dropdowns = [c["props"] for c in config["components"] if c["props"].get("label") == "method"]
    assert [v for _, v in dropdowns[0]["choices"]] == method_names()
    if method in ("mulo", "mulo-local"):  # the test pipeline has no low-resolution drafter: a clear refusal
        from gradio_client.exceptions import AppError

        with pytest.raises(AppError, match=f"'{method}' does not run on model 'small'"):
            call(client, method=method, seed=3)
        return
    out = call(client, method=method, seed=3)  # speculative: with the model's draft transformer
    assert out[4]["method"]["method"] == method and out[4]["ar"]["tokens_per_image"] == 64
    lossless = out[4]["method"]["lossless"]
    assert ("(lossless)" if lossless else "(**lossy**)") in out[3]


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
