"""Driving `zoo explore`'s page in Debian's chromium through Selenium and
the system chromedriver (no downloaded browser): the server on 127.0.0.1 on
a free port, the browser, and the steps of a person using the page. The
browser tests use it, and so does the command that takes the screenshot of
docs/explore.png over a trained run:

    python -m tests.explore.browser runs/gpt_char docs/explore.png
"""

import contextlib
import shutil
import socket
import sys
import threading
import time
import urllib.request

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
WAIT = 30  # seconds, the most any step of the page may take


def available():
    """Why the browser cannot run here, or None when it can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the browser test needs selenium: pip install selenium"
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        return "no chromium and chromedriver on PATH (Debian: apt-get install chromium chromium-driver)"
    return None


@contextlib.contextmanager
def serving(explorer):
    """The app of `explorer` under uvicorn on 127.0.0.1, a free port, in a
    thread; yields its URL and stops the server on exit."""
    import uvicorn

    from zoo.explore.app import create_app

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
    server = uvicorn.Server(uvicorn.Config(create_app(explorer), log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                urllib.request.urlopen(url + "api/info", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=WAIT)
        listener.close()
        assert not thread.is_alive(), "the server did not stop"


def start_browser():
    """Headless chromium, 1280 x 1400."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,1400", "--disable-extensions", "--no-first-run"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT)
    return driver


def wait_for(driver, condition, what):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT, poll_frequency=0.1).until(lambda d: condition(d), message=what)


def css_all(driver, selector):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def fill(driver, element_id, value):
    from selenium.webdriver.common.by import By

    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(str(value))



def generate_and_inspect(driver, url, prompt, length, token, cell, sampler="greedy"):
    """Generates `length` tokens after `prompt` (with `sampler`, seed 0),
    clicks generated token number `token`, then heatmap cell number `cell`
    (layer-major)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.get(url)
    wait_for(driver, lambda d: "GPTCausalLM" in d.find_element(By.ID, "model-line").text, "the model line")
    fill(driver, "prompt", prompt)
    fill(driver, "length", length)
    Select(driver.find_element(By.ID, "sampler")).select_by_value(sampler)
    driver.find_element(By.ID, "generate").click()
    wait_for(driver, lambda d: len(css_all(d, "#tokens .token.generated")) == length, f"{length} streamed tokens")
    wait_for(driver, lambda d: f"{length} new tokens" in d.find_element(By.ID, "generate-status").text, "done")
    css_all(driver, "#tokens .token.generated")[token].click()
    cells = wait_for(driver, lambda d: css_all(d, "#lm-attention-grid canvas.cell"), "the heatmap grid")
    wait_for(driver, lambda d: css_all(d, "#probabilities tr"), "the probabilities")
    cells[cell].click()
    wait_for(driver, lambda d: css_all(d, "#lm-attention-enlarged .weights span"), "the enlarged head")
    return cells


def screenshot(run, png, prompt="ROMEO:\nWhat", length=80):
    """The page over the language model of run folder `run`, after a top-k
    sample (seed 0), one token inspected and one head enlarged, saved as
    `png`."""
    from zoo.explore.explorer import Explorer, open_target, run_record

    explorer = Explorer(open_target(run), name=str(run), run=run_record(run))
    driver = start_browser()
    try:
        with serving(explorer) as url:
            generate_and_inspect(driver, url, prompt, length, token=length - 20, cell=5, sampler="top_k")
            driver.save_screenshot(str(png))
    finally:
        driver.quit()


if __name__ == "__main__":
    reason = available()
    if reason:
        sys.exit(reason)
    screenshot(sys.argv[1], sys.argv[2])
