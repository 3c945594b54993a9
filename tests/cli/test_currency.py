"""Costs carry a currency: --currency (default USD, one option definition beside --gpu-hour-cost) is printed in the
capacity table's header, the Best line, the report and the files."""

from __future__ import annotations

import json

import pytest

from simulator.errors import InputError
from simulator.option_values import parse_currency
from specsim_cli.main import main

SMALL = ["cpu-smollm2", "--system", "vanilla-base", "--requests", "20", "--workers", "1", "--max-replications", "3",
         "--seed", "2", "--slo", "p99_latency<=40s", "--gpu-hour-cost", "0.5", "--target-qps", "2"]


@pytest.mark.parametrize("ok", ["USD", "EUR", "€", "$", "credits"])
def test_currency_values(ok):
    assert parse_currency(f" {ok} ") == ok


@pytest.mark.parametrize("bad", ["", "1 2", "US D", "[red]x", "EURO-DOLLAR", "10"])
def test_bad_currency_is_an_input_error(bad):
    with pytest.raises(InputError, match="--currency"):
        parse_currency(bad)


def test_capacity_prints_the_currency(capsys):
    assert main(["simulate", "capacity", *SMALL, "--currency", "EUR"]) == 0
    out = capsys.readouterr().out
    head = out[:out.index("───")].split()  # the header: what on one line, the unit (currency) under it
    assert "cost/1000" in head and "EUR" in head
    assert "EUR per 1000 requests at 0.5 EUR per CPU host-hour" in " ".join(out.split())
    assert main(["simulate", "capacity", *SMALL, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["meta"]["currency"] == "USD" and {r["currency"] for r in doc["results"]} == {"USD"}


def test_report_prints_the_currency(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["simulate", "report", *SMALL, "--currency", "GBP", "--out", str(out)]) == 0
    assert "GBP per 1000 requests" in capsys.readouterr().out
    md = (out / "report.md").read_text()
    assert "cost / 1000 req (GBP)" in md and "GBP per CPU host-hour" in md and "--currency GBP" in md
    assert json.loads((out / "resolved.json").read_text())["currency"] == "GBP"


def test_bad_currency_exit_2(capsys):
    assert main(["simulate", "capacity", "cpu-smollm2", "--currency", "1 2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--currency" in err and "Traceback" not in err
