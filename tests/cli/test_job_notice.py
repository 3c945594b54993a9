"""A long job's notice (simulator/report/report_table.job): off a terminal it waits job.QUIET_S, so an input error a
loaded machine takes a few seconds to reach is still the only line; past it, the job says what runs."""

from __future__ import annotations

import time

import pytest

from simulator.errors import InputError
from simulator.report.report_table import job


def test_an_input_error_within_the_quiet_time_is_the_only_line(capsys):
    with pytest.raises(InputError):
        with job("validate: fitting", after_s=0.0):
            time.sleep(0.05)  # past after_s, within QUIET_S: off a terminal nothing is printed yet
            raise InputError("runs.jsonl", "latency_s", "expected float")
    assert capsys.readouterr().err == ""


def test_past_the_quiet_time_the_job_says_what_runs(capsys, monkeypatch):
    monkeypatch.setattr(job, "QUIET_S", 0.01)
    with job("validate: fitting", after_s=0.0) as j:
        deadline = time.monotonic() + 10.0
        while not j.announced and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "validate: fitting ..." in capsys.readouterr().err
