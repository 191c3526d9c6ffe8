# Set-up and the two everyday commands: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test check install clean peers-env

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The report test drives a real headless Chromium (Debian's chromium and chromium-driver),
# installed once where apt and root exist; elsewhere that test skips and says why.  The stamp
# is written only once both programs are there, so a failed install is tried again next time.
BROWSER := $(VENV)/.browser
$(BROWSER): | $(STAMP)
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	     chromium chromium-driver >/dev/null) || echo "chromium could not be installed: the browser test will skip"; \
	else echo "no root or apt: the browser test will skip"; fi
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then touch $@; fi

# The offline quickstart search on an embedded local Ray; each run gets its own folder.
demo: $(STAMP)
	$(PY) -m tuner run search_spaces/quickstart.yaml --set name=quickstart-$$(date +%Y%m%d-%H%M%S)

# Lint (ruff's default rules + SLF001), types (mypy on tuner/ and trainables/), then the whole
# suite; every test has a timeout (pyproject), Ray tests included.
test: $(STAMP) $(BROWSER) check
	$(PY) -m pytest -q -p no:cacheprovider --timeout=300 --durations=15

check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The search frontier benchmark's peers in an environment of their own (syne-tune 0.13.0 and
# mf-prior-bench pin numpy below 2, which the project's torch and Ray do not take):
# benchmarks/frontier_peers.py; search_frontier.py reaches mf-prior-bench there (mfh_oracle.py).
PEERS := .venv-peers
peers-env:
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet --upgrade pip
	$(PEERS)/bin/python -m pip install --quiet "syne-tune[gpsearchers,kde,blackbox-repository]==0.13.0" \
	  "dehb==0.1.2" "scikit-learn==1.7.2" "pyarrow==16.1.0" "statsmodels==0.14.4" "mf-prior-bench==1.10.0"

clean:
	rm -rf $(VENV) $(PEERS) build *.egg-info
