"""Airflow plugin: the WebDataset view (datasets, versions, validation, sample previews) in the UI.

Wiring only: the app lives in spark_webdataset.airflow.ui.app (unit-tested there).
Installed with the package, Airflow finds it through the `airflow.plugins` entry
point (pyproject.toml), so no file is copied into a plugins folder. It is
mounted in the api-server at /webdataset (pages; JSON under
/webdataset/api/...) and listed in the UI's navigation as "WebDataset".
Every route requires a logged-in user through Airflow's auth manager.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from .app import create_app

URL_PREFIX = "/webdataset"


class WebDatasetViewPlugin(AirflowPlugin):
    name = "webdataset_view"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "WebDataset"}]
    external_views = [
        {
            "name": "WebDataset",
            "href": URL_PREFIX + "/",
            "destination": "nav",
            "url_route": "webdataset",
            "nav_top_level": True,  # its own button in the navigation, not under "Plugins"
        }
    ]
