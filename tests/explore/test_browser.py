"""`zoo explore`'s page in a real browser: Debian's chromium, driven by
Selenium through the system chromedriver (no downloaded browser). A server
on 127.0.0.1 on a free port serves each tiny model; the test uses the page
as a person would and takes a screenshot of each kind under /tmp.

Skips, saying why, where selenium, chromium or chromedriver is absent
(`apt-get install chromium chromium-driver`, `pip install selenium`)."""

import contextlib
import shutil
import socket
import threading
import time
import urllib.request

import pytest

pytest.importorskip("starlette", reason="zoo explore needs the explore extra: pip install -e .[explore]")
pytest.importorskip("uvicorn", reason="zoo explore needs the explore extra: pip install -e .[explore]")
webdriver = pytest.importorskip("selenium.webdriver", reason="the browser test needs selenium: pip install selenium")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
WAIT = 30  # seconds, the most any step of the page may take
pytestmark = pytest.mark.skipif(
    not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)),
    reason="no chromium and chromedriver on PATH (Debian: apt-get install chromium chromium-driver)",
)


@contextlib.contextmanager
def serving(explorer):
    """The app of `explorer` under uvicorn on 127.0.0.1, a free port, in a
    thread; yields its URL and stops the server on exit."""
    import uvicorn

    from recipes.explore.app import create_app

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


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,1400", "--disable-extensions", "--no-first-run"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT)
    yield driver
    driver.quit()


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


def test_a_language_model_streams_tokens_and_shows_a_tokens_attention_and_probabilities(browser, explorers):
    from selenium.webdriver.common.by import By

    with serving(explorers["language_model"]) as url:
        browser.get(url)
        wait_for(browser, lambda d: "GPTCausalLM" in d.find_element(By.ID, "model-line").text, "the model line")
        fill(browser, "prompt", "ROMEO: to")
        fill(browser, "length", 24)
        browser.find_element(By.ID, "generate").click()
        wait_for(browser, lambda d: len(css_all(d, "#tokens .token.generated")) == 24, "24 streamed tokens")
        prompt = "".join(s.get_attribute("data-text") for s in css_all(browser, "#tokens .token.prompt"))
        assert prompt == "ROMEO: to"
        streamed = "".join(s.get_attribute("data-text") for s in css_all(browser, "#tokens .token.generated"))
        import zoo

        assert "ROMEO: to" + streamed == zoo.generate(explorers["language_model"].model, "ROMEO: to", max_new_tokens=24)
        wait_for(browser, lambda d: "24 new tokens" in d.find_element(By.ID, "generate-status").text, "done")

        css_all(browser, "#tokens .token.generated")[5].click()  # position 9 + 5 = 14
        cells = wait_for(browser, lambda d: css_all(d, "#lm-attention-grid canvas.cell"), "the heatmap grid")
        assert len(cells) == 2 * 4  # layers x heads
        rows = wait_for(browser, lambda d: css_all(d, "#probabilities tr"), "the probabilities")
        assert len(rows) == 10
        values = [float(row.find_element(By.CSS_SELECTOR, "td.value").text.rstrip("%")) for row in rows]
        assert values == sorted(values, reverse=True) and 0 < sum(values) <= 100.5
        assert css_all(browser, "#probabilities tr.actual"), "the token that came next is marked"
        assert css_all(browser, "#legend canvas"), "the colour scale's legend"

        cells[4 + 2].click()  # layer 2, head 3
        chips = wait_for(browser, lambda d: css_all(d, "#lm-attention-enlarged .weights span"), "the enlarged head")
        assert len(chips) == 15  # the context of position 14
        assert "layer 2, head 3" in browser.find_element(By.ID, "lm-attention-enlarged").text
        weights = [float(chip.get_attribute("title")) for chip in chips]
        assert abs(sum(weights) - 1) < 1e-2
        browser.save_screenshot("/tmp/zoo_explore_language_model.png")


def test_a_bad_setting_shows_the_servers_message(browser, explorers):
    from selenium.webdriver.common.by import By

    with serving(explorers["language_model"]) as url:
        browser.get(url)
        wait_for(browser, lambda d: "GPTCausalLM" in d.find_element(By.ID, "model-line").text, "the model line")
        fill(browser, "prompt", "caf\u00e9")  # a character the CharTokenizer never saw
        browser.find_element(By.ID, "generate").click()
        status = wait_for(browser, lambda d: css_all(d, "#generate-status.error"), "an error")[0]
        assert status.text.startswith("prompt: character 'é' at position 3 is not in the vocabulary"), status.text
        assert not css_all(browser, "#tokens .token")


def test_a_translator_shows_its_translation_and_cross_attention(browser, explorers):
    from selenium.webdriver.common.by import By

    with serving(explorers["translator"]) as url:
        browser.get(url)
        wait_for(browser, lambda d: d.find_element(By.ID, "translator").is_displayed(), "the translator view")
        fill(browser, "beams", 3)  # the beam search test_app.py compiled already
        browser.find_element(By.ID, "translate").click()
        cells = wait_for(browser, lambda d: css_all(d, "#cross-attention-grid canvas.cell"), "the heatmap grid")
        assert len(cells) == 2 * 4
        cells[0].click()
        table = wait_for(browser, lambda d: css_all(d, "#cross-attention-enlarged table.matrix"), "the matrix")[0]
        columns = [th.get_attribute("textContent") for th in table.find_elements(By.CSS_SELECTOR, "th.column")]
        source = explorers["translator"].translate({"source": "two dogs run in the snow", "num_beams": 3})
        assert columns == [token["text"] for token in source["source_tokens"]]
        assert browser.find_element(By.ID, "translation").text == (source["translation"] or "(empty)")
        browser.save_screenshot("/tmp/zoo_explore_translator.png")


def test_a_classifier_shows_label_probabilities_and_the_cls_attention(browser, explorers):
    from selenium.webdriver.common.by import By

    with serving(explorers["classifier"]) as url:
        browser.get(url)
        wait_for(browser, lambda d: d.find_element(By.ID, "classifier").is_displayed(), "the classifier view")
        browser.find_element(By.ID, "classify").click()
        rows = wait_for(browser, lambda d: css_all(d, "#label-probabilities tr"), "the label probabilities")
        assert [row.find_element(By.CSS_SELECTOR, ".chip").text for row in rows] == ["negative", "positive"]
        cells = wait_for(browser, lambda d: css_all(d, "#cls-attention-grid canvas.cell"), "the heatmap grid")
        assert len(cells) == 2 * 4
        cells[1].click()
        chips = wait_for(browser, lambda d: css_all(d, "#cls-attention-enlarged .weights span"), "the enlarged head")
        assert chips[0].text == "[CLS]" and chips[-1].text == "[SEP]"
        browser.save_screenshot("/tmp/zoo_explore_classifier.png")
