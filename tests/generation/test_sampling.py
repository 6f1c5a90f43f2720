"""Each row's own sampler (`zoo.generation.samplers`): top-k and top-p on
fixed logits against float64 NumPy references of their definitions, each
row by its own settings; Threefry-2x32 against JAX's; the Gumbel-max draws
distributed as the filtered softmax; and the invariant that matters: a
row's tokens with seed s are the same alone as in a batch of rows with
other seeds, samplers and settings, in `zoo.generate` (on token ids and on
text, inside the window and past it) and in `zoo.stream`; one seed s for
B rows is seeds s, s + 1, ..., one a row."""

import numpy as np
import pytest
from keras import ops

import zoo
from zoo.generation import compiled
from zoo.generation import loop
from zoo.generation.samplers import REMOVED, Sampling, argmax, choose, gumbel, threefry2x32, top_k_top_p

B, V = 4, 12


def reference_kept(logits, top_k, top_p):
    """The ids a row keeps, in float64, as the definitions read: the top_k
    likeliest; of them, renormalised and most likely first, each while the
    probability before it is below top_p."""
    order = np.argsort(-np.asarray(logits, "float64"), kind="stable")[:top_k]
    probabilities = np.exp(logits[order] - logits[order].max())
    probabilities /= probabilities.sum()
    kept, before = [], 0.0
    for token, probability in zip(order, probabilities):
        if before >= top_p and top_p < 1:
            break
        kept.append(int(token))
        before += probability
    return set(kept)


@pytest.fixture
def logits():
    return (np.random.default_rng(0).normal(size=(B, V)) * 2).astype("float32")


@pytest.mark.parametrize("top_k, top_p", [
    ([V, V, V, V], [1.0, 1.0, 1.0, 1.0]),  # every token
    ([3, 1, V, 7], [1.0, 1.0, 1.0, 1.0]),  # top-k alone
    ([V, V, V, V], [0.5, 0.9, 0.05, 1.0]),  # top-p alone
    ([5, V, 2, 9], [0.8, 0.3, 1.0, 0.6]),  # each row its own of both
])
def test_top_k_and_top_p_keep_each_rows_tokens_as_the_definitions(logits, top_k, top_p):
    got = ops.convert_to_numpy(top_k_top_p(ops.convert_to_tensor(logits), ops.convert_to_tensor(np.int32(top_k)),
                                           ops.convert_to_tensor(np.float32(top_p))))
    for row in range(B):
        expected = reference_kept(logits[row], top_k[row], top_p[row])
        assert set(np.flatnonzero(got[row] > REMOVED / 2).tolist()) == expected
        np.testing.assert_array_equal(got[row, sorted(expected)], logits[row, sorted(expected)])


def test_threefry_is_jaxs_and_the_published_known_answers():
    from jax.extend.random import threefry_2x32

    def ours(key, counter):
        key, counter = np.asarray(key, "uint32").view("int32"), np.asarray(counter, "uint32").view("int32")
        words = threefry2x32((ops.convert_to_tensor(key[0]), ops.convert_to_tensor(key[1])),
                             (ops.convert_to_tensor(counter[0]), ops.convert_to_tensor(counter[1])))
        return np.stack([ops.convert_to_numpy(w) for w in words]).view("uint32")

    # Salmon et al.'s known answers for Threefry-2x32, 20 rounds (Random123's kat_vectors).
    assert ours([0, 0], [0, 0]).tolist() == [0x6B200159, 0x99BA4EFE]
    assert ours([2**32 - 1] * 2, [2**32 - 1] * 2).tolist() == [0x1CB996FC, 0xBB002BE7]
    assert ours([0x13198A2E, 0x03707344], [0x243F6A88, 0x85A308D3]).tolist() == [0xC4923A9C, 0x483DF7A0]
    rng = np.random.default_rng(1)
    key, counter = rng.integers(0, 2**32, (2,), "uint32"), rng.integers(0, 2**32, (2, 64), "uint32")
    expected = np.asarray(threefry_2x32(key, counter.reshape(-1))).reshape(2, 64)
    np.testing.assert_array_equal(ours(key[:, None], counter), expected)


