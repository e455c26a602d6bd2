"""What ``esper plugins | cat``, ``esper run | cat`` and ``esper compare | cat`` print at
80 columns: no name cut with "…", no value split over two lines, counts formatted alike.

Each output is pinned by a snapshot under tests/cli/snapshots/ with its digits masked
(each run of digits reads ``9``: the numbers of a run vary with the platform, their
formatting does not); ``ESPER_UPDATE_SNAPSHOTS=1`` rewrites them after a deliberate
change of the output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.plugin_set import FAKE_COMPONENTS, FAKE_PLUGIN, REPO, first_party, subprocess_env

SNAPSHOTS = Path(__file__).parent / "snapshots"


def piped(*args: str, tmp: Path) -> str:
    """The stdout of ``esper ARGS | cat`` in an 80-column terminal."""
    env = {**subprocess_env(), "COLUMNS": "80", "LINES": "24"}
    env.pop("FORCE_COLOR", None)
    done = subprocess.run(
        [sys.executable, "-m", "esper_cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.replace(str(tmp), "TMP")


def masked(text: str) -> str:
    # Durations first ("9.6s": the unit would keep the digit before it), then digits of
    # numbers, not of names (cifar10, widen4x).
    lines = [
        re.sub(
            r"(?<![A-Za-z_\d])\d+(?![A-Za-z_\d])", "9", re.sub(r"\b\d+(\.\d+)?s\b", "9s", x)
        ).rstrip()
        for x in text.splitlines()
    ]
    return "\n".join(lines) + "\n"


def check_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("ESPER_UPDATE_SNAPSHOTS") == "1" or not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(masked(text), encoding="utf-8")
    assert masked(text) == path.read_text(encoding="utf-8"), f"snapshot {path} differs"


def test_plugins_piped_cut_no_name(tmp_path: Path) -> None:
    loads = [a for name in (*first_party(), FAKE_PLUGIN) for a in ("--plugin", name)]
    text = piped("plugins", *loads, tmp=tmp_path)
    assert "…" not in text
    assert max(len(x) for x in text.splitlines()) <= 80
    # Every component name whole on one line.
    assert re.search(r"transformer/lora_large,", text), text
    check_snapshot("plugins", text)


def test_blueprints_piped_cut_no_name(tmp_path: Path) -> None:
    loads = [a for name in first_party() for a in ("--plugin", name)]
    text = piped("blueprints", *loads, tmp=tmp_path)
    assert "…" not in text
    # A table per topology, its plugin in the title: 80 columns hold it, the description
    # wrapping between words (it was one ~230-column line per blueprint, issue 54.2).
    assert max(len(x) for x in text.splitlines()) <= 80, text
    assert re.search(r"^transformer blueprints \(blueprints\.transformer; ", text, re.M), text
    assert re.search(r"^│ lora_large +│ +[\d,]+ │ yes +│ \S", text, re.M), text


def test_run_summary_piped_splits_no_value(tmp_path: Path) -> None:
    text = piped(
        "run",
        *FAKE_COMPONENTS,
        "--set",
        "env.max_epochs=4",
        "--set",
        "run.telemetry=[]",
        "--out",
        str(tmp_path / "run"),
        tmp=tmp_path,
    )
    assert "…" not in text
    lines = text.splitlines()
    # A count is written with thousands separators wherever it appears, and the line that
    # names the host's size holds its number (it used to wrap as "on a host of\n682").
    assert any(
        re.fullmatch(r"parameters added \(mean\): [\d,]+ on a host of [\d,]+", x) for x in lines
    )
    check_snapshot("run", text)


def test_compare_piped_splits_no_value(tmp_path: Path) -> None:
    text = piped(
        "compare",
        *FAKE_COMPONENTS,
        "--plugin",
        "policies.wait",
        "--seeds",
        "2",
        "--max-epochs",
        "2",
        "--baseline",
        "wait",
        "--set",
        "run.telemetry=[]",
        "--quiet",
        "--out",
        str(tmp_path / "exp"),
        tmp=tmp_path,
    )
    assert "…" not in text
    lines = text.splitlines()
    values = [x for x in lines if x.startswith("    test acc %")]
    assert len(values) == 2 and all(re.search(r"\] *$|\d$", x) for x in values)
    assert not [x for x in lines if "│" in x]  # the wide table is printed as records
    assert "add [tuning] to search it" in text  # printed as written, not read as markup
    check_snapshot("compare", text)
