#!/usr/bin/env bash
# The GPU check: run it on a machine with one NVIDIA GPU, from the repository root.
#
#   bash benchmarks/gpu/gpu_check.sh            # log: benchmarks/results/gpu_check.log (or $OUT/gpu_check.log)
#
# In order, all on KERAS_BACKEND=jax:
#   1. benchmarks/gpu/train_gpu.py: GPT-2 small, batch 16 x 1024, bf16 - zoo,
#      keras-hub and nanoGPT in PyTorch, ending `ratio zoo/nanoGPT tokens/s: N.NN`;
#   2. benchmarks/generation/generate.py at GPT-2 width (12 layers, d 768, 12 heads):
#      zoo vs keras-hub new tokens/s;
#   3. the layer, generation and model tests, and the test that they multiply
#      float32 at full precision (tests/conftest.py turns the GPU's TF32 off
#      for the tests only), one line per test as it ends, so that a run cut
#      short still names every result it reached, and each failure's
#      traceback in gpu_failures.log beside the log as it happens.
# Step generate-graphs repeats step 2 with XLA_FLAGS recording the whole decoding
# loop as one CUDA graph (--xla_gpu_enable_command_buffer with WHILE), so the
# device runs every token's step without the host. Step generate-fusion repeats
# it at batch 1 with Triton's heroless priority fusion
# (--xla_gpu_experimental_enable_triton_heroless_priority_fusion), which
# benchmarks/gpu/gpu_program.py counts at 135 kernels per GPT-2 small token for the
# zoo (168 without it) and 154 for keras-hub (233).
# Step levers is the short check to run first on a short lease (an estimated 7 minutes
# on one H100): train_gpu.py with the optimizer levers and the profile, one row
# each beside nanoGPT's (GPU_CHECK_LEVERS replaces the rows), then
# generate.py --profile at batch 1, contexts 256 and 1024 (the decoding loop's
# kernels per new token for the zoo and keras-hub; the first run also times
# the zoo with its loop's Dense kernels as stored, --stored-kernels), without
# and with the heroless fusion:
#     GPU_CHECK_STEPS=levers bash benchmarks/gpu/gpu_check.sh
# GPU_CHECK_TRAIN_ARGS adds arguments to train_gpu.py (rows with levers:
# "--impl torch,zoo,zoo+pad --profile"); GPU_CHECK_GENERATE_SETTINGS replaces
# generate.py's settings (256x1,256x8,1024x1,1024x8).
# Everything goes to the log as well as the screen; each step's exit status is
# logged and a failing step does not stop the next. Steps: GPU_CHECK_STEPS="train generate tests".
# Each step is stopped after its time limit (GPU_CHECK_LIMITS="train=220 generate=170
# tests=480", seconds), so that one hang cannot take a short lease. The
# tests run in GPU_CHECK_WORKERS pytest-xdist processes (default 6; 0 = one
# process), each growing its GPU memory as needed instead of preallocating it.
#
# On a borrowed machine with only minutes of GPU time (a bare CUDA image that
# has python3 3.12 with jax[cuda], torch, numpy, pytest and hypothesis, but not
# Keras and keras-hub, and that cannot reach a package registry):
#   - fetch the missing wheels beforehand, on a machine with pip access, into
#     an ignored folder of the repository:
#         echo /.whl/ >> .git/info/exclude
#         python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#             --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#             --platform manylinux2014_x86_64 -d .whl \
#             keras==3.15.1 keras-hub==0.32.0 namex optree
#     (`unzip -p .whl/NAME-*.whl '*/METADATA' | grep ^Requires-Dist` lists what
#     a wheel needs; keep one version of each; TensorFlow is not needed here:
#     the checks use no tf.data);
#   - carry `.whl` with the working tree and let this script install them:
#         GPU_CHECK_WHEELS=.whl bash benchmarks/gpu/gpu_check.sh
#     which runs `pip install --no-index --no-deps --target /tmp/site .whl/*.whl`
#     and puts /tmp/site and the repository on PYTHONPATH (nothing is installed
#     into the image's own Python);
#   - the whole check takes about 12 minutes of device time on one H100
#     (train_gpu 2: three compilations of GPT-2 small; generate 2; the 431
#     tests over 5 in 6 processes); give the command a time limit that leaves
#     room to rerun one step, e.g.
#         GPU_CHECK_STEPS=train bash benchmarks/gpu/gpu_check.sh
#   - PYTHONUNBUFFERED=1 is set, so the log is complete even if the run is cut off.
# Copy the log's tables into docs/results.md with the card's name and the date.

