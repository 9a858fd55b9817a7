# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install models lint-imports screenshots bench clean

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "Python 3.11 is needed: install python3.11 or run 'make PYTHON=/path/to/python3.11'"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m core.embedding.provision install
	@touch $(STAMP)

install: $(STAMP)

models: $(STAMP)
	$(PY) -m core.embedding.provision install

run: $(STAMP)
	$(VENV)/bin/memory-studio

lint-imports: $(STAMP)
	$(VENV)/bin/lint-imports

test: $(STAMP)
	$(VENV)/bin/lint-imports
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q

screenshots: $(STAMP)
	@fc-list :lang=zh 2>/dev/null | grep -q . || echo "note: no CJK font found (Debian: apt-get install fonts-noto-cjk); Chinese text will render as boxes"
	QT_QPA_PLATFORM=offscreen $(PY) -m studio.screenshots docs/screenshots

clean:
	rm -rf $(VENV) .temp
