"""The WebDataset view in a real browser: `airflow standalone` on 127.0.0.1 and headless Chromium.

Logs in with the generated admin password, opens "WebDataset" from the
navigation, opens the digits dataset's LATEST version and checks that its
preview shows images that loaded (naturalWidth > 0) with the right labels.
The dataset is prepared directly (ShardWriter, validate, publish: no Spark,
no DAG run); the DAGs folder is empty so the scheduler has nothing to run.
Needs Debian's chromium and chromium-driver (scripts/ensure_browser.sh) and
selenium; skipped, with the reason, where they are missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.gcs_emulator import free_port
from tests.support.helpers import stop_groups, unmeasured
from tests.support.webdataset_ui_data import digits_table, published_digits, write_digits_config

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401
except ImportError:
    selenium = None

pytestmark = [
    pytest.mark.skipif(selenium is None, reason="selenium is not installed (pip install -e '.[test]')"),
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="chromium and chromedriver are not installed (scripts/ensure_browser.sh: apt-get install chromium chromium-driver)",
    ),
    pytest.mark.timeout(240),
    pytest.mark.slow,  # ~30-45 s: airflow standalone's cold start
]


def _wait_for(url: str, process: subprocess.Popen, log: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"airflow standalone exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"airflow standalone did not answer {url} within {seconds} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def airflow_server(tmp_path):
    """airflow standalone in a temp AIRFLOW_HOME on a free port; the digits dataset configured and published."""
    labels = digits_table().column("label").to_pylist()
    root = tmp_path / "data" / "digits"
    published_digits(root, "20261201T000000Z")
    write_digits_config(tmp_path / "datasets", "digits", root)
    home = tmp_path / "airflow_home"
    (home / "dags").mkdir(parents=True)
    port = free_port()
    repo = REPO
    env = dict(
        os.environ,
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__CORE__PLUGINS_FOLDER=str(repo / "plugins"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT="300",
        SPARK_WEBDATASET_DATASETS=str(tmp_path / "datasets"),
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    )
    log = tmp_path / "airflow_standalone.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "airflow"), "standalone"],
            env=unmeasured(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for(f"{base}/api/v2/monitor/health", process, log, 150)
        passwords = home / "simple_auth_manager_passwords.json.generated"
        yield {"base": base, "password": json.loads(passwords.read_text())["admin"], "labels": labels}
    finally:
        stop_groups([process], seconds=20)


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def _click_until(browser, xpath: str, arrived, failure: Path, seconds: float = 60) -> None:
    """Click the link until `arrived(browser)`: the UI's first render can swap the navigation's
    elements under a click (seen in CI: the click landed, the route never changed)."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            for link in browser.find_elements(By.XPATH, xpath)[:1]:
                link.click()
        except WebDriverException:
            pass  # stale or covered for a moment: look it up again
        settle = time.monotonic() + 3
        while time.monotonic() < settle:
            if arrived(browser):
                return
            time.sleep(0.2)
    browser.save_screenshot(str(failure) + ".png")
    failure.with_suffix(".html").write_text(browser.page_source)
    pytest.fail(
        f"no navigation after clicking {xpath} for {seconds} s (at {browser.current_url}; see {failure}.png/.html)"
    )


def test_the_view_shows_the_latest_digits_with_their_images_and_labels(airflow_server, browser, tmp_path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 60)
    shots = tmp_path / "screenshots"
    shots.mkdir()

    # the api-server refuses the view's API to a caller without a session
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(airflow_server["base"] + "/webdataset/api/datasets", timeout=30)
    assert refused.value.code == 401
    # ... and answers it to a script holding a token from Airflow's POST /auth/token (a forged one: refused)
    base = airflow_server["base"]
    login = json.dumps({"username": "admin", "password": airflow_server["password"]}).encode()
    request = urllib.request.Request(f"{base}/auth/token", login, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        token = json.loads(response.read())["access_token"]
    api = f"{base}/webdataset/api/datasets/digits/versions/LATEST/preview?n=2"
    with urllib.request.urlopen(
        urllib.request.Request(api, headers={"Authorization": f"Bearer {token}"}), timeout=30
    ) as r:
        assert json.loads(r.read())["count"] == 2
    with pytest.raises(urllib.error.HTTPError) as forged:
        urllib.request.urlopen(urllib.request.Request(api, headers={"Authorization": f"Bearer {token}x"}), timeout=30)
    assert forged.value.code in (401, 403)

    # the UI sends an anonymous visitor to Airflow's login page
    browser.get(airflow_server["base"] + "/")
    wait.until(lambda d: d.find_elements(By.NAME, "username"))
    assert "/auth/login" in browser.current_url
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys(airflow_server["password"])
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(lambda d: "/auth/login" not in d.current_url)

    # "WebDataset" in the navigation opens the view (an iframe of /webdataset/ in the UI)
    wait.until(lambda d: d.find_elements(By.XPATH, "//*[normalize-space(text())='WebDataset']"))
    browser.save_screenshot(str(shots / "1-home.png"))
    _click_until(
        browser,
        "//a[.//*[normalize-space(text())='WebDataset'] or normalize-space(text())='WebDataset']",
        lambda d: d.current_url.rstrip("/").endswith("/plugin/webdataset"),
        shots / "1-nav-failed",
    )
    frame = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "iframe[src*='/webdataset']"))[0]
    browser.switch_to.frame(frame)
    latest = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.dataset[data-name=digits] a.latest"))[0]
    assert latest.text == "20261201T000000Z"
    browser.switch_to.default_content()
    browser.save_screenshot(str(shots / "2-datasets.png"))
    browser.switch_to.frame(frame)

    latest.click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#samples .sample"))
    wait.until(lambda d: d.execute_script("return Array.from(document.images).every(i => i.complete)"))
    samples = browser.find_elements(By.CSS_SELECTOR, "#samples .sample")
    assert len(samples) == 16
    widths = browser.execute_script(
        "return Array.from(document.querySelectorAll('#samples img')).map(i => i.naturalWidth)"
    )
    assert len(widths) == 16 and all(w == 32 for w in widths), widths
    for sample in samples:
        key, label = sample.get_attribute("data-key"), sample.get_attribute("data-label")
        assert label == str(airflow_server["labels"][int(key)]), (key, label)
    assert "valid" in browser.find_element(By.ID, "validation").text
    browser.execute_script("document.getElementById('preview').scrollIntoView()")
    browser.switch_to.default_content()
    browser.save_screenshot(str(shots / "3-latest-version.png"))
    print(f"screenshots in {shots}")
