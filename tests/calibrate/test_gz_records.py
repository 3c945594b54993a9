"""Committed run records are gzip-compressed (reports/**/*.jsonl.gz) and read transparently."""

import gzip
import shutil
from pathlib import Path

import pytest

from calibrate.contracts.trace_schema import check_run_dir, record_file
from simulator.errors import InputError

RUN = Path(__file__).resolve().parents[2] / "reports" / "cpu-campaign-v2" / "runs" / "specreason-t6"


def test_gz_run_reads_like_the_plain_one(tmp_path):
    gz = tmp_path / "gz"
    shutil.copytree(RUN, gz)
    plain = tmp_path / "plain"
    shutil.copytree(RUN, plain)
    for f in plain.glob("*.jsonl.gz"):
        f.with_suffix("").write_bytes(gzip.decompress(f.read_bytes()))
        f.unlink()
    assert record_file(gz, "steps.jsonl").name == "steps.jsonl.gz" and record_file(plain, "steps.jsonl").name == "steps.jsonl"
    assert check_run_dir(gz) == check_run_dir(plain)
    assert len(check_run_dir(gz)["step"]) > 0


def test_corrupt_archive_is_one_input_error(tmp_path):
    d = tmp_path / "bad"
    shutil.copytree(RUN, d)
    (d / "steps.jsonl.gz").write_bytes(gzip.compress(b'{"kind": "step"}\n')[:-6])  # truncated
    with pytest.raises(InputError, match="steps.jsonl.gz"):
        check_run_dir(d)
    (d / "steps.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(InputError, match="steps.jsonl.gz"):
        check_run_dir(d)
