"""The output contract's rules beyond the walk (simulator/output_contract.py): parquet really written, a name never
contradicting the format written, a real device node refused, the lock that keeps two runs out of one output,
resumable run folders, and write_atomic itself never replacing a FIFO."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import specsim_cli.main as cli
from simulator.errors import InputError
from simulator.inputs.loading import write_atomic
from simulator.output_contract import FORMAT_EXTS, KNOWN_EXTS, check_out, file_format, output_lock
from tests.conftest import examples

PASS_TIME = ["simulate", "pass-time", "--model", "qwen3-8b", "--hardware", "h100-sxm", "--batch", "1,8"]


def _run(args, capsys):
    rc = cli.main([str(a) for a in args])
    return rc, capsys.readouterr().err


def test_a_parquet_name_writes_parquet_with_the_same_rows_as_csv(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    pq, csv = tmp_path / "rows.parquet", tmp_path / "rows.csv"
    assert _run([*PASS_TIME, "--out", pq], capsys)[0] == 0
    assert _run([*PASS_TIME, "--out", csv], capsys)[0] == 0
    assert pq.read_bytes()[:4] == b"PAR1"
    got, want = pd.read_parquet(pq), pd.read_csv(csv)
    assert list(got.columns) == list(want.columns) and len(got) == len(want) == 2
    assert got["pass_ms"].tolist() == pytest.approx(want["pass_ms"].tolist())


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_parquet_name_with_another_format_is_refused(tmp_path, capsys, fmt):
    rc, err = _run([*PASS_TIME, "--format", fmt, "--out", tmp_path / "rows.parquet"], capsys)
    assert rc == 2 and "names must agree" in err and not list(tmp_path.iterdir())


@settings(max_examples=examples(60), deadline=None)
@given(fmt=st.sampled_from(["table", "csv", "json"]),
       suffix=st.sampled_from([*KNOWN_EXTS, "", ".out", ".v2", ".PARQUET", ".Json"]))
def test_a_file_is_never_written_under_a_name_of_another_format(tmp_path_factory, fmt, suffix):
    out = tmp_path_factory.mktemp("o") / f"rows{suffix}"
    try:
        check_out(out, fmt)
    except InputError:
        return
    written = file_format(fmt, out)
    if out.suffix.lower() in KNOWN_EXTS:
        assert out.suffix.lower() in FORMAT_EXTS[written], (out, fmt, written)


def test_a_device_node_is_refused_and_left_alone(capsys):
    dev = Path("/dev/null")
    assert dev.is_char_device()
    rc, err = _run([*PASS_TIME, "--out", dev, "--force"], capsys)
    assert rc == 2 and "not a regular file" in err and dev.is_char_device()


def test_write_atomic_itself_never_replaces_a_fifo(tmp_path):
    fifo = tmp_path / "p.csv"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        write_atomic(fifo, "x\n")
    assert fifo.exists() and not fifo.is_file() and [p.name for p in tmp_path.iterdir()] == ["p.csv"]


def test_a_second_run_into_an_output_being_written_is_refused(tmp_path, capsys):
    out = tmp_path / "rep"
    with output_lock([(out, "--out")]):  # the first run, still writing
        rc, err = _run(["simulate", "report", "cpu-smollm2", "--out", out], capsys)
        assert rc == 2 and "being written by another specsim run" in err and f"pid {os.getpid()}" in err
        assert not out.exists()
        rc, err = _run([*PASS_TIME, "--out", tmp_path / "other.csv"], capsys)  # another output is not held
        assert rc == 0
    with output_lock([(out, "--out")]):  # released when the holder ends, whatever happened
        pass


def test_the_lock_is_released_when_the_command_fails(tmp_path, capsys):
    out = tmp_path / "rows.csv"
    for _ in range(2):  # the second run would say "being written" if the first kept the lock
        rc, err = _run(["simulate", "pass-time", "--model", "no-such-model", "--hardware", "h100-sxm", "--out", out], capsys)
        assert rc == 2 and "being written" not in err and not out.exists()


def test_a_resumable_run_folder_accepts_an_earlier_run_and_refuses_anything_else(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine\n")
    with pytest.raises(InputError, match="not empty"):
        check_out(run, kind="runs")
    (run / "run.json").write_text("{}\n")
    check_out(run, kind="runs")  # an earlier run of the command: resumed
    campaign = tmp_path / "campaign"
    (campaign / "specreason" / "users-4").mkdir(parents=True)
    (campaign / "specreason" / "users-4" / "run.json").write_text("{}\n")
    check_out(campaign, kind="runs")
    with pytest.raises(InputError, match="not empty"):
        check_out(campaign, kind="folder")  # a report folder is written afresh


def test_init_keeps_its_rules_under_the_contract(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    assert _run(["init", f], capsys)[0] == 0
    rc, err = _run(["init", f], capsys)
    assert rc == 2 and "exists" in err
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    rc, err = _run(["init", fifo, "--force"], capsys)
    assert rc == 2 and "not a regular file" in err


@pytest.mark.parametrize("args", [
    ["measure", "spec-metrics", "--metrics", Path(__file__).parents[1] / "data/spec_metrics/draft6l-k2/after.txt"],
    ["simulate", "whatif", "reference-a6000-qwq32b", "--system", "vanilla-base"],
])
def test_the_reported_overwrites_of_readme_are_refused(capsys, args):
    """Issue 41, "Data lost": these wrote over the committed README.md with exit 0."""
    readme = Path(__file__).resolve().parents[2] / "README.md"
    before = readme.read_bytes()
    rc, err = _run([*args, "--out", readme], capsys)
    assert rc == 2 and str(readme) in err and readme.read_bytes() == before, err


def test_two_outputs_of_one_command_must_differ(tmp_path, capsys):
    same = tmp_path / "x"
    rc, err = _run(["fit", "bench", tmp_path, "--out", same, "--report", same], capsys)
    assert rc == 2 and "give each output its own path" in err and not same.exists()


def test_a_run_in_another_process_holds_the_output_until_it_ends(tmp_path, capsys):
    import subprocess
    import sys

    out = tmp_path / "rows.csv"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom simulator.output_contract import output_lock\n"
                               f"with output_lock([({str(out)!r}, '--out')]):\n    print('held', flush=True)\n"
                               "    time.sleep(60)"], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    try:
        assert holder.stdout.readline().strip() == "held"
        rc, err = _run([*PASS_TIME, "--out", out], capsys)
        assert rc == 2 and f"pid {holder.pid}" in err and not out.exists(), err
    finally:
        holder.kill()
        holder.wait()
    rc, err = _run([*PASS_TIME, "--out", out], capsys)  # the holder's end released the lock (killed, not closed)
    assert rc == 0 and out.exists(), err
