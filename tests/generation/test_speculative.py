"""Speculative decoding (`zoo.generation.speculative`): proposals checked by
one pass of the model keep its distribution.

- Greedy: the tokens equal decoding without speculation, token for token,
  with prompt lookup and with a draft model, on GPT and Llama, through
  `zoo.generate` on ids and text, and `zoo.stream` (several tokens a step).
- Sampled: the first two tokens of many seeded draws follow the model's
  exact distribution, computed in float64 NumPy from its logits (a
  chi-square test), with a draft deliberately unlike the model; the same
  test rejects an acceptance rule that accepts every draft.
- A seeded run is reproducible (with `-m integration`); stop tokens and budgets end a row inside
  a round; prompt lookup proposes as transformers' does; k adapts as
  transformers' heuristic; wrong settings are refused in one line.
"""

import math

import numpy as np
import pytest
from keras import ops

import zoo
from zoo.generation import speculative
from zoo.tokenizers import CharTokenizer

TEXT = "the cat sat on the mat. the cat sat on the hat. the dog sat on the log.\n"
CONTEXT = 96


def randomized(model, seed, scale):
    """`model` with each matrix drawn from N(0, scale^2 / fan_in): at
    Keras' initial weights the residual stream carries the token itself and
    a random model repeats it; at these its greedy path varies and two
    models' distributions differ."""
    generator = np.random.default_rng(seed)
    for variable in model.weights:
        if len(variable.shape) >= 2:
            variable.assign(generator.normal(0, scale / np.sqrt(variable.shape[0]), variable.shape).astype("float32"))
    return model


def pair(preset):
    """(model, draft): the same family and vocabulary, different weights."""
    tokenizer = CharTokenizer.from_text(TEXT)
    return [randomized(zoo.build(preset, "causal_lm", vocabulary_size=tokenizer.vocabulary_size(),
                                 max_sequence_length=CONTEXT, tokenizer=tokenizer), seed, 4.0) for seed in (0, 1)]


@pytest.fixture(scope="module")
def models():
    return pair("gpt-nano")


@pytest.fixture(scope="module")
def llama_models():
    return pair("llama-nano")


def ids(text, model):
    return [int(t) for t in model.tokenizer(text)]


@pytest.mark.parametrize("family", ["gpt", "llama"])
@pytest.mark.parametrize("proposer", ["lookup", "draft"])
def test_greedy_tokens_equal_decoding_without_speculation(models, llama_models, family, proposer):
    lm, draft = models if family == "gpt" else llama_models
    prompt = [ids(TEXT[:40], lm)]
    plain = zoo.generate(lm, prompt, max_new_tokens=50).sequences[0]
    options = dict(prompt_lookup_num_tokens=6) if proposer == "lookup" else dict(
        assistant_model=lm if proposer == "self" else draft, num_assistant_tokens=4)
    speculated = zoo.generate(lm, prompt, max_new_tokens=50, **options).sequences[0]
    assert speculated == plain
    assert len(set(plain)) > 3  # a varied path, not one token repeated


def test_a_draft_of_the_model_itself_is_always_accepted(models):
    lm, _ = models
    prompt = [ids(TEXT[:40], lm)]
    decoding = zoo.generation.Decoding(lm, prompt, 50, speculation=dict(
        assistant_model=lm, num_assistant_tokens=4, num_assistant_tokens_schedule="constant")).run()
    speculation = decoding.speculation
    assert speculation.accepted == speculation.drafted > 0
    assert speculation.rounds == 10  # 4 accepted and 1 more a round
    assert decoding.new_tokens[0] == zoo.generate(lm, prompt, max_new_tokens=50).sequences[0]


def test_each_round_runs_the_narrowest_program_and_the_variables_are_listed_once(models, monkeypatch):
    """A round of k proposed tokens verifies the power of two of positions
    at or above k + 1 (at least 2), and a generation lists each model's
    variables once, not once a round."""
    from zoo.generation import compiled

    lm, draft = models
    prompt = [ids(TEXT[:40], lm)]
    rounds, listed = [], []
    raw, values = compiled.Compiled.raw, compiled._values

    def recording(self, *arrays):
        if isinstance(self.function, speculative.Verify):
            rounds.append((self.function.width, int(ops.convert_to_numpy(arrays[3]))))
        return raw(self, *arrays)

    monkeypatch.setattr(compiled.Compiled, "raw", recording)
    monkeypatch.setattr(compiled, "_values", lambda model: listed.append(model) or values(model))
    plain = zoo.generate(lm, prompt, max_new_tokens=50).sequences[0]
    listed.clear()
    speculated = zoo.generate(lm, prompt, max_new_tokens=50, prompt_lookup_num_tokens=6).sequences[0]
    assert speculated == plain
    assert listed == [lm]
    assert all(width == max(1 << k.bit_length(), 2) for width, k in rounds)  # k + 1 <= width < 2 (k + 1)
    assert {width for width, _ in rounds} >= {2, 8}  # rounds with no match, and with 6 tokens
    rounds.clear()
    listed.clear()
    zoo.generate(lm, prompt, max_new_tokens=50, assistant_model=draft, num_assistant_tokens=4)
    assert sorted(map(id, listed)) == sorted(map(id, [lm, draft]))
    assert all(width == max(1 << k.bit_length(), 2) for width, k in rounds)


