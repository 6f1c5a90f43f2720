"""benchmarks/gpu/kernel_profile.py: each kernel of a trace is named by the JAX
scope of the instruction it runs (its own metadata, its fused computation's
or its operand's), and generate.py's profile splits the decoding loop from
the prompt, on a CPU too."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"

PROGRAM = """HloModule jit_train_step, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fused_computation.7 (param_0.1: f32[4]) -> f32[4] {
  %param_0.1 = f32[4]{0} parameter(0)
  %constant.2 = f32[] constant(2)
  %broadcast.3 = f32[4]{0} broadcast(%constant.2), dimensions={}
  ROOT %multiply.4 = f32[4]{0} multiply(%param_0.1, %broadcast.3), metadata={op_name="jit(train_step)/adam_w/mul" stack_frame_id=3}
}

%wrapped_convert_computation (param_0.2: f32[4]) -> f32[4] {
  %param_0.2 = f32[4]{0} parameter(0)
  ROOT %copy.5 = f32[4]{0} copy(%param_0.2)
}

ENTRY %main.9 (Arg_0.1: f32[4]) -> f32[4] {
  %Arg_0.1 = f32[4]{0} parameter(0)
  %tanh.2 = f32[4]{0} tanh(%Arg_0.1), metadata={op_name="jit(train_step)/jvp(gpt_backbone)/tanh"}
  %neg.3 = f32[4]{0} negate(%tanh.2), metadata={op_name="jit(train_step)/transpose(jvp(gpt_backbone))/neg"}
  %wrapped_convert = f32[4]{0} fusion(%neg.3), kind=kLoop, calls=%wrapped_convert_computation
  ROOT %multiply_fusion = f32[4]{0} fusion(%wrapped_convert), kind=kLoop, calls=%fused_computation.7
}
"""


def _kernel_profile():
    spec = importlib.util.spec_from_file_location("kernel_profile", BENCHMARKS / "kernel_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_kernel_is_named_by_its_scope(tmp_path):
    kernel_profile = _kernel_profile()
    (tmp_path / "module_0012.jit_train_step.sm_9.0_gpu_after_optimizations.txt").write_text(PROGRAM)
    names = kernel_profile._op_names(str(tmp_path), 12)
    assert names["tanh.2"].endswith("jvp(gpt_backbone)/tanh")  # its own metadata
    assert names["multiply_fusion"] == "jit(train_step)/adam_w/mul"  # its fused computation's root
    assert names["wrapped_convert"].endswith("transpose(jvp(gpt_backbone))/neg")  # its operand's
    assert kernel_profile._op_names(str(tmp_path), 13) == {}  # another program: nothing named
    events = [("tanh", 2e6, "tanh.2", 12), ("neg", 1e6, "wrapped_convert", 12), ("mul", 3e6, "multiply_fusion", 12),
              ("mul", 3e6, "multiply_fusion", 12), ("copy", 1e6, "copy.9", 12)]
    summary = kernel_profile.summarize(events, steps=2, dump_dir=str(tmp_path), parts=kernel_profile.train_parts)
    assert summary["launches"] == 2.5 and summary["busy_ms"] == 5.0
    assert summary["top"][0] == (3.0, "mul")
    assert summary["parts"] == {"optimizer": 3.0, "forward": 1.0, "backward": 0.5, "unnamed": 0.5}
    assert summary["part_launches"]["optimizer"] == 1.0
    annotated = kernel_profile._annotated({"annotation": "mul:#hlo_op=multiply_fusion,hlo_module=jit_train_step,program_id=12#"})
    assert (annotated["hlo_op"], annotated["program_id"]) == ("multiply_fusion", "12")  # a GPU trace may keep them so
    line = kernel_profile.describe(summary)[0]
    assert line.startswith("2 kernels per step, 5.00 ms of kernel time per step; optimizer 3.00 ms")
    # By kind (the name without its number), all kernels or one part's.
    events.append(("mul.3", 1e6, "multiply_fusion", 12))
    assert kernel_profile.kinds(events, steps=2) == [("mul", 3.5, 1.5), ("tanh", 1.0, 0.5), ("neg", 0.5, 0.5),
                                                     ("copy", 0.5, 0.5)]
    assert kernel_profile.kinds(events, 2, str(tmp_path), kernel_profile.train_parts, "optimizer") == [("mul", 3.5, 1.5)]
    assert kernel_profile.kinds(events, 2, str(tmp_path), kernel_profile.train_parts, "unnamed") == [("copy", 0.5, 0.5)]


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="the profile reads a jax.profiler trace")
def test_generate_profiles_the_decoding_loop_per_new_token():
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS.parent / "generation" / "generate.py"), "--settings", "24x1", "--no-growth", "--no-uncached",
         "--repeats", "1", "--layers", "1", "--width", "32", "--heads", "2", "--profile", "--stored-kernels"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(BENCHMARKS.parents[1])},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loops = [line for line in done.stdout.splitlines() if "the loop launches" in line]
    assert [line.split(":")[0].strip() for line in loops] == ["zoo", "zoo-stored", "keras-hub"], done.stdout
    counts = [float(line.split("launches")[1].split()[0]) for line in loops]
    for line, kernels in zip(loops, counts):
        assert 10 <= kernels <= 200, line  # one layer's cached step, the head and the sampler
    assert counts[0] == counts[1], loops  # on a CPU the loop carries the kernels as stored either way
