"""benchmarks/gpu/gpu_program.py: reading XLA's optimised programs (kernels,
loops, bytes written), capturing the first jitted call, and, where JAX's
CUDA plugin is installed, compiling the zoo's and keras-hub's generation
for an H100 without one."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"
sys.path.insert(0, str(BENCHMARKS))

import gpu_program  # noqa: E402

# A scheduled GPU program in the form XLA prints it, cut down: a loop whose
# body launches a fusion, a custom call, an in-place cache write and a copy,
# among instructions that launch nothing.
PROGRAM = """HloModule jit_generate, is_scheduled=true

%fused_reduce (param_0: f32[768,3072]) -> f32[3072] {
  %param_0 = f32[768,3072]{1,0} parameter(0)
  ROOT %reduce.1 = f32[3072]{0} reduce(%param_0, %constant), dimensions={0}, to_apply=%add
}

%body (state: (s32[], f32[1,2,12,256,64], f32[768,3072])) -> (s32[], f32[1,2,12,256,64], f32[768,3072]) {
  %state = (s32[], f32[1,2,12,256,64]{4,3,2,1,0}, f32[768,3072]{1,0}) parameter(0)
  %get-tuple-element.1 = f32[1,2,12,256,64]{4,3,2,1,0} get-tuple-element(%state), index=1
  %get-tuple-element.2 = f32[768,3072]{1,0} get-tuple-element(%state), index=2
  %loop_multiply_fusion = f32[3072,768]{1,0} fusion(%get-tuple-element.2), kind=kLoop, calls=%fused_multiply
  %input_reduce_fusion = (f32[3072]{0}, f32[3072]{0}) fusion(%loop_multiply_fusion), kind=kInput, calls=%fused_reduce
  %bitcast.3 = f32[12,256]{1,0} bitcast(%input_reduce_fusion)
  %cublas-gemm.1 = (f32[1,50304]{1,0}, s8[4194304]{0}) custom-call(%bitcast.3), custom_call_target="__cublas$gemm"
  %loop_dynamic_update_slice_fusion = f32[1,2,12,256,64]{4,3,2,1,0} fusion(%get-tuple-element.1), kind=kLoop
  %copy.4 = bf16[1,1024]{1,0} copy(%bitcast.3)
  %constant.5 = s32[] constant(1)
  ROOT %tuple.6 = (s32[], f32[1,2,12,256,64]{4,3,2,1,0}, f32[768,3072]{1,0}) tuple(%constant.5, %loop_dynamic_update_slice_fusion, %get-tuple-element.2)
}

%condition (state.1: (s32[], f32[1,2,12,256,64], f32[768,3072])) -> pred[] {
  %state.1 = (s32[], f32[1,2,12,256,64]{4,3,2,1,0}, f32[768,3072]{1,0}) parameter(0)
  ROOT %loop_compare_fusion = pred[] fusion(%state.1), kind=kLoop, calls=%fused_compare
}