def test_the_stream_gives_zoo_generates_text_several_tokens_a_step(models):
    lm, _ = models
    prompt = TEXT[:40]
    text = zoo.generate(lm, prompt, max_new_tokens=60)  # 36 tokens within the window of 96, the rest past it
    generation = zoo.text.TextGeneration(lm, [ids(prompt, lm)], 60, speculation=dict(prompt_lookup_num_tokens=6))
    gains = []
    for _ in generation.steps():
        gains.append(len(generation.decoding.new_tokens[0]))
    assert prompt + generation.rows[0].text == text
    assert max(np.diff([0] + gains)) > 1  # a step gave several tokens
    pieces = list(zoo.stream(lm, prompt, max_new_tokens=60, assistant_model=models[1], num_assistant_tokens=4))
    assert "".join(pieces) == text


def test_stop_tokens_and_budgets_end_the_row_inside_a_round(models):
    lm, _ = models
    prompt = [ids(TEXT[:40], lm)]
    plain = zoo.generate(lm, prompt, max_new_tokens=30).sequences[0]
    stop = plain[7]  # a token that a round's accepted run reaches
    first = plain.index(stop)
    for options in (dict(prompt_lookup_num_tokens=6), dict(assistant_model=lm, num_assistant_tokens=4)):
        out = zoo.generate(lm, prompt, max_new_tokens=30, stop_token_ids=[stop], **options)
        assert out.sequences[0] == plain[: first + 1]
        for budget in (1, 2, 5, 13):
            assert zoo.generate(lm, prompt, max_new_tokens=budget, **options).sequences[0] == plain[:budget]


@pytest.mark.integration  # top-p with a control compiles programs of their own: two minutes on 2 busy cores
def test_a_seeded_sampled_run_is_reproducible_and_the_seed_matters(models):
    lm, draft = models
    prompt = [ids(TEXT[:30], lm)]
    options = dict(max_new_tokens=30, sampler="top_p", top_p=0.9, temperature=0.8, assistant_model=draft,
                   num_assistant_tokens=4, repetition_penalty=1.3)
    first = zoo.generate(lm, prompt, seed=7, **options).sequences[0]
    assert zoo.generate(lm, prompt, seed=7, **options).sequences[0] == first
    assert zoo.generate(lm, prompt, seed=8, **options).sequences[0] != first


# --- The distribution -------------------------------------------------------------------------

VOCABULARY = 6
DRAWS = 800
TEMPERATURE = 2.0  # a spread distribution: about 19 of the 36 pairs expected 5 times or more


@pytest.fixture(scope="module")
def small():
    """A target and a draft unlike it, over six tokens."""
    made = []
    for seed in (3, 4):
        made.append(randomized(zoo.build("gpt-nano", "causal_lm", vocabulary_size=VOCABULARY, max_sequence_length=16),
                               seed, 1.0))
    return made


def exact_pairs(lm, prompt):
    """(V, V) float64: the model's probability of each first two new tokens
    at `TEMPERATURE`, from its logits in float64."""
    def distribution(rows):
        rows = np.array(rows, "int32")
        logits = ops.convert_to_numpy(lm({"token_ids": rows, "padding_mask": np.ones_like(rows)}))
        logits = logits[:, -1].astype("float64") / TEMPERATURE
        logits -= logits.max(axis=-1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=-1, keepdims=True)

    first = distribution([prompt])[0]  # (V,)
    second = distribution([prompt + [token] for token in range(VOCABULARY)])  # (V, V)
    return first[:, None] * second


def chi_square(counts, expected):
    """The statistic over cells of expected count >= 5 (the rest pooled) and its degrees of freedom."""
    counts, expected = counts.ravel(), expected.ravel()
    big = expected >= 5
    observed = np.append(counts[big], counts[~big].sum())
    wanted = np.append(expected[big], expected[~big].sum())
    keep = wanted > 0
    return float(((observed[keep] - wanted[keep]) ** 2 / wanted[keep]).sum()), int(keep.sum() - 1)


