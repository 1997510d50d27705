"""Helpers the tests share (one copy each): imported as tests.support.<module>; nothing outside tests/ imports them."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout: tests/support/ is two below it
SUPPORT = Path(__file__).resolve().parent  # scripts the tests run in processes of their own live here
DAGS = REPO / "dags"  # the DAG folder Airflow parses in the tests
