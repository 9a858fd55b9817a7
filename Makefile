# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install models lint-imports typecheck screenshots bench clean bundle test-bundle dist

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "Python 3.11 is needed: install python3.11 or run 'make PYTHON=/path/to/python3.11'"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m core.embedding.provision install
	@touch $(STAMP)

install: $(STAMP)

BUNDLE_TOOLS := $(VENV)/.bundle-tools
$(BUNDLE_TOOLS): pyproject.toml | $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bundle]'
	@touch $(BUNDLE_TOOLS)

models: $(STAMP)
	$(PY) -m core.embedding.provision install

run: $(STAMP)
	$(VENV)/bin/memory-studio

lint-imports: $(STAMP)
	$(VENV)/bin/lint-imports

# core/ strictly (must be clean); studio/ against a baseline that may only shrink.
typecheck: $(STAMP)
	$(PY) -m mypy
	$(PY) tools/mypy_baseline.py

test: $(STAMP)
	$(VENV)/bin/lint-imports
	$(PY) -m mypy
	$(PY) tools/mypy_baseline.py
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q

screenshots: $(STAMP)
	@fc-list :lang=zh 2>/dev/null | grep -q . || echo "note: no CJK font found (Debian: apt-get install fonts-noto-cjk); Chinese text will render as boxes"
	QT_QPA_PLATFORM=offscreen $(PY) -m studio.screenshots docs/screenshots

# The one-folder desktop bundle: dist/memory-studio/ (runs without Python; see README "Desktop bundle").
bundle: $(BUNDLE_TOOLS) models
	$(VENV)/bin/pyinstaller --noconfirm --log-level WARN --distpath dist --workpath build/pyinstaller packaging/memory-studio.spec
	@du -sh dist/memory-studio

# Builds the bundle, and the wheel + sdist, into temp folders and runs their self-checks (minutes).
test-bundle: $(BUNDLE_TOOLS) models
	MEMORY_STUDIO_TEST_BUNDLE=1 QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -p no:randomly -m bundle tests/packaging

# A wheel and an sdist in dist/ (pip install dist/memory_studio-*.whl; then `memory-studio models install`).
dist: $(STAMP)
	rm -f dist/memory_studio-*.whl dist/memory_studio-*.tar.gz
	$(PY) -m build --outdir dist .

clean:
	rm -rf $(VENV) .temp build dist