def critical(df, z=3.72):
    """The chi-square quantile of df degrees of freedom at 1 - 1e-4 (Wilson and Hilferty's approximation)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def pair_counts(lm, draft, prompt):
    counts = np.zeros((VOCABULARY, VOCABULARY))
    for seed in range(DRAWS):
        new = zoo.generate(lm, [prompt], max_new_tokens=3, sampler="temperature", temperature=TEMPERATURE,
                           seed=seed, assistant_model=draft, num_assistant_tokens=2,
                           num_assistant_tokens_schedule="constant").sequences[0]
        counts[new[0], new[1]] += 1
    return counts


def test_sampled_tokens_follow_the_models_distribution(small):
    lm, draft = small
    prompt = [1, 2, 3]
    exact = exact_pairs(lm, prompt)
    unlike = exact_pairs(draft, prompt)
    assert 0.5 * np.abs(exact - unlike).sum() > 0.3  # the draft proposes from another distribution
    statistic, df = chi_square(pair_counts(lm, draft, prompt), DRAWS * exact)
    assert df >= 10 and statistic < critical(df), (statistic, df)


class AcceptEverything(speculative.Verify):
    """A broken rule: every draft accepted (the draft's distribution, not the model's)."""

    def accepts(self, u, p_x, q_x):
        return ops.ones_like(u) > 0


def test_the_distribution_test_rejects_a_rule_that_accepts_every_draft(small, monkeypatch):
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=VOCABULARY, max_sequence_length=16)
    lm.set_weights(small[0].get_weights())  # the same model, compiled afresh with the broken rule
    monkeypatch.setattr(speculative, "Verify", AcceptEverything)
    prompt = [1, 2, 3]
    statistic, df = chi_square(pair_counts(lm, small[1], prompt), DRAWS * exact_pairs(lm, prompt))
    assert statistic > critical(df), (statistic, df)


# --- The proposers, the schedule and the refusals --------------------------------------------

def test_prompt_lookup_proposes_what_followed_the_first_match_of_the_longest_ngram():
    tokens = [5, 6, 7, 8, 9, 1, 6, 7, 3, 4, 6, 7]
    assert speculative.prompt_lookup(tokens, 3, 2) == [8, 9, 1]  # "6 7" first seen at 1, then 8 9 1
    assert speculative.prompt_lookup(tokens + [2], 2, 2) == []  # "7 2" and "2" never seen
    assert speculative.prompt_lookup([4, 1, 2, 9, 2], 4, 2) == [9, 2]  # "9 2" unseen: "2" at 2, then 9 2
    assert speculative.prompt_lookup([1, 2, 3, 1, 2], 10, 1) == [3, 1, 2]  # the continuation runs to the end


def test_k_adapts_as_transformers_heuristic(models):
    lm, draft = models
    speculation = speculative.Speculation(lm, 1, assistant_model=draft, num_assistant_tokens=5)
    speculation.adapt(5, 5)
    assert speculation.num_tokens == 7
    speculation.adapt(7, 2)
    assert speculation.num_tokens == 6
    for _ in range(10):
        speculation.adapt(3, 0)
    assert speculation.num_tokens == 1
    fixed = speculative.Speculation(lm, 1, prompt_lookup_num_tokens=4)
    fixed.adapt(4, 4)
    assert fixed.num_tokens == 4 and fixed.acceptance_rate == 1.0


def test_wrong_settings_are_refused_in_one_line(models):
    lm, draft = models
    prompt = [ids("the cat", lm)]
    other = zoo.build("gpt-nano", "causal_lm", vocabulary_size=lm.vocabulary_size + 1, max_sequence_length=CONTEXT)
    cases = [
        (dict(assistant_model=other), "vocabulary has"),
        (dict(prompt_lookup_num_tokens=3, assistant_model=draft), "one proposer"),
        (dict(prompt_lookup_num_tokens=0), "prompt_lookup_num_tokens"),
        (dict(assistant_model=draft, num_assistant_tokens_schedule="fast"), "num_assistant_tokens_schedule"),
        (dict(prompt_lookup_num_tokens=3, logprobs=2), "logprobs"),
        (dict(prompt_lookup_num_tokens=3, sampler="beam"), "beam search"),
    ]
    for options, words in cases:
        with pytest.raises(ValueError, match=words) as raised:
            zoo.generate(lm, prompt, max_new_tokens=4, **options)
        assert "\n" not in str(raised.value)
    with pytest.raises(ValueError, match="one prompt at a time"):
        zoo.generate(lm, prompt * 2, max_new_tokens=4, prompt_lookup_num_tokens=3)
    renamed = CharTokenizer.from_text(TEXT.upper())
    with pytest.raises(ValueError, match="tokenizer differs"):
        speculative.check_draft(lm, zoo.build("gpt-nano", "causal_lm", vocabulary_size=lm.vocabulary_size,
                                              max_sequence_length=CONTEXT, tokenizer=renamed))
