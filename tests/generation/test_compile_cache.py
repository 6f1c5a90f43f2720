"""Compiled once per machine: lengths bucketed by default change no token
and share programs; the persistent cache's folder is keyed safely and can
be switched off; a second process loads what the first compiled; a
corrupt entry is rebuilt, never crashed on; a compilation says so on
stderr."""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

import zoo
from zoo import compile_cache
from zoo.generation import Decoding, beam_search, trace_count

PROMPTS = [[5, 17, 42, 8], [9, 3], [60, 61, 62, 63, 64, 65, 66, 67, 68]]
SOURCES = [[11, 12, 13, 14, 15], [21, 22], [31, 32, 33, 34, 35, 36, 37]]


def _scrambled(name, seed=0):
    """A tiny model whose weights are scrambled to N(0, 0.3), so that it
    emits varied tokens and an equality is not met by a constant output."""
    keras.utils.set_random_seed(seed)
    model = zoo.build(name) if name == "transformer-tiny" else zoo.build(name, task="causal_lm")
    rng = np.random.default_rng(seed)
    for w in model.weights:
        if "norm" not in w.path:
            w.assign(rng.normal(0.0, 0.3, w.shape).astype(w.dtype))
    return model


@pytest.fixture(scope="module", params=["gpt-nano", "llama-nano", "transformer-tiny"])
def model(request):
    return _scrambled(request.param)


def _inputs(model):
    if model.is_encoder_decoder:
        return [[1]] * len(SOURCES), dict(source=SOURCES)
    return PROMPTS, {}


def test_bucketed_lengths_change_no_token(model):
    prompts, source = _inputs(model)
    exact = Decoding(model, prompts, 8, bucket=False, **source).run()
    bucketed = Decoding(model, prompts, 8, **source).run()  # the default: "lengths"
    assert bucketed.request.shapes[1:3] != exact.request.shapes[1:3]  # the shapes were rounded up
    assert bucketed.new_tokens == exact.new_tokens
    assert len({tuple(row) for row in exact.new_tokens}) > 1  # varied rows, not a constant output


def test_one_beam_bucketed_is_exact_greedy(model):
    """Beam search buckets its lengths; with one beam it is greedy
    decoding, here in exact shapes."""
    prompts, source = _inputs(model)
    beams = beam_search(model, prompts, 7, num_beams=1, early_stopping=True, **source)
    greedy = Decoding(model, prompts, 7, bucket=False, **source).run()
    assert [row[0] for row in beams.sequences] == greedy.new_tokens
    assert beams.token_ids.shape[-1] == max(map(len, prompts)) + 7  # the bucket is cut off


def test_new_lengths_and_budgets_reuse_programs():
    model = _scrambled("gpt-nano", 1)
    zoo.generate(model, [[1, 2, 3]], max_new_tokens=5)
    beam_search(model, [[1, 2, 3]], 5, num_beams=2)
    traces = trace_count()
    zoo.generate(model, [[4, 5, 6, 7, 8, 9, 10]], max_new_tokens=9)  # another prompt length and budget
    beam_search(model, [[4, 5, 6, 7, 8, 9, 10]], 9, num_beams=2)
    assert trace_count() == traces


def test_a_compilation_is_said_on_stderr(capfd):
    model = _scrambled("gpt-nano", 2)
    zoo.generate(model, [[1, 2]] * 5, max_new_tokens=4)  # a batch no other test compiles
    captured = capfd.readouterr()
    assert "zoo: compiling the generation loop for batch 5, prompt 16, length 32 ..." in captured.err
    assert "zoo:" not in captured.out
    zoo.generate(model, [[1, 2]] * 5, max_new_tokens=4)  # compiled already: nothing said
    assert "zoo:" not in capfd.readouterr().err


def test_the_folder_is_keyed_by_versions_flags_and_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOO_HOME", str(tmp_path))
    here = compile_cache.folder("jax")
    assert here.parent == tmp_path / "compiled" and here.name.startswith("jax-")
    assert compile_cache.folder("tensorflow") != here
    monkeypatch.setattr(compile_cache, "machine", lambda: "x86_64 model name=another CPU | flags=sse2")
    assert compile_cache.folder("jax") != here
    monkeypatch.undo()
    monkeypatch.setenv("ZOO_HOME", str(tmp_path))
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
    assert compile_cache.folder("jax") != here


