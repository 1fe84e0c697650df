"""Screenshots of `linearizer explore` for docs/explore: serve a run on 127.0.0.1, drive each of
its tabs in headless Chromium (Selenium) and save one PNG per tab, cropped below the tab's caption.

    python scripts/explore_screenshots.py pretrained:mnist --walk-seed 5 --walk -2.5
    python scripts/explore_screenshots.py runs/flow-cond --class 3 --guidance 1 --out /tmp/shots
    python scripts/explore_screenshots.py runs/projective-cpu --out docs/explore

A flow run gives generate.png, walk.png and invert.png (a class-conditional one also picks the
class and the guidance, and shows the class swap of the drawn digit); a projective run gives
project.png. Needs the [app] extra and Debian's chromium + chromium-driver.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

WIDTH = 1280
WAIT_S = 300  # a T = 1000 collapse of a 1024-d B takes seconds; a slow machine, minutes
MARGIN = 16  # pixels kept below the last element of a shot


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from linearizer.errors import LinearizerError

    try:
        saved = take(args)
    except LinearizerError as e:
        print(f"explore_screenshots: error: {e}", file=sys.stderr)
        return 2
    for path in saved:
        print(path)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="a run folder or pretrained:NAME (flow or projective)")
    p.add_argument("--out", default="docs/explore", help="folder for the PNGs")
    p.add_argument("--walk-seed", type=int, default=0, help="seed of the Walk tab")
    p.add_argument("--walk", type=float, default=2.5, help="c1 of the Walk tab (std devs)")
    p.add_argument(
        "--class",
        dest="label",
        default=None,
        help="conditional runs: Generate's and Walk's class (default: mixture)",
    )
    p.add_argument(
        "--guidance",
        type=float,
        default=None,
        help="conditional runs: Generate's and Walk's guidance w",
    )
    p.add_argument(
        "--image-class",
        default="1",
        help="conditional runs: the class of the digit drawn on Invert (a '1')",
    )
    p.add_argument("--k", type=int, default=6, help="singular directions on the Walk tab")
    return p


def take(args: argparse.Namespace) -> list[Path]:
    """Serve ``args.run``, drive its tabs, save one PNG per tab; returns the paths."""
    from linearizer.explore import Explorer, build_app, launch, open_run

    explorer = Explorer(open_run(args.run), k=args.k, name=args.run)
    demo = build_app(explorer)
    launch(demo, host="127.0.0.1", port=None, block=False)
    driver = chrome()
    try:
        driver.get(demo.local_url)
        settle(driver)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        if explorer.flow:
            return flow_shots(driver, explorer, args, out)
        if explorer.projective:
            return [project_shot(driver, out)]
        from linearizer.errors import LinearizerError

        raise LinearizerError(f"{args.run}: screenshots cover flow and projective runs")
    finally:
        driver.quit()
        demo.close()


# ----------------------------------------------------------------------------- the browser


def chrome():
    from selenium import webdriver

    from linearizer.errors import LinearizerError

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (binary and driver):
        raise LinearizerError("needs a headless browser: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--force-device-scale-factor=1",
        f"--window-size={WIDTH},1600",
        "--hide-scrollbars",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=webdriver.ChromeService(driver), options=options)


def wait(driver, condition, timeout: float = WAIT_S):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(condition)


def settle(driver) -> None:
    """The page loaded and its fonts laid out (the sketch canvas sizes itself once)."""
    loaded = "return document.readyState == 'complete' && document.fonts.status == 'loaded'"
    wait(driver, lambda d: d.execute_script(loaded))


def by_id(driver, elem_id: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, elem_id)


def css(driver, selector: str) -> list:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def tab(driver, name: str) -> None:
    next(b for b in css(driver, "button[role='tab']") if b.text.strip() == name).click()
    time.sleep(0.5)  # the tab's components mount


def src(driver, elem_id: str) -> str | None:
    imgs = css(driver, f"#{elem_id} img")
    return imgs[0].get_attribute("src") if imgs else None


def text_has(elem_id: str, needle: str):
    return lambda d: needle in by_id(d, elem_id).text


def choose(driver, elem_id: str, value: str) -> None:
    """Pick ``value`` in the dropdown ``elem_id``."""
    css(driver, f"#{elem_id} input")[0].click()
    options = wait(driver, lambda d: css(d, "ul[role='listbox'] li"))
    # textContent, not .text: an option scrolled out of the list's view has no rendered text
    names = [(o.get_attribute("textContent") or "").replace("✓", "").strip() for o in options]
    if value not in names:
        from linearizer.errors import LinearizerError

        raise LinearizerError(f"{elem_id}: no choice {value!r} (choices: {', '.join(names)})")
    options[names.index(value)].click()
    time.sleep(0.3)


def set_number(driver, elem_id: str, value: float) -> None:
    """Type ``value`` into the number box of slider ``elem_id``."""
    set_value(driver, css(driver, f"#{elem_id} input[type='number']")[0], value)


def set_value(driver, box, value: float) -> None:
    """Replace the text of the input ``box`` by ``value`` (Gradio applies it on Enter)."""
    from selenium.webdriver.common.keys import Keys

    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(f"{value:g}", Keys.ENTER)
    time.sleep(0.3)


def generate(driver) -> None:
    """Click Generate and wait for its new caption."""
    from selenium.common.exceptions import TimeoutException

    old = by_id(driver, "generate-text").text
    by_id(driver, "generate-button").click()
    again = "PSNR" in old  # a caption is there already: wait for the new one, for a while

    def done(d) -> bool:  # while pending, the old caption shows under a progress line
        text = by_id(d, "generate-text").text
        return "PSNR" in text and text != old and "processing" not in text

    try:
        wait(driver, done, 60 if again else WAIT_S)
    except TimeoutException:
        if not again:
            raise  # (a second caption equal to the first, to every timing, is accepted)


def draw_one(driver) -> None:
    """A '1' on the Invert tab's sketch canvas."""
    stroke(driver, (0, -60), [(4, 40), (4, 40), (2, 30)])


