"""The WebDataset view in Airflow's UI: configured datasets, their versions, validation and sample previews.

`app.create_app()` is a FastAPI app (HTML pages and a JSON API under
`/api`); `plugin` (an AirflowPlugin, the `airflow.plugins` entry point) mounts it in the api-server at
`/webdataset`. Modules: `sources` (which datasets are configured),
`summary` (what a root holds, read through `layout`), `preview` (a bounded
read of the first or random samples), `pages` (HTML), `app` (routes and auth), `plugin` (the wiring).
"""
