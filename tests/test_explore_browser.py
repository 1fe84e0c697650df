"""The explorer in a real headless Chromium (Debian ``chromium`` + ``chromium-driver``, Selenium):
open the page, generate, move a Walk slider, check that the picture changed; draw a digit and
invert it; project and restore on a projective run.

``LINEARIZER_EXPLORE_SCREENSHOTS=DIR`` saves a screenshot of each step into DIR;
``LINEARIZER_EXPLORE_RUN=RUN`` / ``LINEARIZER_EXPLORE_PROJECTIVE_RUN=RUN`` explore those runs
instead of fresh smoke runs.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from linearizer.cli.main import main

# Every test here serves the page in a browser: without the [app] extra the module has nothing
# to run (`.[dev]` alone brings gradio_client but neither gradio nor selenium).
APP_EXTRA = "needs the [app] extra: pip install -e '.[app]'"
pytest.importorskip("gradio", reason=APP_EXTRA)
webdriver = pytest.importorskip("selenium.webdriver", reason=APP_EXTRA)

from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="needs a headless browser: apt-get install chromium chromium-driver",
)
WAIT_S = 60  # generous: the first page load compiles nothing, but CI machines are slow


def _smoke(tmp_path_factory, kind: str, *settings: str) -> str:
    run = str(tmp_path_factory.mktemp("browser") / kind)
    argv = ["train", kind, "--preset", "smoke", "--out", run, "--set", "progress=false"]
    for setting in settings:
        argv += ["--set", setting]
    assert main(argv) == 0
    return run


def _chrome():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1500",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=webdriver.ChromeService(DRIVER), options=options)


@pytest.fixture
def browser():
    """A fresh browser per test (a sketch canvas drawn in an earlier page can shift the next)."""
    driver = _chrome()
    yield driver
    driver.quit()


def _open(driver, run: str):
    """Serve ``run`` on 127.0.0.1 and load its page in ``driver``; returns the Gradio app."""
    from linearizer.explore import build_app, launch, open_run

    demo = build_app(open_run(run))
    launch(demo, host="127.0.0.1", port=None, block=False)
    driver.get(demo.local_url)
    # The sketch canvas sizes itself once; let the page's fonts settle the layout first.
    loaded = "return document.readyState == 'complete' && document.fonts.status == 'loaded'"
    WebDriverWait(driver, WAIT_S).until(lambda d: d.execute_script(loaded))
    return demo


@pytest.fixture
def page(browser, tmp_path_factory):
    """The page of a flow run, its server closed after the test (one server at a time)."""
    run = os.environ.get("LINEARIZER_EXPLORE_RUN") or _smoke(tmp_path_factory, "flow")
    demo = _open(browser, run)
    yield browser
    demo.close()


def _shot(driver, name: str) -> None:
    folder = os.environ.get("LINEARIZER_EXPLORE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


def _src(driver, elem_id: str) -> str | None:
    imgs = driver.find_elements(By.CSS_SELECTOR, f"#{elem_id} img")
    return imgs[0].get_attribute("src") if imgs else None


def _pixels(src: str) -> np.ndarray:
    with urllib.request.urlopen(src, timeout=WAIT_S) as response:  # the local server only
        return np.array(Image.open(io.BytesIO(response.read())))


def _tab(driver, name: str) -> None:
    buttons = driver.find_elements(By.CSS_SELECTOR, "button[role='tab']")
    next(b for b in buttons if b.text.strip() == name).click()


def test_generate_walk_and_invert(page):
    wait = WebDriverWait(page, WAIT_S)
    wait.until(lambda d: d.find_elements(By.ID, "generate-button"))
    page.find_element(By.ID, "generate-button").click()
    wait.until(lambda d: _src(d, "one-step") and _src(d, "multi-step"))
    wait.until(lambda d: "PSNR" in d.find_element(By.ID, "generate-text").text)
    one, multi = _pixels(_src(page, "one-step")), _pixels(_src(page, "multi-step"))
    assert one.shape == multi.shape and one.std() > 0
    if not os.environ.get("LINEARIZER_EXPLORE_RUN"):  # an unconditional run: no class picker
        assert not page.find_elements(By.ID, "generate-class")
    _shot(page, "generate")

    _tab(page, "Walk")
    wait.until(lambda d: _src(d, "walked"))  # filled when the page loads
    before = _src(page, "walked")
    start = _pixels(before)
    slider = page.find_element(By.CSS_SELECTOR, "#walk-c1 input[type='range']")
    ActionChains(page).click(slider).perform()  # the middle of the track: c1 = 0
    slider.send_keys(*([Keys.ARROW_RIGHT] * 25))  # c1 = +2.5 standard deviations
    wait.until(lambda d: _src(d, "walked") != before)
    wait.until(lambda d: "u1" in d.find_element(By.ID, "walk-text").text)
    after = _pixels(_src(page, "walked"))
    assert after.shape == start.shape and not np.array_equal(after, start)
    _shot(page, "walk")

    # draw a digit and invert it
    _tab(page, "Invert & edit")
    canvas = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "canvas"))[0]
    page.find_element(By.CSS_SELECTOR, "button[aria-label='Brush']").click()
    ActionChains(page).move_to_element_with_offset(canvas, 0, -60).click_and_hold().move_by_offset(
        4, 40
    ).move_by_offset(4, 40).move_by_offset(2, 30).release().perform()  # a '1'
    page.find_element(By.ID, "invert-button").click()
    wait.until(lambda d: "max |f(x0) − x|" in d.find_element(By.ID, "invert-text").text)
    assert "Input: the drawing" in page.find_element(By.ID, "invert-text").text
    seen = _pixels(_src(page, "invert-input"))
    assert seen.std() > 0
    _shot(page, "invert")


def test_class_picker_of_a_conditional_run(browser, tmp_path_factory):
    """A class-conditional run's Generate tab has the class picker and the guidance slider;
    generating class 1 names it in the caption."""
    run = _smoke(tmp_path_factory, "flow", "conditional=true", "classes=3")
    demo = _open(browser, run)
    try:
        wait = WebDriverWait(browser, WAIT_S)
        picker = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#generate-class input"))
        assert picker[0].get_attribute("value") == "mixture"
        assert browser.find_elements(By.CSS_SELECTOR, "#generate-guidance input[type='range']")
        picker[0].click()
        options = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "ul[role='listbox'] li"))
        # textContent, not .text: an option not yet laid out has no rendered text
        names = [(o.get_attribute("textContent") or "").replace("✓", "").strip() for o in options]
        assert names == ["mixture", "0", "1", "2"]
        options[2].click()  # class 1
        browser.find_element(By.ID, "generate-button").click()
        wait.until(lambda d: "class 1" in d.find_element(By.ID, "generate-text").text)
        assert "mixture" not in browser.find_element(By.ID, "generate-text").text
    finally:
        demo.close()


def test_screenshot_script_on_a_conditional_run(tmp_path_factory, tmp_path):
    """scripts/explore_screenshots.py (docs/explore's screenshots) stays runnable: one PNG per
    flow tab, with a class and guidance picked."""
    run = _smoke(tmp_path_factory, "flow", "conditional=true", "classes=3")
    script = Path(__file__).resolve().parents[1] / "scripts" / "explore_screenshots.py"
    cmd = [
        sys.executable,
        str(script),
        run,
        "--out",
        str(tmp_path),
        "--class",
        "2",
        "--guidance",
        "1",
        "--walk",
        "1",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("generate", "walk", "invert"):
        with Image.open(tmp_path / f"{name}.png") as img:
            assert img.width == 1280 and img.height > 500
    bad = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.strip().startswith("explore_screenshots: error:")


def test_project_and_restore(browser, tmp_path_factory):
    run = os.environ.get("LINEARIZER_EXPLORE_PROJECTIVE_RUN") or _smoke(
        tmp_path_factory, "projective"
    )
    demo = _open(browser, run)
    try:
        wait = WebDriverWait(browser, WAIT_S)
        canvas = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "canvas"))[0]
        browser.find_element(By.CSS_SELECTOR, "button[aria-label='Brush']").click()
        ActionChains(browser).move_to_element_with_offset(
            canvas, -30, -50
        ).click_and_hold().move_by_offset(50, 0).move_by_offset(
            -30, 100
        ).release().perform()  # a '7'
        browser.find_element(By.ID, "project-button").click()
        wait.until(lambda d: "idempotence" in d.find_element(By.ID, "project-text").text)
        assert "Input: the drawing" in browser.find_element(By.ID, "project-text").text
        browser.find_element(By.ID, "restore-button").click()
        wait.until(lambda d: "alternating" in d.find_element(By.ID, "restore-text").text)
        assert _pixels(_src(browser, "restore-strip")).std() > 0
        _shot(browser, "project")
    finally:
        demo.close()