@pytest.mark.parametrize("sampler, temperature", [("temperature", 0.7), ("top_k", 1.5), ("top_p", 1.0)])
def test_the_draws_follow_the_rows_filtered_softmax(logits, sampler, temperature):
    """One row's logits and seed at 4000 positions (the positions as rows
    of one call): the token frequencies are the sampler's probabilities
    (temperature, then top-k / top-p renormalised)."""
    positions = 4000
    sampling = Sampling(positions, V, sampler=sampler, temperature=temperature, top_k=3, top_p=0.6, seed=[11] * positions)
    arrays = {name: ops.convert_to_tensor(value) for name, value in sampling.arrays().items()}
    repeated = ops.convert_to_tensor(np.repeat(logits[:1], positions, axis=0))
    tokens = ops.convert_to_numpy(choose(repeated, arrays, np.arange(positions, dtype="int32"), sampling.variant))
    scaled = logits[0].astype("float64") / temperature
    kept = sorted(reference_kept(scaled, 3 if sampler == "top_k" else V, 0.6 if sampler == "top_p" else 1.0))
    probabilities = np.zeros(V)
    probabilities[kept] = np.exp(scaled[kept] - scaled[kept].max())
    probabilities /= probabilities.sum()
    frequencies = np.bincount(tokens, minlength=V) / positions
    np.testing.assert_allclose(frequencies, probabilities, atol=0.03)
    assert set(np.flatnonzero(frequencies)) == set(kept)


def test_a_greedy_row_among_sampled_ones_takes_the_likeliest_token(logits):
    sampling = Sampling(B, V, sampler=["temperature", "greedy", "top_p", "greedy"], temperature=3.0, seed=0)
    arrays = {name: ops.convert_to_tensor(value) for name, value in sampling.arrays().items()}
    for position in range(5):
        tokens = ops.convert_to_numpy(choose(ops.convert_to_tensor(logits), arrays, position, sampling.variant))
        assert tokens[[1, 3]].tolist() == np.argmax(logits[[1, 3]], axis=-1).tolist()


def test_argmax_is_the_first_index_of_each_rows_largest_value():
    rng = np.random.default_rng(3)
    values = rng.integers(-3, 4, size=(64, 49)).astype("float32")  # many ties
    values[0] = -np.inf
    values[1, -1] = np.inf
    values[2] = REMOVED
    values[3, [5, 9]] = 100.0
    got = ops.convert_to_numpy(argmax(ops.convert_to_tensor(values)))
    assert got.dtype == np.int32
    assert got.tolist() == np.argmax(values, axis=-1).tolist()
    assert got[3] == 5 and got[1] == 48
    assert ops.convert_to_numpy(argmax(ops.convert_to_tensor(np.full((1, 7), np.nan, "float32")))).tolist() == [6]


def test_a_chosen_tokens_probability_is_its_entry_of_the_float64_softmax():
    rng = np.random.default_rng(4)
    logits = (rng.standard_normal((5, 301)) * 8).astype("float32")
    logits[1, :-2] = REMOVED
    tokens = np.array([0, 300, 7, 150, int(np.argmax(logits[4]))], "int32")
    shifted = logits.astype("float64") - logits.max(axis=-1, keepdims=True)
    expected = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    got = ops.convert_to_numpy(loop.record(ops.convert_to_tensor(logits), ops.convert_to_tensor(tokens))["probability"])
    np.testing.assert_allclose(got, expected[np.arange(5), tokens], rtol=1e-5, atol=1e-30)
    logprob = loop.record(ops.convert_to_tensor(logits), ops.convert_to_tensor(tokens), logprobs=0)["probability"]
    np.testing.assert_allclose(got, ops.convert_to_numpy(logprob), rtol=1e-5, atol=1e-30)


def test_a_rows_noise_depends_on_its_seed_and_position_alone():
    keys = Sampling(3, V, seed=[5, 6, 5]).key
    noise = ops.convert_to_numpy(gumbel(ops.convert_to_tensor(keys), 7, V))
    alone = ops.convert_to_numpy(gumbel(ops.convert_to_tensor(keys[1:2]), 7, V))
    # The same bits; their logarithms may round apart by an ulp where a
    # backend vectorises them differently for another shape.
    np.testing.assert_allclose(noise[1:2], alone, rtol=1e-6)
    np.testing.assert_allclose(noise[0], noise[2], rtol=1e-6)
    assert not np.allclose(noise[0], noise[1])
    assert not np.allclose(noise[0], ops.convert_to_numpy(gumbel(ops.convert_to_tensor(keys[:1]), 8, V))[0])


def test_one_seed_for_a_batch_is_one_seed_a_row_counting_up():
    np.testing.assert_array_equal(Sampling(3, V, seed=2**64 - 1).key, Sampling(3, V, seed=[-1, 0, 1]).key)
    assert Sampling(1, V, seed=2**32).key.view("uint32").tolist() == [[0, 1]]


