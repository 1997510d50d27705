"""The FastAPI app behind the WebDataset view: HTML pages and the JSON API under /api.

Every route depends on the logged-in user (Airflow's own `get_user`: the
UI's `_token` cookie or a Bearer token, checked by the api-server's auth
manager); a plugin app mounted in the api-server gets no auth otherwise.
Datasets are addressed by configured name only; version ids and shard
names from URLs are checked before any path is built (see `summary`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ...dataset.layout import Dataset, Version
from ...dataset.random_access import VersionSamples
from ...errors import InputError, NotFound
from ...format.manifest import Manifest
from ..configs import datasets_folder
from . import pages, sources, summary
from . import preview as previews

DEFAULT_PREVIEW = 16


_BEARER = HTTPBearer(auto_error=False)


async def airflow_user(request: Request, bearer: HTTPAuthorizationCredentials | None = Depends(_BEARER)) -> Any:
    """The logged-in user, by Airflow's own `get_user` (the UI's `_token` cookie or a Bearer token,
    checked by the api-server's auth manager): 401 without one. Imported per request, so loading the
    plugin (scheduler, workers) does not import the api-server's security module; fails closed
    where Airflow's api-server is not installed."""
    try:
        from airflow.api_fastapi.core_api.security import get_user
    except ImportError:
        raise HTTPException(status_code=401, detail="Not authenticated (no Airflow auth manager here)") from None
    return await get_user(request, None, bearer)


def airflow_user_dependency() -> Callable[..., Any]:
    return airflow_user


def _login_url(next_url: str) -> str:
    try:
        from airflow.api_fastapi.app import get_auth_manager

        return get_auth_manager().get_url_login(next_url=next_url)
    except Exception:  # noqa: BLE001 - no auth manager here: Airflow's home page logs in
        return "/"


def _dataset(name: str, folder: str | Path | None) -> sources.ConfiguredDataset:
    found = sources.find(name, folder)
    if found is None:
        raise HTTPException(status_code=404, detail=f"no dataset configured with the name {name!r}")
    if found.root is None:
        raise HTTPException(status_code=404, detail=f"dataset {name!r}: its config does not load: {found.error}")
    return found


