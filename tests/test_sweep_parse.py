"""`--sweep workers=2,4,...,1024`, as the docs and papers write a scaling study."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.errors import UsageError
from opentikz_dt.predict.sweep import parse_sweep


@pytest.mark.parametrize("text, counts", [
    ("workers=2,4,8", [2, 4, 8]),
    ("workers=8,2,4,4", [2, 4, 8]),
    ("workers=2,4,...,1024", [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]),
    ("workers=2,4,8,...,64", [2, 4, 8, 16, 32, 64]),
    ("workers=1,3,...,81", [1, 3, 9, 27, 81]),
    ("workers=2,4,...,4", [2, 4]),
])
def test_counts_and_the_ellipsis(text, counts):
    assert parse_sweep(text) == counts


@pytest.mark.parametrize("text, message", [
    ("workers=2,...,1024", "write '...' once, after two counts and before the last"),
    ("workers=2,4,...", "write '...' once, after two counts and before the last"),
    ("workers=2,4,...,64,...,128", "write '...' once"),
    ("workers=3,5,...,45", "must be a whole number above 1 (3, 5)"),
    ("workers=2,4,...,1000", "1000 is not reached by multiplying 4 by 2"),
    ("workers=1,2,...," + str(2 ** 70), "65 worker counts, at most 64 per figure"),
    ("workers=2,4,x", "worker counts must be whole numbers"),
])
def test_what_the_ellipsis_cannot_mean_is_a_usage_error(text, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_sweep(text)


def test_the_documented_sweep_runs(tmp_path):
    result = CliRunner().invoke(main, ["predict", "examples/allreduce-ring.yaml", "--sweep", "workers=2,4,...,16",
                                       "--steps", "4", "-o", str(tmp_path / "fig")])
    assert result.exit_code == 0, result.output
    table = (tmp_path / "fig" / "predicted-scaling.txt").read_text()
    assert [line.split()[1] for line in table.splitlines()[1:] if line.strip()] == ["2", "4", "8", "16"], table
