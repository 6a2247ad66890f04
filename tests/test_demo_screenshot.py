"""A headless-browser screenshot of the demo page after one generation (Debian chromium + chromedriver).

The test installs ``chromium`` and ``chromium-driver`` with apt-get when they are missing (root only;
it skips, saying why, when that is not possible), starts the demo on 127.0.0.1 with the shipped
models (or the untrained tiny model when none is shipped yet), drives the page through the W3C
WebDriver protocol (plain HTTP to chromedriver, no extra Python package), clicks Generate, waits for
both images, the statistics table and the two plots, checks in the DOM that each is loaded and
inside the window, and takes the screenshot.

The PNG goes to the test's temporary folder; with ``ARVIS_UPDATE_SCREENSHOT=1`` it also replaces
``docs/demo-screenshot.png``. Chromium runs with ``--headless --no-sandbox --disable-gpu
--disable-quic --no-first-run --disable-background-networking --disable-component-update
--disable-sync`` and a fresh profile: without them it waits on the network this machine lacks.

Slow (a browser start and a real generation): run with ``pytest -m slow tests/test_demo_screenshot.py``.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

gr = pytest.importorskip("gradio")
httpx = pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parent.parent
DOCS_PNG = ROOT / "docs" / "demo-screenshot.png"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1"]
WINDOW = (1440, 1000)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _find_browser() -> tuple[str | None, str | None]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        "/usr/lib/chromium/chromedriver" if os.path.exists("/usr/lib/chromium/chromedriver") else None)
    return browser, driver


@pytest.fixture(scope="module")
def chromium() -> tuple[str, str]:
    """Paths of chromium and chromedriver, installed with apt-get if missing."""
    browser, driver = _find_browser()
    if browser and driver:
        return browser, driver
    if shutil.which("apt-get") is None:
        pytest.skip("chromium/chromedriver missing and apt-get is not available to install them")
    if os.geteuid() != 0:
        pytest.skip("chromium/chromedriver missing; installing them with apt-get needs root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "chromium", "chromium-driver"]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:  # stale package lists: refresh once and retry
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, text=True, timeout=600)
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    browser, driver = _find_browser()
    if result.returncode != 0 or not (browser and driver):
        pytest.skip(f"could not install chromium with apt-get (exit {result.returncode}): {result.stderr[-500:]}")
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
        args = [*CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}"]
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome",
                                                 "goog:chromeOptions": {"binary": browser, "args": args}}}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def cmd(self, method: str, path: str, body: dict | None = None):
        return self._call(method, f"/session/{self.session}{path}", body)

    def js(self, script: str, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait_for(self, script: str, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(script)
            if value:
                return value
            time.sleep(0.5)
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
return out;
"""
BOXES = """
const ids = ['arvis-ar-image', 'arvis-method-image', 'arvis-stats', 'arvis-histogram', 'arvis-decode-order',
             'arvis-status'];
const out = {};
for (const id of ids) { const r = document.getElementById(id).getBoundingClientRect();
  out[id] = [r.left, r.top, r.right, r.bottom]; }
out.window = [window.innerWidth, window.innerHeight];
out.page = [document.documentElement.scrollWidth, document.documentElement.scrollHeight];
return out;
"""


def test_screenshot_shows_both_images_and_the_statistics(chromium, tmp_path):
    import torch

    from arvis.demo.command import default_models, load_models
    from arvis.demo.core import DemoLimits, method_option_specs
    from arvis.demo.page import _default_method, build_demo, launch
    from arvis.methods import available_methods

    torch.set_num_threads(1)
    models = load_models(default_models(), torch.float32, "cpu")
    demo = build_demo(models, DemoLimits())
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
            time.sleep(0.3)
        driver.start(browser, tmp_path / "profile")
        driver.cmd("POST", "/url", {"url": f"http://127.0.0.1:{port}/"})
        driver.wait_for("const b = document.getElementById('arvis-generate'); return b && !b.disabled;", 120,
                        "the Generate button")
        # The page fills in the shown method's option defaults on load; let that land before clicking.
        ints = [s for s in method_option_specs(_default_method(available_methods())) if s.kind == "int"]
        if ints:
            driver.wait_for(f"return [...document.querySelectorAll('input')].some(i => i.value === "
                            f"'{ints[0].default}');", 60, "the method option defaults")
        driver.js("document.getElementById('arvis-generate').click();")
        driver.wait_for("return document.getElementById('arvis-status').innerText.includes('Done:');", 300,
                        "the generation to finish")
        driver.wait_for("return document.getElementById('arvis-stats').innerText.includes('step compression');",
                        30, "the statistics table")
        loaded = driver.wait_for(f"const o = (() => {{{LOADED}}})(); return Object.values(o).every(v => v) && o;",
                                 60, "all four images to load")
        page = driver.js(BOXES)["page"]
        driver.cmd("POST", "/window/rect", {"width": WINDOW[0], "height": max(WINDOW[1], page[1] + 140)})
        driver.js("window.scrollTo(0, 0);")
        time.sleep(1.0)  # let the layout settle after the resize
        boxes = driver.js(BOXES)
        text = driver.js("return document.body.innerText")
        png = base64.b64decode(driver.cmd("GET", "/screenshot"))
    finally:
        driver.quit()
        chromedriver.terminate()
        try:
            chromedriver.wait(timeout=30)
        except subprocess.TimeoutExpired:
            chromedriver.kill()
        demo.close()

    out = tmp_path / "demo-screenshot.png"
    out.write_bytes(png)
    # Both images, both plots and the statistics are on the page, loaded, and inside the captured window.
    assert all(v and v[0] >= 64 for v in loaded.values()), loaded
    width, height = boxes["window"]
    for name, box in boxes.items():
        if name.startswith("arvis-"):
            left, top, right, bottom = box
            assert 0 <= left < right <= width and 0 <= top < bottom <= height, (name, box, boxes["window"])
    for needle in ("plain AR", "step compression", "speedup (latency)", "target forwards / image", "Done:"):
        assert needle in text
    from PIL import Image

    with Image.open(out) as im:
        assert im.format == "PNG" and im.size[0] >= WINDOW[0] - 20 and im.size[1] >= 600
        im.load()
        colours = len(set(im.convert("RGB").resize((200, 200)).getdata()))
        assert colours > 50  # a rendered page, not a blank frame
    if os.environ.get("ARVIS_UPDATE_SCREENSHOT") == "1":
        DOCS_PNG.parent.mkdir(exist_ok=True)
        tmp = DOCS_PNG.with_suffix(".png.tmp")
        shutil.copyfile(out, tmp)
        os.replace(tmp, DOCS_PNG)
