# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install lock models lint-imports typecheck screenshots bench clean bundle test-bundle dist

# Every runtime and test dependency, pinned with hashes (see the README, "Locked installs").
LOCK := requirements.lock

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "Python 3.11 is needed: install python3.11 or run 'make PYTHON=/path/to/python3.11'"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Installs exactly the locked versions (hash-checked), then the project itself without resolving again.
$(STAMP): pyproject.toml $(LOCK) | $(PY)
	$(PY) tools/lock_check.py $(LOCK)
	$(PY) -m pip install --quiet --require-hashes --no-deps -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m core.embedding.provision install
	@touch $(STAMP)

install: $(STAMP)

# Refresh requirements.lock from pyproject.toml's ranges. Offline first (uv's cache), the index only for
# what the cache lacks; pins already in the lock are kept, so the same inputs give the same file.
# `make lock UPGRADE=1` moves every pin to the newest release the ranges allow.
UV := $(VENV)/bin/uv
UV_COMPILE = $(UV) pip compile pyproject.toml --extra dev --universal --python-version 3.11 --generate-hashes \
	--no-progress --quiet --custom-compile-command 'make lock' --output-file $(LOCK)
lock: | $(PY)
	@test -x $(UV) || $(PY) -m pip install --quiet 'uv>=0.9'
	@if grep -q '^<<<<<<<' $(LOCK) 2>/dev/null; then \
		echo "$(LOCK) has merge conflicts: starting from this branch's side (git show HEAD:$(LOCK))"; \
		git show HEAD:$(LOCK) > $(LOCK); fi
ifdef UPGRADE
	$(UV_COMPILE) --upgrade
else
	@$(UV_COMPILE) --offline 2>/dev/null || { echo "uv's cache lacks something; asking the package index"; $(UV_COMPILE); }
endif
	@$(PY) tools/lock_check.py $(LOCK) && echo "$(LOCK): $$(grep -c '^[a-zA-Z0-9]' $(LOCK)) pins"

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
	@fc-list :charset=1f534 2>/dev/null | grep -q . || echo "note: no colour emoji font found (Debian: apt-get install fonts-noto-color-emoji); observation priorities will render as boxes in tables"
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
