# Every target installs what it needs into a local virtual environment first,
# so `make test` and `make demo` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export TF_CPP_MIN_LOG_LEVEL ?= 3
# The data sets by name are read from the offline copy beside the
# repository where it is there (a user's own machine fetches and caches them).
export ZOO_DATA ?= $(abspath ../shared/data)

.PHONY: install browser test test-quick test-jax test-integration test-tf test-jax test-torch test-slow mutate demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,jax,eval,serve,export,gguf]"
	touch $(STAMP)

# The explorer's browser test drives Debian's chromium through its driver;
# installed when missing and apt-get can (as root), else that test skips.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) || \
		  echo "chromium not installed: the explorer's browser test will skip"; }

# The quick suite, offline, with two pytest workers (pytest-xdist; a test file stays on one
# worker, so its module fixtures are built once; WORKERS=N for a larger machine): the layer
# tests and the error messages on JAX, then everything but the end-to-end
# runs on TensorFlow (gpt_char's and bert_classify's smallest commands run twice, equal
# weights, included).
WORKERS ?= 2
# A worker that dies (a crash inside a native library) ends the run with the test it was
# running named: pytest-xdist's file scheduling can otherwise wait forever for the work it
# held.
XDIST := -n $(WORKERS) --dist loadfile --max-worker-restart=0
JAX_QUICK := tests/layers tests/test_error_messages.py
test: $(STAMP) browser
	KERAS_BACKEND=jax $(PY) -m pytest -q $(XDIST) $(JAX_QUICK) --ignore=tests/layers/test_docstrings.py
	KERAS_BACKEND=tensorflow $(PY) -m pytest -q $(XDIST)

# A contributor's inner loop, under a minute: one fast file of each package, on TensorFlow.
QUICK := tests/layers/test_layer_normalization.py tests/generation/test_interface.py \
	tests/tokenizers/test_tokenizers.py tests/data/test_columns.py tests/models/test_config.py \
	tests/checkpoints/test_errors.py tests/training/test_schedules.py tests/text/test_text_api.py \
	tests/serve/test_protocol.py tests/explore/test_app.py tests/recipes/test_flags.py \
	tests/test_layering.py
test-quick: $(STAMP)
	KERAS_BACKEND=tensorflow $(PY) -m pytest -q $(XDIST) $(QUICK)

# The model, generation, training-mode, Llama-family, Gemma, fine-tuning (LoRA reload) and
# loss-precision tests on JAX, the export from JAX, and the CPU kernels' cases of every size
# (`make test` runs the layer tests on JAX, the kernels' larger cases left out);
# `make test-integration` runs them.
JAX_MODELS := tests/generation tests/models/test_training_mode.py tests/models/test_llama.py \
	tests/models/test_gemma.py tests/models/test_finetune.py tests/training/test_loss_dtype.py \
	tests/deployment/test_other_backends.py tests/layers/test_integer_matmul.py
test-jax: $(STAMP)
	KERAS_BACKEND=jax $(PY) -m pytest -q $(XDIST) $(JAX_MODELS) --ignore=tests/layers/test_docstrings.py

# The end-to-end runs (`integration` in pyproject.toml): every recipe's
# smallest run, reloaded and used, on TensorFlow and on JAX, training across
# devices and processes, a fresh clone's first run, a killed run resumed,
# the exports for runtimes. Offline; .ci/run runs it after `make test`.
#
# They run in parts, each a pytest run with workers of their own: a worker keeps every XLA
# program it compiled, and two workers that ran the whole list held over 20 GiB between
# them, more than a small machine has. The speculative decoding cases run in a process of
# their own, last: in a worker that had compiled and dropped hundreds of XLA programs
# before them, the seeded speculative sampling case has died inside TensorFlow's C++
# exception unwinding (libgcc's `_Unwind_Find_FDE`), where on their own they pass.
ALONE := tests/generation/test_speculative.py
INTEGRATION_PART1 := tests/checkpoints tests/deployment tests/models tests/layers tests/fuzz
INTEGRATION_PART2 := tests/generation tests/text tests/tokenizers tests/data tests/reliability
INTEGRATION_PART3 := tests/recipes tests/training
INTEGRATION := KERAS_BACKEND=tensorflow $(PY) -m pytest -q $(XDIST) -m integration --ignore=$(ALONE)
test-integration: $(STAMP) test-jax
	$(INTEGRATION) $(INTEGRATION_PART1)
	$(INTEGRATION) $(INTEGRATION_PART2)
	$(INTEGRATION) $(INTEGRATION_PART3)
	$(INTEGRATION) tests $(addprefix --ignore=,$(INTEGRATION_PART1) $(INTEGRATION_PART2) $(INTEGRATION_PART3))
	KERAS_BACKEND=tensorflow $(PY) -m pytest -q -m integration $(ALONE)

# The same layer, model and generation tests on torch, Keras' third backend,
# in an environment of its own without TensorFlow (keras-hub without its
# dependencies, which pull TensorFlow Text in). On request; torch is not a
# dependency. TORCH picks the wheel, e.g.
#   make test-torch TORCH="torch --index-url https://download.pytorch.org/whl/cpu"
TORCH_VENV ?= .venv-torch
TORCH ?= torch
test-torch:
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install -q $(TORCH)
	$(TORCH_VENV)/bin/python -m pip install -q "keras>=3.8" "numpy>=1.26" "pytest>=8" "hypothesis>=6.100" \
		regex rich absl-py packaging tokenizers
	$(TORCH_VENV)/bin/python -m pip install -q --no-deps "keras-hub>=0.20" -e .
	KERAS_BACKEND=torch $(TORCH_VENV)/bin/python -m pytest -q -p no:cacheprovider \
		tests/layers tests/models tests/generation tests/fuzz tests/test_error_messages.py

# The end-to-end runs, then the recipes' headline figures
# (tests/recipes/figures.py): hours of CPU.
test-slow: test-integration
	KERAS_BACKEND=tensorflow $(PY) -m pytest -q -m slow

# Each mask broken on purpose (tests/mutations) must make the fuzz and
# attention-invariant tests fail; a table of what caught each. On request.
mutate: $(STAMP)
	KERAS_BACKEND=tensorflow $(PY) -m tests.mutations

demo: $(STAMP)
	KERAS_BACKEND=tensorflow $(PY) -m recipes.demo

# The CPU benchmarks behind docs/results.md's tables, each with the page's
# command, one after the other (timings want the cores to themselves). The
# GPU's are benchmarks/gpu/gpu_check.sh. On request.
bench: $(STAMP)
	KERAS_BACKEND=tensorflow $(PY) benchmarks/training/train_throughput.py --steps 200
	KERAS_BACKEND=tensorflow $(PY) benchmarks/training/first_fit.py --repeats 3
	KERAS_BACKEND=tensorflow $(PY) benchmarks/generation/generate.py
	KERAS_BACKEND=tensorflow $(PY) benchmarks/evaluation/score.py
	KERAS_BACKEND=tensorflow $(PY) benchmarks/deployment/serve.py
	KERAS_BACKEND=tensorflow $(PY) benchmarks/deployment/export.py
	KERAS_BACKEND=tensorflow $(PY) benchmarks/deployment/quantize.py
	KERAS_BACKEND=tensorflow $(PY) benchmarks/complexity/complexity.py

clean:
	rm -rf $(VENV) $(TORCH_VENV) build *.egg-info