def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Typed errors as HTTP statuses: a bad name 400, a missing version or shard 404, storage failing 502."""
    try:
        return function(*args, **kwargs)
    except NotFound as error:
        raise HTTPException(status_code=404, detail=str(error)) from None
    except InputError as error:
        raise HTTPException(status_code=400, detail=str(error)) from None
    except HTTPException:
        raise
    except Exception as error:  # noqa: BLE001 - an unreachable or unreadable root: a page saying so, not a 500
        raise HTTPException(
            status_code=502, detail=f"could not read the dataset: {type(error).__name__}: {error}"
        ) from None


def _overview(folder: str | Path | None) -> list[dict]:
    rows = []
    for config in sources.configured_datasets(folder):
        row: dict = {"name": config.name, "root": config.root, "config_file": config.config_file, "error": config.error}
        if config.root is not None:
            try:
                row.update(summary.dataset_summary(config.root))
            except Exception as error:  # noqa: BLE001 - an unreachable root is an error on its row
                row["error"] = f"{type(error).__name__}: {error}"
        rows.append(row)
    return rows


def _preview(
    version: Version, manifest: Manifest, n: int, mode: str, seed: int, shard: str | None, key: str | None = None
) -> dict:
    """`manifest`: the version's, read once by the caller; `shard` picks one of its shards.
    A version with a sample index serves random samples and a key through it."""
    shards = summary.choose_shards(version.uri, [(s.location, s.bytes) for s in manifest.shards], shard)
    indexed = VersionSamples(version.uri, manifest) if manifest.sample_index else None
    if mode == "key":
        if not key:
            raise InputError("mode key needs a key")
        if indexed is None:
            raise InputError(f"version {version.id!r} has no sample index to look keys up in")
        result = previews.sample_by_key(indexed, key)
    elif mode == "random":
        if indexed is not None and shard is None:
            result = previews.indexed_random_samples(indexed, n, seed)
        else:
            result = previews.random_samples(version, shards, n, seed)
    elif mode == "first":
        result = previews.first_samples(version, shards, n)
    else:
        raise InputError(f"mode {mode!r} must be first, random or key")
    return {
        "version": version.id,
        "shard": shard,
        "mode": mode,
        "seed": seed if mode == "random" else None,
        "key": key if mode == "key" else None,
        "indexed": indexed is not None and shard is None and mode != "first",
        **result.to_dict(),
    }


def create_app(folder: str | Path | None = None, user_dependency: Callable[..., Any] | None = None) -> FastAPI:
    """`folder`: the dataset configs (default: SPARK_WEBDATASET_DATASETS, read on each request)."""
    user = user_dependency or airflow_user_dependency()
    app = FastAPI(title="WebDataset", dependencies=[Depends(user)], docs_url=None, redoc_url=None, openapi_url=None)
    app.state.user_dependency = user

    @app.exception_handler(HTTPException)
    async def _errors(request: Request, error: HTTPException) -> Response:
        api = request.url.path.startswith(request.scope.get("root_path", "") + "/api")
        if api:
            return JSONResponse({"detail": error.detail}, status_code=error.status_code, headers=error.headers)
        if error.status_code == 401:  # a page opened without a session: Airflow's login, then back here
            return RedirectResponse(_login_url(str(request.url)), status_code=302)
        base = request.scope.get("root_path", "")
        body = pages.render("error", base=base, title=f"{error.status_code}", message=error.detail)
        return HTMLResponse(body, status_code=error.status_code)

    def base(request: Request) -> str:
        return request.scope.get("root_path", "")

    # -- JSON API ------------------------------------------------------------------------------

    @app.get("/api/datasets")
    def api_datasets() -> dict:
        return {"datasets": _overview(folder)}

    @app.get("/api/datasets/{name}")
    def api_dataset(name: str) -> dict:
        config = _dataset(name, folder)
        return {"name": name, **_call(summary.dataset_summary, config.root)}

    @app.get("/api/datasets/{name}/versions")
    def api_versions(name: str, page: int = Query(1, ge=1), per_page: int = Query(20, ge=1, le=200)) -> dict:
        config = _dataset(name, folder)
        return {
            "name": name,
            **_call(summary.versions_page, config.root, page, per_page),
            "gc_would_free": summary.gc_cost(config.root, config.retention),
        }

    @app.get("/api/datasets/{name}/versions/{version}")
    def api_version(name: str, version: str) -> dict:
        config = _dataset(name, folder)
        return {"name": name, **_call(summary.version_detail, config.root, version)}

    @app.get("/api/datasets/{name}/versions/{version}/preview")
    def api_preview(
        name: str,
        version: str,
        n: int = Query(DEFAULT_PREVIEW, ge=1, le=previews.MAX_SAMPLES),
        mode: str = "first",
        seed: int = 0,
        shard: str | None = None,
        key: str | None = None,
    ) -> dict:
        config = _dataset(name, folder)

        def read() -> dict:
            found = summary.resolve_version(config.root, version)
            manifest = found.committed_manifest()
            if manifest is None:
                raise NotFound(f"{found.uri}: no manifest (the version was never committed)")
            return _preview(found, manifest, n, mode, seed, shard, key)

        return {"name": name, **_call(read)}

    @app.get("/api/datasets/{name}/versions/{version}/index")
    def api_index(name: str, version: str) -> Response:
        config = _dataset(name, folder)
        found = _call(summary.resolve_version, config.root, version)
        data, _ = found.storage.read_versioned(found.index_uri)
        if data is None:
            raise HTTPException(status_code=404, detail=f"version {found.id!r} has no shard index (not published)")
        return Response(data, media_type="application/json")

    # -- pages -----------------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse)
    def page_datasets(request: Request) -> str:
        folder_shown = folder or datasets_folder()
        return pages.render("datasets", base=base(request), datasets=_overview(folder), folder=str(folder_shown))

    @app.get("/datasets/{name}", response_class=HTMLResponse)
    def page_versions(request: Request, name: str, page: int = Query(1, ge=1)) -> str:
        config = _dataset(name, folder)
        data = _call(summary.versions_page, config.root, page)
        gc = summary.gc_cost(config.root, config.retention)
        return pages.render("versions", base=base(request), name=name, v=data, gc=gc)

    @app.get("/datasets/{name}/versions/{version}", response_class=HTMLResponse)
    def page_version(
        request: Request,
        name: str,
        version: str,
        n: int = Query(DEFAULT_PREVIEW, ge=1, le=previews.MAX_SAMPLES),
        mode: str = "first",
        seed: int = 0,
        shard: str | None = None,
        key: str | None = None,
    ) -> str:
        config = _dataset(name, folder)
        detail, manifest = _call(summary.version_detail_and_manifest, config.root, version)
        preview, preview_error = None, None
        if manifest is not None:
            try:
                # the detail has read the manifest already: the preview uses it
                found = Dataset(config.root).version(detail["version"])
                preview = _call(_preview, found, manifest, n, mode, seed, shard, key)
            except HTTPException as error:
                if error.status_code == 400:
                    raise
                preview_error = error.detail
        api = f"{base(request)}/api/datasets/{name}/versions/{detail['version']}"
        record_json = json.dumps(detail["publish_record"], indent=1) if detail["publish_record"] else ""
        return pages.render(
            "version",
            base=base(request),
            api=api,
            name=name,
            v=detail,
            preview=preview,
            preview_error=preview_error,
            n=n,
            mode=mode,
            seed=seed,
            shard=shard,
            key=key,
            record_json=record_json,
        )

    return app
