"""MLflow's own UI shows what `marl train` logged: a real `mlflow server` on loopback over the store two real runs
wrote, its compare page opened in headless Chromium (Debian's chromium, driven by selenium), both runs and a
metric found on it, the runs table (model-training view) with each run's Source and its logged model, and
screenshots kept.

Skipped where selenium or chromium is missing, unless MARL_REQUIRE_BROWSER=1 (CI sets it: there a missing
browser is a failure, not a skip).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from run_helpers import tiny

from marl.run.train import train

pytestmark = pytest.mark.slow


def _need(thing: object, what: str) -> None:
    if thing:
        return
    if os.environ.get("MARL_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{what} is missing and MARL_REQUIRE_BROWSER=1")
    pytest.skip(f"{what} is missing")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "mlflow server exited"
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError("mlflow server did not answer in time")


def test_the_mlflow_ui_compares_two_runs_marl_train_logged(tmp_path):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        webdriver = None
    _need(webdriver, "selenium")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    _need(chromium and driver_path, "chromium and its chromedriver (Debian: chromium chromium-driver)")

    results = []
    for seed in (0, 1):
        cfg = tiny(tmp_path, seed=seed)
        cfg.iterations, cfg.eval_episodes, cfg.tracking.log_model = 2, 0, True
        cfg.tracking.experiment, cfg.tracking.run_name = "ui", f"ui-run-s{seed}"
        results.append(train(cfg))
    client = MlflowClient(cfg.tracking.tracking_uri)
    experiment_id = client.get_experiment_by_name("ui").experiment_id
    # the page's metric table renders its first rows (it is virtualized): look for the first metric both runs logged
    metric = sorted(set.intersection(*(set(client.get_run(r.run_id).data.metrics) for r in results)))[0]

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                               cfg.tracking.tracking_uri, "--default-artifact-root", str(tmp_path / "mlruns"),
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    browser = None
    try:
        _wait_healthy(url, server)
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1000"):
            options.add_argument(flag)
        browser = webdriver.Chrome(service=Service(driver_path), options=options)
        runs = urllib.parse.quote(json.dumps([r.run_id for r in results]))
        browser.get(f"{url}/#/compare-runs?runs={runs}&experiments={urllib.parse.quote(json.dumps([experiment_id]))}")
        WebDriverWait(browser, 90).until(
            lambda b: all(f"ui-run-s{s}" in b.page_source for s in (0, 1)) and metric in b.page_source)
        shot = Path(os.environ.get("MARL_UI_SCREENSHOT", tmp_path / "compare.png"))
        shot.parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        # the experiment's runs table, in the model-training view the printed run link opens: Source and Models
        browser.get(f"{url}/#/experiments/{experiment_id}/runs?workflowType=machine_learning")
        def table(b):
            return b.find_element("tag name", "body").text.splitlines()
        WebDriverWait(browser, 90).until(lambda b: table(b).count("policy") == 2)  # the columns fill in last
        body = table(browser)
        assert body.count("marl train") == 2 and all(f"ui-run-s{s}" in body for s in (0, 1)), body
        browser.save_screenshot(str(shot.with_name(shot.stem + "-runs.png")))
    finally:
        if browser is not None:
            browser.quit()
        server.terminate()
        server.wait(timeout=30)
