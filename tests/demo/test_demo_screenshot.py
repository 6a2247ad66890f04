"""The demo in a real browser: headless Chromium drives its first screen and one generation.

Debian's ``chromium`` and ``chromium-driver`` drive the page through the W3C WebDriver protocol (plain HTTP to
chromedriver, no extra Python package); the test skips, saying how to install them, when they are absent. The
viewport is pinned to 1280x800 (Chrome DevTools' device metrics), the laptop screen a newcomer opens it on.

First screen: the Generate button is above the fold; the page lands on the first model, its first example class
and MC-SJD with Gumbel coupling (the method note says what that promises); the warm-up shows its progress. Then
one generation: both images, the statistics and the plots load, and the status says the tokens are AR's own.
Switching to the text model re-fills the method choice with the methods that run on it and shows its example
prompt and the words it knows.

By default the page serves tiny pipelines (``tests/pipelines/tiny.py``, a few seconds in all). With
``ARVIS_UPDATE_SCREENSHOT=1`` it serves what ``arvis demo`` serves (every shipped model, warmed up in the
background) and writes the two screenshots the docs show::

    ARVIS_UPDATE_SCREENSHOT=1 python -m pytest tests/demo/test_demo_screenshot.py

- ``docs/demo-first-screen.png``: the first screen at 1280x800, while the models warm up;
- ``docs/demo-lossless-generation.png``: the whole page after the landing generation (lossless, identical to AR).

Chromium runs with ``--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
--disable-background-networking --disable-component-update --disable-sync`` and a fresh profile: without them it
waits on the network this machine lacks.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests import REPO_ROOT as ROOT

gr = pytest.importorskip("gradio")
httpx = pytest.importorskip("httpx")

DOCS_FIRST = ROOT / "docs" / "demo-first-screen.png"
DOCS_DONE = ROOT / "docs" / "demo-lossless-generation.png"
UPDATE = os.environ.get("ARVIS_UPDATE_SCREENSHOT") == "1"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1"]
SCREEN = (1280, 800)

pytestmark = [pytest.mark.timeout(1800 if UPDATE else 300)]


def _find_browser() -> tuple[str | None, str | None]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        "/usr/lib/chromium/chromedriver" if os.path.exists("/usr/lib/chromium/chromedriver") else None)
    return browser, driver


@pytest.fixture(scope="module")
def chromium() -> tuple[str, str]:
    """Paths of chromium and chromedriver; the test skips when they are absent."""
    browser, driver = _find_browser()
    if not (browser and driver):
        pytest.skip("headless Chromium is not installed (Debian: apt-get install -y chromium chromium-driver)")
    return browser, driver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDriver:
    """The few W3C WebDriver commands the test needs, over plain HTTP to chromedriver."""

    def __init__(self, base: str):
        self.http = httpx.Client(base_url=base, timeout=120, trust_env=False)
        self.session: str | None = None

    def _call(self, method: str, path: str, body: dict | None = None):
        r = self.http.request(method, path, json=body)
        value = r.json().get("value")
        if r.status_code != 200:
            raise RuntimeError(f"webdriver {method} {path}: {r.status_code} {value}")
        return value

    def start(self, browser: str, profile: Path) -> None:
        args = [*CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={SCREEN[0]},{SCREEN[1]}"]
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome",
                                                 "goog:chromeOptions": {"binary": browser, "args": args}}}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def cmd(self, method: str, path: str, body: dict | None = None):
        return self._call(method, f"/session/{self.session}{path}", body)

    def js(self, script: str, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def viewport(self, width: int, height: int) -> None:
        """Pin the page's viewport (what ``window.innerWidth/innerHeight`` and a screenshot are) to ``width x height``."""
        self.cmd("POST", "/goog/cdp/execute", {"cmd": "Emulation.setDeviceMetricsOverride", "params": {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}})

    def element(self, css: str) -> str:
        found = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        return next(iter(found.values()))

    def choose(self, dropdown_id: str, choice: str) -> None:
        """Open a Gradio dropdown and click one of its options, as a user does."""
        self.cmd("POST", f"/element/{self.element(f'#{dropdown_id} input')}/click", {})
        option = f'#{dropdown_id} li[role=option][aria-label="{choice}"]'
        self.wait_for(f"return document.querySelector('{option}') !== null;", 30, f"{choice!r} in the list")
        self.cmd("POST", f"/element/{self.element(option)}/click", {})

    def screenshot(self) -> bytes:
        return base64.b64decode(self.cmd("GET", "/screenshot"))

    def wait_for(self, script: str, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(script)
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; page text: "
                             f"{self.js('return document.body.innerText')[:2000]}")

    def quit(self) -> None:
        if self.session:
            try:
                self.cmd("DELETE", "")
            except (RuntimeError, httpx.HTTPError):
                pass
        self.http.close()


