# Every target installs what it needs into a local virtual environment first,
# so `make test` and `make demo` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export TF_CPP_MIN_LOG_LEVEL ?= 3

.PHONY: install test test-tf test-jax test-slow demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,jax,eval]"
	touch $(STAMP)

# The layer and generation tests on the JAX backend, then the whole default
# suite on TensorFlow. Offline; about 8 minutes on 2 cores.
test: $(STAMP)
	KERAS_BACKEND=jax $(PY) -m pytest -q tests/layers tests/generation
	KERAS_BACKEND=tensorflow $(PY) -m pytest -q

test-slow: $(STAMP)
	KERAS_BACKEND=tensorflow $(PY) -m pytest -q -m slow

demo: $(STAMP)
	KERAS_BACKEND=tensorflow $(PY) -m recipes.demo

clean:
	rm -rf $(VENV) build *.egg-info
