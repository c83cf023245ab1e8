# Two commands do all set-up on a fresh machine:
#   make book   builds the book into _build/html
#   make test   gets Fashion-MNIST (no root needed), builds the book, then runs every test
#               (lint, unit tests, every notebook through nbval, the dry run of every
#               chapter's gpu setting, the rendered book in headless Chromium)
# And two narrower checks:
#   make colab-check   runs each chapter alone in a Colab-like virtual environment
#   make dry-run       only the dry run: each chapter's gpu setting on the CPU, capped, on
#                      local fixtures (also part of make test)
# Each creates .venv (or reuses it) and installs requirements.txt into it first.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Offline and quick: what CI runs. Readers pick BOOK_SETTING=quick|cpu|full (default: cpu, or full on a GPU).
TEST_ENV := BOOK_OFFLINE=1 BOOK_SETTING=quick PYTHONHASHSEED=0
# pytest runs two notebooks at a time (-n 2); one thread each keeps them from fighting over 2 cores.
TEST_THREADS := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

.PHONY: install data book test dry-run notebooks colab-check clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

install: $(STAMP)

# Fashion-MNIST, the offline dataset: from BOOK_DATA_DIR, Debian's package (installed, or
# fetched with `apt-get download`, no root) or torchvision's download; when none works it
# stops with one line saying what to run.
data: $(STAMP)
	$(PY) -m vitbook.data.datasets --prepare fashion-mnist $(if $(BOOK_DATA_DIR),--data-dir "$(BOOK_DATA_DIR)") $(if $(BOOK_DEBIAN_FASHION_MNIST),--debian-dir "$(BOOK_DEBIAN_FASHION_MNIST)") $(if $(filter 1 true yes on,$(BOOK_OFFLINE)),--offline)

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --warningiserror --keep-going
	$(PY) scripts/one_script_per_page.py _build/html

# The browser test (tests/test_browser.py) reads the book that `book` has just built. The dry
# run (tests/test_dry_run.py) sets its own environment for each chapter it executes.
test: $(STAMP) data book
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(TEST_ENV) $(TEST_THREADS) $(PY) -m pytest tests book -n 2 --dist loadscope --durations=30 \
		--nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

# Every chapter in the gpu setting on the CPU, every loop capped at a few steps, the network
# blocked and the online datasets and weights served from local fixtures (tests/test_dry_run.py).
dry-run: $(STAMP) data
	$(TEST_THREADS) $(PY) -m pytest tests/test_dry_run.py -n 2 --dist loadscope

# Re-execute chapters in place in the cpu setting (the committed outputs) and clean their outputs:
#   make notebooks NB=book/06*.ipynb
NB ?= book/*.ipynb
notebooks: $(STAMP)
	BOOK_OFFLINE=1 BOOK_SETTING=cpu PYTHONHASHSEED=0 $(PY) scripts/run_notebooks.py $(NB)

# Each chapter copied alone into an empty folder and run in .venv-colab: Colab's preinstalled
# packages (colab/preinstalled.txt) plus what the chapter's setup cell installs.
colab-check: $(STAMP) data
	$(PY) scripts/colab_check.py

clean:
	rm -rf _build

# Point the book at its repository, in _config.yml, every chapter's setup cell and the README:
#   make repo-url URL=https://github.com/OWNER/REPO
.PHONY: repo-url
repo-url:
	python3 scripts/set_repo_url.py "$(URL)"