LOADED = """
const ids = ['arvis-ar-image', 'arvis-method-image', 'arvis-histogram', 'arvis-decode-order'];
const out = {};
for (const id of ids) {
  const img = document.querySelector('#' + id + ' img');
  out[id] = img && img.complete && img.naturalWidth > 0 ? [img.naturalWidth, img.naturalHeight] : null;
}
return Object.values(out).every(v => v) && out;
"""
FIRST_SCREEN = """
const box = id => { const r = document.getElementById(id).getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const value = css => { const e = document.querySelector(css); return e ? e.value : null; };
const text = id => { const e = document.getElementById(id); return e ? e.innerText : null; };
return {window: [window.innerWidth, window.innerHeight], scroll: [window.scrollX, window.scrollY],
        generate: box('arvis-generate'), model: value('#arvis-model input'), cls: value('#arvis-class input'),
        method: value('#arvis-method input'), note: text('arvis-method-note'),
        method_label: text('arvis-method-image'), warmup: text('arvis-warmup')};
"""
OPTIONS_SHOWN = "return [...document.querySelectorAll('#arvis-method li[role=option]')].map(li => li.getAttribute('aria-label'));"


def _tiny_models() -> dict:
    from arvis.demo.core import DemoModel, ModelExamples
    from tests.pipelines.tiny import llamagen_c2i, llamagen_t2i

    return {"tiny-c2i": DemoModel(pipeline=llamagen_c2i(), untrained=True, description="tiny test model",
                                  examples=ModelExamples(classes=("owl", "cat"))),
            "tiny-t2i": DemoModel(loader=llamagen_t2i, untrained=True, description="tiny text model",
                                  examples=ModelExamples(prompts=("a red circle on grass",)))}


def _shipped_models() -> dict:
    import torch

    from arvis.demo.command import default_models, load_models

    return load_models(default_models(), torch.float32, "cpu")


def _save(png: bytes, path: Path) -> None:
    from PIL import Image

    tmp = path.with_suffix(".png.tmp")
    tmp.write_bytes(png)
    with Image.open(tmp) as im:
        assert im.format == "PNG" and im.size[0] >= SCREEN[0] - 20
        im.load()
        colours = len(im.convert("RGB").resize((200, 200)).getcolors(200 * 200))
    assert colours > 50  # a rendered page, not a blank frame
    os.replace(tmp, path)


