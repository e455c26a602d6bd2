"""What ``esper plugins | cat``, ``esper blueprints``, ``esper operators``, ``esper run``,
``esper train``, ``esper compare`` and ``esper report`` print piped, at 80 columns: no
name cut with "…", no value split over two lines, counts formatted alike, tables within
80 columns and prose wrapped between words.

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

import pytest
from click.testing import CliRunner

from esper_cli.main import build_cli
from esper_core.plugins import PluginManager
from tests.inline_runner import INLINE_RUNNER
from tests.plugin_set import (
    FAKE_COMPONENTS,
    FAKE_PLUGIN,
    REPO,
    first_party,
    plugin_manager,
    subprocess_env,
)

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


def within(text: str, width: int = 80) -> list[str]:
    """The lines of ``text`` over ``width`` columns that could have wrapped: one word
    alone (a long path) cannot."""
    return [x for x in text.splitlines() if len(x.rstrip()) > width and " " in x.strip()]


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
    # wrapping between words (it was one ~230-column line per blueprint).
    assert max(len(x) for x in text.splitlines()) <= 80, text
    assert re.search(r"^transformer blueprints \(blueprints\.transformer; ", text, re.M), text
    assert re.search(r"^│ lora_large +│ +[\d,]+ │ yes +│ \S", text, re.M), text
    check_snapshot("blueprints", text)


def test_operators_piped_one_line_each(tmp_path: Path) -> None:
    loads = [a for name in first_party() for a in ("--plugin", name)]
    text = piped("operators", *loads, tmp=tmp_path)
    assert max(len(x) for x in text.splitlines()) <= 80, text
    # One line per operator (5) under one line per plugin (2) and the header.
    assert len(text.splitlines()) == 8, text
    assert re.search(
        r"^  cnn/depth +depth +CNNHost +stage0_layers: \d+, stage1_layers: \d+$", text, re.M
    )
    check_snapshot("operators", text)


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


def test_compare_piped_splits_no_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `esper compare | cat` at 80 columns, in this process: CliRunner's output is piped,
    # and only the plugins the command names are loaded, as by `esper` in a subprocess
    # here. The cells run one after another in this process too (tests/inline_runner.py):
    # what is printed does not depend on where they ran.
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "24")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    group, pm = build_cli(PluginManager(extra=[INLINE_RUNNER], autoload=False))
    args = [
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
        "--runner",
        "inline",
        "--out",
        str(tmp_path / "exp"),
    ]
    done = CliRunner().invoke(group, args, obj={"pm": pm})
    assert done.exit_code == 0, done.output
    text = done.stdout.replace(str(tmp_path), "TMP")
    assert "…" not in text
    lines = text.splitlines()
    values = [x for x in lines if x.startswith("    test acc %")]
    assert len(values) == 2 and all(re.search(r"\] *$|\d$", x) for x in values)
    assert not [x for x in lines if "│" in x]  # the wide table is printed as records
    assert "add [tuning] to search it" in " ".join(text.split())  # text, not markup
    # The notes under the records wrap between words (they were lines of 300 columns).
    assert not within(text), within(text)
    assert any(x.startswith("P(> wait): probability that a run") for x in lines)
    # The last note names the results directory, a temporary path whose length moves
    # where that note wraps: compared as one line.
    head, tail = text.split("results in", 1)
    check_snapshot("compare", head + "results in " + " ".join(tail.split()) + "\n")


def test_train_piped_tables_fit(tmp_path: Path) -> None:
    text = piped(
        "train",
        *FAKE_COMPONENTS,
        "--plugin",
        "policies.ppo",
        "--policy",
        "ppo",
        "--set",
        "run.telemetry=[]",
        "--set",
        "run.threads=1",
        "--set",
        "policies.ppo.rollout_episodes=2",
        "--max-epochs",
        "3",
        "--updates",
        "1",
        "--out",
        str(tmp_path / "train"),
        tmp=tmp_path,
    )
    assert "…" not in text
    tables = [x for x in text.splitlines() if x[:1] in "┏┃┡│└"]
    assert tables and max(len(x) for x in tables) <= 80, tables
    check_snapshot("train", text)


def test_report_piped_wraps_between_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = tmp_path / "a-run-directory-with-a-long-name-as-under-runs"
    piped(
        "run",
        *FAKE_COMPONENTS,
        "--plugin",
        "telemetry.jsonl",
        "--set",
        "env.max_epochs=3",
        "--set",
        'run.telemetry=["jsonl"]',
        "--out",
        str(run_dir),
        tmp=tmp_path,
    )
    # `esper report` is the telemetry plugin's command: built in this process with the
    # first-party plugins (a subprocess here loads none), piped as CliRunner's output is.
    monkeypatch.setenv("COLUMNS", "80")
    group, pm = build_cli(plugin_manager())
    done = CliRunner().invoke(group, ["report", str(run_dir)], obj={"pm": pm})
    assert done.exit_code == 0, done.output
    text = done.stdout.replace(str(tmp_path), "TMP")
    assert not within(text), text
    lines = text.splitlines()
    # Each fact starts a line; a continuation is indented under it.
    starts = [x.split(":")[0].split(" ")[0] for x in lines if not x.startswith("  ")]
    assert starts == ["run", "final", "grew", "parameters", "report"], lines
    assert lines[-1].startswith("  ") and "rewards.png)" in lines[-1]
    check_snapshot("report", text)
