"""`zoo explore`'s page in a real browser: Debian's chromium, driven by
Selenium through the system chromedriver (no downloaded browser). A server
on 127.0.0.1 on a free port serves each tiny model; the test uses the page
as a person would and takes a screenshot of each kind into its temporary
folder (tests/explore/browser.py holds the steps; it also takes the
screenshot of docs/explore.png).

Skips, saying why, where selenium, chromium or chromedriver is absent
(`apt-get install chromium chromium-driver`, `pip install selenium`)."""

import pytest

pytest.importorskip("starlette", reason="zoo explore needs the explore extra: pip install -e .[explore]")
pytest.importorskip("uvicorn", reason="zoo explore needs the explore extra: pip install -e .[explore]")

from tests.explore.browser import available, css_all, fill, serving, start_browser, wait_for  # noqa: E402

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))


@pytest.fixture(scope="module")
def browser():
    driver = start_browser()
    yield driver
    driver.quit()


def test_a_language_model_streams_tokens_and_shows_a_tokens_attention_and_probabilities(browser, explorers, tmp_path):
    from selenium.webdriver.common.by import By

    with serving(explorers["language_model"]) as url:
        browser.get(url)
        wait_for(browser, lambda d: "GPTCausalLM" in d.find_element(By.ID, "model-line").text, "the model line")
        card = browser.find_element(By.ID, "card").text
        assert "gpt_char" in card and "gpt-nano" in card and "val_loss" in card, card
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
        browser.save_screenshot(str(tmp_path / "language_model.png"))


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


def test_a_translator_shows_its_translation_and_cross_attention(browser, explorers, tmp_path):
    from selenium.webdriver.common.by import By

    from zoo.explore.protocol import TranslateRequest

    source = explorers["translator"].translate(TranslateRequest(source="two dogs run in the snow", num_beams=3))
    assert len(source.target_tokens) > 1  # a matrix to enlarge: one target token is shown as one row of weights
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
        assert columns == [token.text for token in source.source_tokens]
        assert browser.find_element(By.ID, "translation").text == (source.translation or "(empty)")
        browser.save_screenshot(str(tmp_path / "translator.png"))


def test_a_classifier_shows_label_probabilities_and_the_cls_attention(browser, explorers, tmp_path):
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
        browser.save_screenshot(str(tmp_path / "classifier.png"))