def test_first_screen_and_one_lossless_generation(chromium, tmp_path, monkeypatch):
    import torch

    from arvis.demo.core import DemoLimits, landing_condition, landing_method
    from arvis.demo.page import build_demo, launch

    torch.set_num_threads(1)
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio-cache"))  # a cache of its own, as arvis demo's
    models = _shipped_models() if UPDATE else _tiny_models()
    names = list(models)
    first = models[names[0]]
    caps = first.caps()
    class0 = caps.class_names[landing_condition(first)[0]]
    method0, options0 = landing_method(caps, None, first.examples.method)
    assert (method0, options0) == ("mc-sjd", {"coupling": "gumbel"})
    demo = build_demo(models, DemoLimits(), warm_up=True)
    assert not UPDATE or not any(m.loaded for m in models.values()), "the page is built before any weights load"
    port = _free_port()
    launch(demo, port=port, prevent_thread_lock=True, quiet=True)
    browser, driver_path = chromium
    driver_port = _free_port()
    chromedriver = subprocess.Popen([driver_path, f"--port={driver_port}"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
    driver = WebDriver(f"http://127.0.0.1:{driver_port}")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if driver.http.get("/status").json()["value"]["ready"]:
                    break
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            assert time.monotonic() < deadline, "chromedriver did not start"
            time.sleep(0.2)
        driver.start(browser, tmp_path / "profile")
        driver.viewport(*SCREEN)
        driver.cmd("POST", "/url", {"url": f"http://127.0.0.1:{port}/"})
        driver.wait_for("const b = document.getElementById('arvis-generate'); return b && !b.disabled;", 120,
                        "the Generate button")
        # The page fills in the landing method's options when it loads (the method image's label shows them).
        driver.wait_for("const e = document.getElementById('arvis-method-image'); "
                        "return e && e.innerText.includes('coupling=gumbel');", 60, "the landing method's options")
        # The warm-up banner shows its progress (or is gone: done), the placeholders have drawn.
        driver.wait_for("const e = document.getElementById('arvis-warmup'); "
                        "return !e || e.offsetParent === null || e.innerText.includes('step');", 60,
                        "the warm-up's progress")
        driver.wait_for("return ['arvis-ar-image', 'arvis-method-image'].every(id => { "
                        "const i = document.querySelector('#' + id + ' img'); return i && i.complete && "
                        "i.naturalWidth > 0; });", 60, "the placeholder images")
        first_screen = driver.js(FIRST_SCREEN)
        first_png = driver.screenshot()

        driver.js("document.getElementById('arvis-generate').click();")
        timeout = 900 if UPDATE else 120
        driver.wait_for("return document.getElementById('arvis-status').innerText.includes('Done:');", timeout,
                        "the generation to finish")
        driver.wait_for("return document.getElementById('arvis-stats').innerText.includes('step compression');",
                        30, "the statistics table")
        loaded = driver.wait_for(LOADED, 60, "both images and both plots to load")
        status = driver.js("return document.getElementById('arvis-status').innerText")
        stats = driver.js("return document.getElementById('arvis-stats').innerText")
        page = driver.js("return [document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        driver.viewport(SCREEN[0], max(SCREEN[1], page[1] + 40))
        time.sleep(0.5)  # let the layout settle after the resize
        done_png = driver.screenshot()
        driver.viewport(*SCREEN)

        # Switching model: the method choice holds the methods that run on the text model, and its prompt box
        # shows an example prompt and the words it knows.
        text_model = next((n for n in names if not models[n].caps().conditioning == "class"), None)
        switched = None
        if text_model is not None:
            driver.choose("arvis-model", text_model)
            driver.wait_for("const e = document.querySelector('#arvis-prompt textarea'); "
                            "return e && e.offsetParent !== null && e.value.length > 0;", 30, "the example prompt")
            driver.cmd("POST", f"/element/{driver.element('#arvis-method input')}/click", {})
            shown = driver.wait_for(f"const o = (() => {{{OPTIONS_SHOWN}}})(); return o.length > 0 && o;", 30,
                                    "the method list")
            switched = {"prompt": driver.js("return document.querySelector('#arvis-prompt textarea').value"),
                        "hint": driver.js("return document.getElementById('arvis-prompt-hint').innerText"),
                        "methods": shown}
        warmed_up = demo.arvis_warmup.finished
    finally:
        driver.quit()
        chromedriver.terminate()
        try:
            chromedriver.wait(timeout=30)
        except subprocess.TimeoutExpired:
            chromedriver.kill()
        demo.close()

    # The first screen: Generate above the fold at 1280x800; the landing model, class and method.
    width, height = first_screen["window"]
    assert (width, height) == SCREEN and first_screen["scroll"] == [0, 0]
    left, top, right, bottom = first_screen["generate"]
    assert 0 <= left < right <= width and 0 <= top < bottom <= height, first_screen
    assert first_screen["model"] == names[0]
    assert first_screen["cls"].endswith(class0) and first_screen["method"] == "mc-sjd", first_screen
    assert "Gumbel coupling" in first_screen["note"] and "reproduces AR's tokens" in first_screen["note"]
    # The warm-up banner: its progress, or gone once the warm-up is done (the tiny models' is over in a moment).
    if UPDATE:
        assert "step" in first_screen["warmup"], first_screen
    else:
        assert first_screen["warmup"] is None or "step" in first_screen["warmup"], first_screen
        assert warmed_up
    # One generation: lossless, the tokens AR's own.
    assert all(v[0] >= 16 for v in loaded.values()), loaded
    assert "tokens identical to AR: yes" in status, status
    assert "lossless, AR's tokens" in stats and "speedup (latency)" in stats
    assert re.search(r"\(\d+\.\d\d× (faster|slower)\)|\(as fast as plain AR\)", status), status
    assert not re.search(r"0\.\d+× faster", status), status  # a slowdown is "1.23× slower"
    if switched is not None:
        text_caps = models[text_model].caps()
        assert switched["methods"] == text_caps.methods(), switched
        assert switched["prompt"] == models[text_model].examples.prompts[0]
        assert all(word in switched["hint"] for word in text_caps.vocabulary) and "knows" in switched["hint"]
    for png, path in ((first_png, tmp_path / "first.png"), (done_png, tmp_path / "done.png")):
        _save(png, path)
    if UPDATE:
        shutil.copyfile(tmp_path / "first.png", DOCS_FIRST)
        shutil.copyfile(tmp_path / "done.png", DOCS_DONE)
