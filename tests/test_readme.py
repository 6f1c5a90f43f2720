"""Every Python block of README.md and of the guides in docs/ runs as written.

Each ```python block runs in a fresh namespace, in a temporary working
directory. A block that uses files a user would already have (a trained run
folder, downloaded checkpoints) is preceded by an HTML comment, invisible on
the rendered page, that names what to lay out first:

    <!-- readme-test: checkpoints runs -->

- `checkpoints`: tiny random stand-ins of the pretrained folders under
  `checkpoints/` (`python -m tests.checkpoints.stand_ins checkpoints`);
- `runs`: small run folders under `runs/` holding a `model.keras` with its
  tokenizer, as the recipes write them (tiny untrained models: the blocks
  test the calls, not the quality);
- `data`: the registered data sets, read from the offline copy in
  `$ZOO_DATA` (the block is skipped, with the reason, where it is absent);
- `server`: `zoo serve runs/gpt_char` on 127.0.0.1:8000, as the block's
  reader would have started it (skipped where that port is taken);
- `chat-server`: `zoo serve checkpoints/Qwen2.5-0.5B-Instruct` (the
  stand-in, with its chat template) there instead;
- `integration`: the block is an end-to-end run (the exports for
  runtimes) or builds full-size models (the presets of the README), so it
  runs with `make test-integration`, not `make test`.
"""

import re
import string
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- readme-test: (?P<needs>[\w ,-]+) -->\s*\n)?```python\n(?P<code>.*?)```", re.S)


def python_blocks(pages=PAGES):
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("code")) + 1
            needs = tuple(match.group("needs").replace(",", " ").split()) if match.group("needs") else ()
            marks = [pytest.mark.integration] if INTEGRATION in needs else []
            yield pytest.param(match.group("code"), needs, id=f"{page.relative_to(ROOT)}:{line}", marks=marks)


def lay_out_checkpoints(folder):
    from tests.checkpoints.stand_ins import write_stand_ins

    write_stand_ins(folder / "checkpoints")


def lay_out_runs(folder):
    """Run folders with the file layout and model kinds of the recipes."""
    import zoo
    from zoo.tokenizers import CharTokenizer, WordTokenizer, train_word_piece

    text = string.ascii_letters + " \n!$&',-.3:;?"  # Tiny Shakespeare's 65 characters
    runs = folder / "runs"
    chars = CharTokenizer.from_text(text)
    lm = zoo.build("gpt-nano", task="causal_lm", vocabulary_size=chars.vocabulary_size(), tokenizer=chars)
    sentences = ["a gripping film", "a dull plot", "the acting is superb", "two dogs run in the snow"]
    word_piece = train_word_piece(sentences * 8, vocabulary_size=120)
    size = word_piece.vocabulary_size()
    classifier = zoo.build("bert-tiny", task="classifier", num_classes=2, vocabulary_size=size, tokenizer=word_piece)
    translator = zoo.build(
        "transformer-tiny", vocabulary_size=size, source_vocabulary_size=size, tokenizer=word_piece
    )
    words = WordTokenizer.from_texts(["the small dog slept", "der kleine hund schlief"])
    demo = zoo.build(
        "transformer-tiny",
        vocabulary_size=words.vocabulary_size(),
        source_vocabulary_size=words.vocabulary_size(),
        tokenizer=words,
    )
    for name, model in (("gpt_char", lm), ("bert_classify", classifier), ("translate", translator), ("demo", demo)):
        (runs / name).mkdir(parents=True)
        zoo.save(model, runs / name / "model.keras")
    zoo.save(zoo.from_pretrained(folder / "checkpoints" / "gpt2"), (runs / "gpt_finetune").mkdir() or runs / "gpt_finetune" / "model.keras")


SETUPS = {"checkpoints": lay_out_checkpoints, "runs": lay_out_runs}
DATA = "data"
SERVER = "server"
CHAT_SERVER = "chat-server"
INTEGRATION = "integration"


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory):
    """The checkpoints and runs, written once and shared (read-only) by the blocks."""
    folder = tmp_path_factory.mktemp("readme_files")
    for setup in SETUPS.values():  # runs/gpt_finetune starts from the stand-in GPT-2 checkpoint
        setup(folder)
    return folder


@pytest.mark.parametrize("code, needs", list(python_blocks()))
def test_readme_block_runs(code, needs, tmp_path, monkeypatch, request):
    unknown = sorted(set(needs) - set(SETUPS) - {DATA, SERVER, CHAT_SERVER, INTEGRATION})
    assert not unknown, f"unknown readme-test setup {unknown}; expected some of " \
        f"{sorted([*SETUPS, DATA, SERVER, CHAT_SERVER, INTEGRATION])}"
    if DATA in needs:
        from tests.shared_data import SHARED_DATA, has
        from zoo.data import list_datasets

        if not all(has(name) for name in list_datasets()):
            pytest.skip(f"the registered data sets are not all in ZOO_DATA={SHARED_DATA}")
    if "import llama_cpp" in code:
        pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install -e '.[bench]')")
    if set(needs) & set(SETUPS):
        shared = request.getfixturevalue("laid_out")
        for name in SETUPS:
            (tmp_path / name).symlink_to(shared / name, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    np.random.seed(0)
    server = _serve(tmp_path / "runs" / "gpt_char") if SERVER in needs else None
    if CHAT_SERVER in needs:
        server = _serve(tmp_path / "checkpoints" / "Qwen2.5-0.5B-Instruct")
    presets = _family_presets()  # a guide may add a preset of its own: the next block does not see it
    try:
        exec(compile(code, request.node.callspec.id.split(":")[0], "exec"), {"__name__": "__readme__"})
    finally:
        for family, saved in presets:
            family.presets.clear()
            family.presets.update(saved)
        if server is not None:
            server.stop()


def _family_presets():
    from zoo.families import FAMILIES

    return [(family, dict(family.presets)) for family in FAMILIES.values()]


def _serve(run):
    """`zoo serve RUN` (a run folder or a checkpoint folder) on 127.0.0.1:8000, in this process."""
    pytest.importorskip("openai")
    import zoo
    from tests.serve.conftest import Server

    try:
        model = zoo.load(run / "model.keras") if (run / "model.keras").exists() else zoo.from_pretrained(run)
        return Server(model, name=str(run.relative_to(run.parents[1])), port=8000)
    except ValueError as error:  # the port is taken
        pytest.skip(f"zoo serve cannot listen on 127.0.0.1:8000 here: {error}")


def test_the_readme_and_its_guides_have_python_blocks():
    assert len(list(python_blocks([README]))) >= 2  # the quick start
    assert len(list(python_blocks())) >= 12
