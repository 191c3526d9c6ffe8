# Set-up and the two everyday commands: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The offline quickstart search on an embedded local Ray; each run gets its own folder.
demo: $(STAMP)
	$(PY) -m tuner run search_spaces/quickstart.yaml --set name=quickstart-$$(date +%Y%m%d-%H%M%S)

# The whole suite; every test has a timeout (pyproject), Ray tests included.
test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider --timeout=300

clean:
	rm -rf $(VENV) build *.egg-info
