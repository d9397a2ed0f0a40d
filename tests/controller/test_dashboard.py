"""The controller's dashboard in a real browser: Debian's chromium, headless, driven by Selenium
through chromedriver. A `shoal server --tenants` and a `shoal controller --http` run on loopback;
the page must load, show every tenant, and move when a tenant's size changes; in a window 1280
pixels wide every tenant's card is in view without scrolling.

The controller runs with --dry-run so the only resize is the test's own `tenant_memlimit`: what
the page shows must follow the server, whoever changed it.
"""

import json
import os
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

from harness import SHOAL, Server, free_port

MIB = 1 << 20
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def command(server, line):
    """One command line to `server` and its one-line answer."""
    with server.connect() as s:
        s.sendall(line.encode() + b"\r\n")
        answer = b""
        while not answer.endswith(b"\r\n"):
            chunk = s.recv(4096)
            assert chunk, f"closed after {answer!r}"
            answer += chunk
        return answer.decode().strip()


@pytest.fixture
def cluster():
    """A server with tenants web, batch and scan (16 MiB each; the issue's trial had three), and a
    controller serving its dashboard; yields (server, dashboard URL)."""
    scratch = Path(tempfile.mkdtemp(prefix="shoal-dashboard-", dir="/dev/shm"))
    tenants = scratch / "tenants.toml"
    text = 'default = "web"\n'
    for name, slo in (("web", 0.8), ("batch", 0), ("scan", 0)):
        text += (f'[[tenant]]\nname = "{name}"\nprefixes = ["{name}:"]\nregion = "{scratch}/{name}.region"\n'
                 f"min_mb = 2\nmax_mb = 28\nsize_mb = 16\n")
        if slo:
            text += f"slo_hit_ratio = {slo}\n"
    tenants.write_text(text)
    http = f"127.0.0.1:{free_port()}"
    with Server.shoal("--tenants", str(tenants), memory_mb=48) as server:
        controller = subprocess.Popen(
            [str(SHOAL), "controller", "--server", f"127.0.0.1:{server.port}", "--interval", "500ms",
             "--dry-run", "--goal", "slo", "--http", http],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://{http}/"
            deadline = time.monotonic() + 10
            while True:
                try:
                    state = json.load(urllib.request.urlopen(url + "api/state", timeout=2))
                    if state["round"] >= 1:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "the controller's --http does not answer"
                time.sleep(0.1)
            yield server, url
        finally:
            controller.kill()
            controller.wait()
            for path in scratch.iterdir():
                path.unlink()
            scratch.rmdir()


@pytest.fixture
def browser():
    for path in (CHROMIUM, CHROMEDRIVER):
        assert os.path.exists(path), f"{path} is missing: apt-get install chromium chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


# The page rebuilds its tenant cards on every update, so an element found in one call may be gone
# by the next: everything a check needs is read in one script, in the page's own thread.
CARDS_SCRIPT = """
const text = (card, sel) => card.querySelector(sel)?.textContent ?? null;
return Object.fromEntries([...document.querySelectorAll('article.tenant[data-tenant]')].map((card) => {
  const slo = card.querySelector('.slo');
  const mark = card.querySelector('svg.curve-chart line[data-mark="current"]');
  return [card.dataset.tenant, {
    size_bytes: Number(card.dataset.sizeBytes),
    size_text: text(card, '.size'),
    curve_drawn: card.querySelector('svg.curve-chart polyline.curve') !== null,
    history_drawn: card.querySelector('svg.history-chart') !== null,
    slo_state: slo?.dataset.sloState ?? null,
    slo_text: slo?.textContent ?? '',
    mark_bytes: mark ? Number(mark.dataset.bytes) : null,
  }];
}));
"""


# The window's size, the page's width, and each tenant card's box in the window.
VIEW_SCRIPT = """
window.scrollTo(0, 0);
const box = (card) => { const r = card.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
return {
  width: window.innerWidth, height: window.innerHeight,
  scroll_width: document.documentElement.scrollWidth,
  cards: Object.fromEntries([...document.querySelectorAll('article.tenant[data-tenant]')]
    .map((card) => [card.dataset.tenant, box(card)])),
};
"""


def cards(driver):
    """Each tenant card as displayed: {name: {size_bytes, size_text, curve_drawn, ...}}."""
    return driver.execute_script(CARDS_SCRIPT)


def tenant_sizes(driver):
    """Each tenant card's displayed size: {name: bytes}."""
    return {name: card["size_bytes"] for name, card in cards(driver).items()}


def test_the_dashboard_shows_every_tenant_and_follows_a_resize(cluster, browser):
    server, url = cluster
    browser.get(url)
    wait = WebDriverWait(browser, 15, poll_frequency=0.1)
    wait.until(lambda d: set(tenant_sizes(d)) == {"web", "batch", "scan"})
    shown = cards(browser)
    assert {name: card["size_bytes"] for name, card in shown.items()} == {
        "web": 16 * MIB, "batch": 16 * MIB, "scan": 16 * MIB}
    web = shown["web"]
    assert web["size_text"] == "16.0 MiB"
    assert web["curve_drawn"], "the curve is drawn"
    assert web["history_drawn"], "the hit ratio over time is drawn"
    assert web["slo_state"] in ("unknown", "met", "unmet") and "80.0 %" in web["slo_text"]
    assert shown["batch"]["slo_state"] == "none"

    # The server resizes (shrink first, so the sum stays within its memory); the page follows.
    assert command(server, f"tenant_memlimit batch {8 * MIB}") == "OK"
    assert command(server, f"tenant_memlimit web {24 * MIB}") == "OK"
    wait.until(lambda d: tenant_sizes(d) == {"web": 24 * MIB, "batch": 8 * MIB, "scan": 16 * MIB})
    web = cards(browser)["web"]
    assert web["size_text"] == "24.0 MiB"
    assert web["mark_bytes"] == 24 * MIB, "the curve's size mark moved"

    # A window 1280 pixels wide (720 high): every tenant's card whole in view, no scrolling.
    browser.set_window_size(1280, 720)
    wait.until(lambda d: d.execute_script("return window.innerWidth") <= 1280)
    round_now = int(browser.execute_script("return document.body.dataset.round"))
    wait.until(lambda d: int(d.execute_script("return document.body.dataset.round")) > round_now)
    view = browser.execute_script(VIEW_SCRIPT)
    assert view["scroll_width"] <= view["width"], f"the page scrolls sideways: {view}"
    assert set(view["cards"]) == {"web", "batch", "scan"}, view
    for name, (left, top, right, bottom) in view["cards"].items():
        assert left >= 0 and top >= 0 and right <= view["width"] and bottom <= view["height"], (
            f"{name}'s card is not in view without scrolling: {view}")

    shot = Path(tempfile.mkdtemp(prefix="shoal-dashboard-shot-")) / "dashboard.png"
    assert browser.save_screenshot(str(shot))
    data = shot.read_bytes()
    assert len(data) > 1000 and data.startswith(b"\x89PNG"), "a non-empty PNG"
    shot.unlink()
    shot.parent.rmdir()