def stroke(driver, start: tuple[int, int], moves: list[tuple[int, int]]) -> None:
    """One brush stroke on the visible sketch canvas, from ``start`` (offset from its centre)."""
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = wait(driver, lambda d: [c for c in css(d, "canvas") if c.is_displayed()])[0]
    next(b for b in css(driver, "button[aria-label='Brush']") if b.is_displayed()).click()
    chain = ActionChains(driver).move_to_element_with_offset(canvas, *start).click_and_hold()
    for dx, dy in moves:
        chain = chain.move_by_offset(dx, dy)
    chain.release().perform()


def shot(driver, path: Path, *last_ids: str) -> Path:
    """Save the page down to the lowest of the elements ``last_ids`` (plus a margin): the
    window is made tall enough first, so nothing is cut above it."""
    from PIL import Image

    bottom = max(
        driver.execute_script(
            "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
            "return r.bottom + window.scrollY;",
            i,
        )
        for i in last_ids
    )
    height = int(bottom) + MARGIN
    driver.execute_script("window.scrollTo(0, 0)")
    driver.set_window_size(WIDTH, max(height + 200, 800))
    time.sleep(0.5)
    tmp = path.with_suffix(".full.png")
    driver.save_screenshot(str(tmp))
    with Image.open(tmp) as img:
        img.crop((0, 0, img.width, min(height, img.height))).convert("RGB").save(path)
    tmp.unlink()
    driver.set_window_size(WIDTH, 1600)
    return path


# ----------------------------------------------------------------------------- the tabs


def flow_shots(driver, explorer, args, out: Path) -> list[Path]:
    mixture, guided = bool(explorer.flow.components), explorer.flow.guided
    wait(driver, lambda d: css(d, "#generate-button"))
    if mixture:
        condition(driver, "generate", args, guided)
    generate(driver)  # the first click also collapses B
    generate(driver)  # the shot shows an interaction's cost once B is cached
    saved = [shot(driver, out / "generate.png", "generate-text")]

    tab(driver, "Walk")
    wait(driver, lambda d: src(d, "walked"))
    if mixture:
        condition(driver, "walk", args, guided)
    if args.walk_seed:
        before = src(driver, "walked")
        set_value(driver, css(driver, "#walk-seed input")[0], args.walk_seed)
        wait(driver, lambda d: src(d, "walked") != before)
    before = src(driver, "walked")
    set_number(driver, "walk-c1", args.walk)
    if args.walk:
        wait(driver, lambda d: src(d, "walked") != before)
    wait(driver, text_has("walk-text", "u1" if args.walk else "+ 0"))
    time.sleep(1.0)  # the later of two quick updates wins; let it land
    saved.append(shot(driver, out / "walk.png", "walk-text", f"walk-c{explorer.flow.k}"))

    tab(driver, "Invert & edit")
    draw_one(driver)
    if mixture:
        choose(driver, "invert-class", str(args.image_class))
    by_id(driver, "invert-button").click()
    wait(driver, text_has("invert-text", "Input: the drawing"))
    if mixture:
        wait(driver, text_has("invert-text", "Swapped back"))
    saved.append(shot(driver, out / "invert.png", "invert-text"))
    return saved


def condition(driver, prefix: str, args, guided: bool) -> None:
    """A mixture's component (a conditional run's class) and guidance, when asked for."""
    if args.label is not None:
        choose(driver, f"{prefix}-class", str(args.label))
    if guided and args.guidance is not None:
        set_number(driver, f"{prefix}-guidance", args.guidance)


def project_shot(driver, out: Path) -> Path:
    stroke(driver, (-30, -50), [(50, 0), (-30, 100)])  # a '7'
    by_id(driver, "project-button").click()
    wait(driver, text_has("project-text", "idempotence"))
    last = "project-text"
    if css(driver, "#restore-button"):
        by_id(driver, "restore-button").click()
        wait(driver, text_has("restore-text", "alternating"))
        last = "restore-text"
    return shot(driver, out / "project.png", last)


if __name__ == "__main__":
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    sys.exit(main())
