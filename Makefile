# Two commands for a newcomer: `make run` and `make test`. Both build .venv
# themselves from pyproject.toml pinned by constraints.txt.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(CURDIR)/$(PY)
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(PY)
export SPARK_LOCAL_IP ?= 127.0.0.1

DATA := data
DEMO_SOURCE := $(DATA)/demo/digits
DEMO_ROOT := $(DATA)/datasets/digits
DEMO_VERSION ?= demo

.PHONY: env run test bench clean

$(VENV)/.installed: pyproject.toml constraints.txt
	scripts/ensure_java.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[airflow,gcs,demo,test]"
	$(PY) scripts/check_env.py
	touch $@

env: $(VENV)/.installed

run: env
	$(PY) -m spark_webdataset.cli demo-source $(DEMO_SOURCE)
	$(VENV)/bin/spark-submit --master "local[*]" --conf spark.ui.showConsoleProgress=true \
	  jobs/build_webdataset.py --source $(DEMO_SOURCE) --output $(DEMO_ROOT) --version $(DEMO_VERSION) \
	  --key "format_string('%05d', id)" --field png=image --field cls=label --field json=meta \
	  --max-shard-bytes 1MiB 2> >(grep -v -E ' (INFO|WARN) ' >&2)
	@echo
	@echo "Shards: $(DEMO_ROOT)/versions/$(DEMO_VERSION)/shard-{000000..NNNNNN}.tar, listed in _manifest.json"
	@echo "Read them:  $(PY) -c \"import webdataset as wds, glob; ds = wds.WebDataset(sorted(glob.glob('$(DEMO_ROOT)/versions/$(DEMO_VERSION)/shard-*.tar')), shardshuffle=False); print(next(iter(ds)).keys())\""

test: env
	$(PY) -m pytest -ra $(PYTEST_ARGS)

bench: env
	$(PY) bench/write_throughput.py

clean:
	rm -rf $(DATA) spark-warehouse .pytest_cache