set -u
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
STEPS=${GPU_CHECK_STEPS:-"train generate tests"}
LOG_DIR=${OUT:-benchmarks/results}
mkdir -p "$LOG_DIR"
LOG="$LOG_DIR/gpu_check.log"
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if [ -n "${GPU_CHECK_WHEELS:-}" ]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$GPU_CHECK_WHEELS"/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi

WORKERS=${GPU_CHECK_WORKERS:-6}
SETTINGS=${GPU_CHECK_GENERATE_SETTINGS:-256x1,256x8,1024x1,1024x8}
WHILE_GRAPHS="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE"
HEROLESS="--xla_gpu_experimental_enable_triton_heroless_priority_fusion=true"
LEVER_ROWS=${GPU_CHECK_LEVERS:-torch,zoo,zoo+flat,zoo+noclip,zoo+nodecay,zoo+sgd,zoo+gradonly,zoo+gradonly+chunked}
LIMITS="train=220 generate=170 generate-fusion=120 tests=480 levers=540 ${GPU_CHECK_LIMITS:-}"

limit() {  # limit NAME: the step's time limit in seconds (the last NAME=S in LIMITS)
    local seconds=600 entry
    for entry in $LIMITS; do
        [ "${entry%%=*}" = "$1" ] && seconds=${entry#*=}
    done
    echo "$seconds"
}

step() {  # step NAME COMMAND...: run within the step's time limit, log, and record the exit status
    local name=$1
    shift
    echo "=== $name: $* ($(date -u +%H:%M:%S) UTC, limit $(limit "$name") s)" | tee -a "$LOG"
    timeout "$(limit "$name")" "$@" 2>&1 | tee -a "$LOG"
    local status=${PIPESTATUS[0]}
    echo "=== $name: exit $status" | tee -a "$LOG"
}

: >"$LOG"
{
    echo "gpu_check $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "no nvidia-smi"
    "$PYTHON" - <<'EOF' 2>&1
import importlib
for name in ("jax", "keras", "keras_hub", "torch", "numpy"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {module.__version__}")
    except Exception as error:  # a missing package is reported, not fatal
        print(f"{name}: {type(error).__name__}: {error}")
import jax
print("jax devices:", jax.devices())
EOF
} | tee -a "$LOG"

for s in $STEPS; do
    case $s in
        tests) step tests env XLA_PYTHON_CLIENT_PREALLOCATE=false ZOO_TEST_FAILURE_LOG="$LOG_DIR/gpu_failures.log" "$PYTHON" -m pytest -v -rfE --tb=short -p no:cacheprovider \
            -p no:benchmark -n "$WORKERS" --junitxml "$LOG_DIR/gpu_tests.xml" \
            tests/test_precision.py tests/layers tests/generation tests/models ;;
        train) step train "$PYTHON" benchmarks/gpu/train_gpu.py ${GPU_CHECK_TRAIN_ARGS:-} ;;
        generate) step generate "$PYTHON" benchmarks/generation/generate.py --layers 12 --width 768 --heads 12 \
            --settings "$SETTINGS" --no-uncached --no-growth --repeats 3 ;;
        generate-graphs) step generate-graphs env XLA_FLAGS="${XLA_FLAGS:-} $WHILE_GRAPHS" \
            "$PYTHON" benchmarks/generation/generate.py --layers 12 --width 768 --heads 12 \
            --settings "$SETTINGS" --no-uncached --no-growth --repeats 3 ;;
        generate-fusion) step generate-fusion env XLA_FLAGS="${XLA_FLAGS:-} $HEROLESS" \
            "$PYTHON" benchmarks/generation/generate.py --layers 12 --width 768 --heads 12 \
            --settings 256x1,1024x1 --no-uncached --no-growth --repeats 3 --profile ;;
        levers) step levers bash -c '"$0" benchmarks/gpu/train_gpu.py --impl "$1" --profile --steps 20;
                "$0" benchmarks/generation/generate.py --layers 12 --width 768 --heads 12 --settings 256x1,1024x1 \
                --no-uncached --no-growth --repeats 3 --profile --stored-kernels;
                XLA_FLAGS="${XLA_FLAGS:-} $2" "$0" benchmarks/generation/generate.py --layers 12 --width 768 --heads 12 \
                --settings 256x1,1024x1 --no-uncached --no-growth --repeats 3 --profile' \
            "$PYTHON" "$LEVER_ROWS" "$HEROLESS" ;;
        *) echo "unknown step $s (expected tests, train, generate, generate-graphs, generate-fusion, levers)" | tee -a "$LOG" ;;
    esac
done
echo "log: $LOG"
