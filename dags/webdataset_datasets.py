"""
#### How every `webdataset__<name>` DAG works

One DAG per dataset config in `datasets/` beside the DAGs folder (or
`SPARK_WEBDATASET_DATASETS`): `plan` >> `write_shards` (spark-submit of the
installed package's `spark_webdataset/jobs/entry/build_webdataset.py`) >>
`validate` >> `publish` (>> `gc` when the config has `retention:`).

* **Version id**: the run's logical date (`20261201T000000Z`), or
  `run_after` for a manual run without one, or the `version` param.
  Retries and backfills of a date land on the same version.
* **Publish** makes the version visible atomically and moves `LATEST`
  forward only; it updates the dataset's Asset, whose event carries
  version, root, URI, index, samples, shards and bytes, and the cost:
  parent, bytes stored and referenced, the change, gc_would_free.
* **Build on a parent** (`build: {parent: LATEST, change: upsert}`): a
  run builds on the version published for the date before its own, so
  backfills build on their own past; full when there is none.
* **gc** (`retention: {keep_last: N}`): after publish; never the version
  just published, LATEST, or anything younger than `min_age`.
* **Params**: the form starts from the config; a manual run may override
  any field but the root: the config alone says where the dataset lives
  (a run conf naming another `output_root` fails `plan`, nothing written).
* **Timeouts**: every task has the config's `timeouts` (defaults: plan 10m,
  write_shards 6h, validate 3h, publish 30m, gc 1h) as its `execution_timeout`.
* **Failures**: bad input (the job exits 2: a missing source, a bad key or
  option) and an unfit version fail at once; anything else retries.
* **Spark**: the config's connection (`spark_default`, from
  `AIRFLOW_CONN_SPARK_DEFAULT`); `spark-submit` must be on PATH.

A config that cannot be used shows as the import error of
`dags/dataset_config_errors.py`; the other datasets' DAGs still load.
Logic lives in `spark_webdataset.airflow.pipeline`, the wiring in
`spark_webdataset.airflow.dags`; this file only registers the DAGs, so
with the package installed (`pip install spark-webdataset[airflow]`) it
works copied into any DAGs folder, with `dataset_config_errors.py` beside it.
"""

from __future__ import annotations

from spark_webdataset.airflow.dags import build_dags

globals().update(build_dags(doc_md=__doc__).dags)
