# Two commands for a newcomer: `make run` and `make test`. Both build .venv
# themselves from pyproject.toml pinned by constraints.txt.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# pytest-xdist workers, one per core: a single process kept on average about half of one
# core busy (7:15 user CPU over 13:18 wall: waits on spark-submit, Airflow, the emulator). Modules stay whole on
# one worker (loadscope), so module fixtures start once; each worker has its own
# SparkSession and Airflow home.
TEST_WORKERS ?= 2

.PHONY: env run test bench clean soak

$(VENV)/.installed: pyproject.toml constraints.txt constraints-s3server.txt
	scripts/ensure_java.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[airflow,gcs,s3,demo,test]"
	VENV=$(VENV) PYTHON=$(PYTHON) scripts/install_s3server.sh  # moto, for the s3:// tests: its own venv (docs/s3.md)
	# setuptools leaves a copy of the metadata beside the package, and plugins/ is on sys.path:
	# Airflow would see the distribution twice and load the view's plugin entry point twice
	rm -rf plugins/*.egg-info
	$(PY) scripts/check_env.py
	touch $@

env: $(VENV)/.installed

run: env
	scripts/run_demo.sh

test: env
	scripts/ensure_browser.sh  # chromium + chromedriver for the WebDataset view's browser test
	scripts/ensure_postgres.sh  # PostgreSQL for the compose stack's native test (tests/e2e/test_airflow_postgres.py)
	source scripts/airflow_env.sh && $(PY) -m pytest -ra --durations=15 -n $(TEST_WORKERS) --dist loadscope --cov --cov-report=term $(PYTEST_ARGS)

bench: env  # every bench/*.py but the harness; each prints a table, writes bench/results/<name>.json (BENCH_ARGS=--quick: smoke run)
	source scripts/airflow_env.sh && for b in $(filter-out bench/harness.py,$(sort $(wildcard bench/*.py))); do \
	  $(PY) $$b $(BENCH_ARGS) || exit 1; done

soak: env  # the promise machine (tests/model) for SOAK_MINUTES (default 30) split between local disk, the GCS emulator and the S3 server (moto); random seeds; prints steps and failures.
# SOAK_MINUTES reaches pytest as each third's minutes (every test of the file runs that long); pytest's timeout is per test:
# each third's minutes + 15 (the default 900 s cut a 15-minute half inside a Py4J call, left the gateway's socket
# mid-answer, and every later Spark step failed: KeyError 'c', then no SparkSession).
	source scripts/airflow_env.sh && export PYTHONPATH=$$PWD/plugins PROMISE_MACHINE_REPORT=$${PROMISE_MACHINE_REPORT:-$$(mktemp)} && SOAK_MINUTES=$$(python3 -c "print(float('$(or $(SOAK_MINUTES),30)') / 3)") \
	  HYPOTHESIS_PROFILE=soak \
	  $(PY) -m pytest -p no:cacheprovider -q -s --timeout=$$(python3 -c "print(int(float('$(or $(SOAK_MINUTES),30)') * 20 + 900))") \
	    tests/model/test_promise_machine.py $(PYTEST_ARGS); \
	  status=$$?; echo "== soak report ($$PROMISE_MACHINE_REPORT)"; cat $$PROMISE_MACHINE_REPORT; exit $$status

clean:
	rm -rf data airflow_home spark-warehouse .pytest_cache
