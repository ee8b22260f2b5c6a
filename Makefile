# The two commands of the README: `make demo` and `make test`; `make docs` builds docs/.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test docs lint clean

# a2sql.egg-info: metadata an earlier setuptools build left in the checkout, which
# Python would find beside the editable install's. tools/ensure-chromium.sh: Debian's
# chromium for the browser tests (tests/ui), installed when missing, in CI or as root.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	rm -rf a2sql.egg-info
	$(VENV)/bin/pip install --quiet -e '.[dev,postgres]'
	tools/ensure-chromium.sh
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/a2sql demo

# The PgBouncer the tests go through is started for this run and stopped when pytest
# exits, whatever its exit code (tools/with-test-pgbouncer.sh). The tests run in
# TEST_PROCESSES processes (pytest-xdist; 0: in pytest's own), most of their time
# waiting on databases, processes and sleeps rather than on a core: on a 2-core
# machine 3 ran the suite in 12 min 46 s where 2 took 14 min 49 s; with the UI,
# metrics and integrations tests 3 took 13 min 59 s, and 4 is tried.
TEST_PROCESSES ?= 4
test: $(STAMP)
	pg="$$(tools/test-postgres.sh)"; \
	A2SQL_TEST_POSTGRES_URL="$$pg" tools/with-test-pgbouncer.sh "$$pg" \
		$(VENV)/bin/pytest -n $(TEST_PROCESSES) $(PYTEST_ARGS)

docs: $(STAMP)
	$(VENV)/bin/pip install --quiet -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) site build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