@pytest.mark.parametrize("settings, message", [
    (dict(sampler=["greedy", "top_k"]), "`sampler`: expected one value or 4"),
    (dict(sampler="nucleus"), "Unknown sampler 'nucleus'"),
    (dict(sampler=["greedy", "beam", "greedy", "greedy"]), "not a row's sampler"),
    (dict(sampler="top_k", top_k=[1, 2, V + 1, 3]), f"`top_k` must be an integer in [1, {V}]"),
    (dict(sampler="top_p", top_p=[0.5, 0.0, 0.9, 1.0]), "`top_p` must be in (0, 1]"),
    (dict(sampler="temperature", temperature=[1.0, 1.0, -1.0, 1.0]), "`temperature` must be a number > 0"),
    (dict(seed=[1, 2, "3", 4]), "`seed` must be an integer or None"),
    (dict(seed=[1, 2]), "`seed`: expected one integer or 4"),
])
def test_bad_row_settings_are_refused_in_one_line(settings, message):
    with pytest.raises(ValueError) as error:
        Sampling(B, V, **settings)
    assert message in str(error.value) and "\n" not in str(error.value)


# --- In the decoding engine -----------------------------------------------------------------------

CONTEXT = 32
ROWS = dict(sampler=["top_p", "temperature", "greedy", "top_k"], temperature=[0.9, 1.6, 1.0, 1.2],
            top_p=[0.7, 0.9, 0.9, 0.9], top_k=[50, 50, 50, 4], seed=[3, 8, 5, 3])


@pytest.fixture(scope="module")
def lm():
    import keras

    from zoo.tokenizers import CharTokenizer

    keras.utils.set_random_seed(1)
    tokenizer = CharTokenizer.from_text("abcdefghij ROMEO:\n")
    return zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), max_sequence_length=CONTEXT,
                     initializer_range=0.3, tokenizer=tokenizer)


def row(settings, r):
    return {name: value[r] for name, value in settings.items()}


def test_each_rows_tokens_are_the_same_alone_as_in_a_batch_of_other_samplers_and_seeds(lm):
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8], [2, 2], [9, 1, 4, 4]]  # ragged: right-padded in the batch
    batch = zoo.generate(lm, prompts, max_new_tokens=20, **ROWS).sequences
    for r, prompt in enumerate(prompts):
        assert zoo.generate(lm, [prompt], max_new_tokens=20, **row(ROWS, r)).sequences[0] == batch[r]
    assert batch[0] != zoo.generate(lm, prompts[:1], max_new_tokens=20, **dict(row(ROWS, 0), seed=4)).sequences[0]


def test_text_past_the_window_and_the_stream_are_each_rows_alone(lm):
    prompts = ["ROMEO:", "abc de", "hij ab", "ROMEO "]  # of one length: the rows alone share compiled shapes
    batch = zoo.generate(lm, prompts, max_new_tokens=40, **ROWS)  # past the window of 32
    for r, prompt in enumerate(prompts):
        assert zoo.generate(lm, prompt, max_new_tokens=40, **row(ROWS, r)) == batch[r]
    for r in (0, 3):  # top-p and top-k, token by token
        stream = zoo.stream(lm, prompts[r], max_new_tokens=40, skip_prompt=True, **row(ROWS, r))
        assert prompts[r] + "".join(stream) == batch[r]


def test_n_samples_of_one_prompt_with_seed_s_are_seeds_s_to_s_plus_n_minus_1_one_at_a_time(lm):
    options = dict(max_new_tokens=16, sampler="top_p", top_p=0.95, temperature=1.5)
    samples = zoo.generate(lm, [[1, 2, 3]] * 4, seed=40, **options).sequences
    assert samples == [zoo.generate(lm, [[1, 2, 3]], seed=40 + i, **options).sequences[0] for i in range(4)]
    assert len({tuple(s) for s in samples}) > 1


def test_seeds_and_settings_are_inputs_of_one_compiled_program(lm):
    zoo.generate(lm, [[1, 2, 3], [4, 5]], max_new_tokens=6, sampler="top_p", top_p=0.8, seed=1)
    traced = compiled.trace_count()
    zoo.generate(lm, [[1, 2, 3], [4, 5]], max_new_tokens=6, sampler=["top_k", "greedy"], top_k=3, temperature=[0.5, 1],
                 seed=[9, 2])
    assert compiled.trace_count() == traced
    zoo.generate(lm, [[1, 2, 3]], max_new_tokens=6)
    traced = compiled.trace_count()
    zoo.generate(lm, [[1, 2, 3]], max_new_tokens=6, seed=3)  # greedy reads no seed: the same program
    assert compiled.trace_count() == traced