def test_it_switches_off(monkeypatch):
    monkeypatch.setattr(compile_cache, "_CONFIGURED", {})
    monkeypatch.setenv("ZOO_COMPILE_CACHE", "0")
    monkeypatch.setenv("TF_XLA_FLAGS", f"--tf_xla_persistent_cache_directory={compile_cache.folder('tensorflow')}")
    assert not compile_cache.enabled()
    assert compile_cache.configure("tensorflow") is None
    assert "persistent_cache" not in os.environ["TF_XLA_FLAGS"]  # a parent zoo's folder is dropped too


def test_a_user_folder_is_kept(monkeypatch, tmp_path):
    monkeypatch.setattr(compile_cache, "_CONFIGURED", {})
    monkeypatch.setenv("TF_XLA_FLAGS", f"--tf_xla_persistent_cache_directory={tmp_path}")
    assert compile_cache.configure("tensorflow") == tmp_path


def test_entries_that_do_not_read_back_are_found(tmp_path):
    key = _varint
    good = tmp_path / "xla_compile_cache__12__34__XLA_CPU_JIT.pb"
    header = b"\x08" + key(12) + b"\x10" + key(34) + b"\x1a\x0bXLA_CPU_JIT"
    good.write_bytes(b"\x0a" + key(len(header)) + header + b"\x12\x02\x08\x01" + b"\x1a\x03abc")
    assert compile_cache._tensorflow_entry_reads(good)
    cut = tmp_path / "xla_compile_cache__12__34__XLA_CPU_JIT.pb.cut"
    cut.write_bytes(good.read_bytes()[:-2])
    assert not compile_cache._tensorflow_entry_reads(cut)
    foreign = tmp_path / "xla_compile_cache__99__34__XLA_CPU_JIT.pb"  # another program's entry under this name
    foreign.write_bytes(good.read_bytes())
    assert not compile_cache._tensorflow_entry_reads(foreign)
    garbage = tmp_path / "xla_compile_cache__1__2__XLA_CPU_JIT.pb"
    garbage.write_bytes(os.urandom(100))
    assert not compile_cache._tensorflow_entry_reads(garbage)


def _varint(n):
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out


_CHILD = textwrap.dedent("""
    import json, keras, numpy as np, zoo
    keras.utils.set_random_seed(0)
    lm = zoo.build("gpt-nano", task="causal_lm")
    rng = np.random.default_rng(0)
    for w in lm.weights:
        if "norm" not in w.path:
            w.assign(rng.normal(0.0, 0.3, w.shape).astype(w.dtype))
    print(json.dumps(zoo.generate(lm, [[5, 7, 9]], max_new_tokens=12).sequences))
""")


def _child(home, backend):
    env = {**os.environ, "ZOO_HOME": str(home), "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("TF_XLA_FLAGS", None)
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1], [line for line in done.stderr.splitlines() if "zoo:" in line]


def _entries(home):
    return {path: path.stat().st_mtime_ns for path in (home / "compiled").rglob("*") if path.is_file()}


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_second_process_loads_what_the_first_compiled(tmp_path, backend):
    tokens, said = _child(tmp_path, backend)
    written = _entries(tmp_path)
    assert written and any("compiling the generation loop" in line for line in said)
    again, said = _child(tmp_path, backend)
    assert again == tokens
    assert _entries(tmp_path) == written  # nothing compiled, nothing written
    assert all("loaded from the compilation cache" in line for line in said), said


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_corrupt_entry_is_rebuilt(tmp_path, backend):
    tokens, _ = _child(tmp_path, backend)
    for path in _entries(tmp_path):
        path.write_bytes(os.urandom(100))
    again, said = _child(tmp_path, backend)  # compiles again, and says so
    assert again == tokens
    assert any("compiling the generation loop" in line and "loaded" not in line for line in said), said
    # The second process removed the entry (TensorFlow's: and traced the
    # program again, under a new name); the third writes it again.
    for _ in range(2):
        third, said = _child(tmp_path, backend)
        assert third == tokens
    assert all("loaded from the compilation cache" in line for line in said), said