ENTRY %main (cache: f32[1,2,12,256,64], kernel: f32[768,3072]) -> f32[1,2,12,256,64] {
  %cache = f32[1,2,12,256,64]{4,3,2,1,0} parameter(0)
  %kernel = f32[768,3072]{1,0} parameter(1)
  %prompt_fusion = f32[768,3072]{1,0} fusion(%kernel), kind=kLoop, calls=%fused_prompt
  %tuple = (s32[], f32[1,2,12,256,64]{4,3,2,1,0}, f32[768,3072]{1,0}) tuple(%constant, %cache, %prompt_fusion)
  %while.1 = (s32[], f32[1,2,12,256,64]{4,3,2,1,0}, f32[768,3072]{1,0}) while(%tuple), condition=%condition, body=%body
  ROOT %get-tuple-element.9 = f32[1,2,12,256,64]{4,3,2,1,0} get-tuple-element(%while.1), index=1
}
"""


def test_the_bytes_of_a_shape():
    assert gpu_program.nbytes("f32[3072,768]{1,0}") == 3072 * 768 * 4
    assert gpu_program.nbytes("bf16[1,1024]{1,0}") == 2048
    assert gpu_program.nbytes("pred[7]{0}") == 7
    assert gpu_program.nbytes("s8[16]{0}") == 16
    assert gpu_program.nbytes("(f32[3072]{0}, f32[3072]{0})") == 2 * 3072 * 4
    assert gpu_program.nbytes("f32[]") == 4
    assert gpu_program.nbytes("f8e4m3fn[10]{0}") == 10
    assert gpu_program.nbytes("s4[6]{0}") == 3


def test_the_computations_and_the_entry_are_read():
    found, entry = gpu_program.computations(PROGRAM)
    assert entry == "main"
    assert set(found) == {"fused_reduce", "body", "condition", "main"}
    assert len(found["body"]) == 11


def test_a_loop_body_launches_its_fusions_custom_calls_and_copies_only():
    (body, condition), = gpu_program.loops(PROGRAM)
    assert [(name, opcode) for name, opcode, _ in body] == [
        ("loop_multiply_fusion", "fusion"),
        ("input_reduce_fusion", "fusion"),  # a multi-output fusion: a tuple shape
        ("cublas-gemm.1", "custom-call"),
        ("loop_dynamic_update_slice_fusion", "fusion"),
        ("copy.4", "copy"),
    ]
    assert [name for name, _, _ in condition] == ["loop_compare_fusion"]
    # Written outside the cache: the multiply's temporary, the reduction's two
    # outputs, the product with its workspace, the copy; not the cache write.
    assert gpu_program.written(body) == 3072 * 768 * 4 + 2 * 3072 * 4 + 50304 * 4 + 4194304 + 2048


def test_the_report_names_the_loops_and_their_kernels():
    line = gpu_program.describe(PROGRAM)
    assert line.startswith("loop: 5 kernels per new token (+ 1 in the condition); ")
    assert "13.2 MB written per token" in line
    assert gpu_program.describe(PROGRAM.replace(" while(", " call(")) == "no loop"


def test_the_first_jitted_call_is_captured_and_compiled():
    import jax

    jit = jax.jit

    def run():
        double = jax.jit(lambda x: jax.lax.fori_loop(0, 3, lambda i, y: jax.numpy.tanh(y) * 2.0, x))
        double(np.ones((4, 8), "float32"))
        raise AssertionError("the jitted call ran")

    text, function = gpu_program.compiled_program(run, jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0]))
    assert jax.jit is jit  # restored
    (body, _), = gpu_program.loops(text)
    assert body  # the CPU's program: its loop body launches at least the tanh and the product
    with pytest.raises(RuntimeError, match="no jitted call"):
        gpu_program.compiled_program(lambda: None, None)


@pytest.mark.parametrize("argv, message", [
    (["--rows", "zoo,torch"], "--rows 'zoo,torch': expected a comma-separated list of zoo, hub (or --train rows)"),
    (["--contexts", "256,4"], "--contexts 256,4: each must exceed the 8-token prompt"),
    (["--contexts", "a"], "--contexts 'a': expected comma-separated numbers"),
    (["--width", "100", "--heads", "12"], "--width 100 is not a multiple of --heads 12"),
    (["--generate-batch", "0"], "--generate-batch 0: expected a positive number of rows"),
    (["--family", "llama", "--key-value-heads", "5"], "--key-value-heads 5 does not divide --heads 12"),
    (["--family", "llama", "--train", "zoo"], "--family llama is for the generation rows"),
])
def test_bad_arguments_are_refused_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit):
        gpu_program.parse(argv)
    assert message in capsys.readouterr().err


def has_cuda_plugin():
    try:
        return importlib.util.find_spec("jax_plugins.xla_cuda12") is not None
    except ModuleNotFoundError:  # no jax_plugins package at all
        return False


@pytest.mark.skipif(not has_cuda_plugin(), reason="compiling for a GPU needs JAX's CUDA plugin (the jax-cuda extra)")
@pytest.mark.parametrize("family", [[], ["--family", "llama", "--key-value-heads", "1"]], ids=["gpt", "llama"])
def test_generation_compiles_for_an_h100_without_one(family):
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_program.py"), "--layers", "2", "--width", "64", "--heads", "2",
         "--vocab", "130", "--contexts", "40", *family],
        capture_output=True, text=True, env=env, cwd=BENCHMARKS, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "compiled for NVIDIA H100 80GB HBM3 without one" in lines[0]
    zoo, hub = lines[1:3]
    assert "zoo" in zoo and "keras-hub" in hub
    assert "kernels per new token" in zoo and "kernels per new token" in hub
