"""``esper report`` on a real short run: readable PNGs and a report.md that matches the events."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from esper_telemetry.report import FIGURES, REPORT_FILE

from esper_cli.main import build_cli
from esper_core.plugins import DISABLE_AUTOLOAD_ENV
from esper_core.run.ledger import SeedLedger
from esper_core.run.telemetry import (
    SCHEMA_VERSION,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
    read_events,
)
from tests.plugin_set import plugin_manager
from tests.plugins.esper_telemetry.helpers import FAKE_PLUGIN, run_tiny


def esper(*args: str) -> tuple[int, str]:
    group, pm = build_cli(plugin_manager())
    result = CliRunner().invoke(group, list(args), obj={"pm": pm})
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "run"
    run_tiny(path, ["jsonl", "csv"], "run.n_envs=2", "run.episodes=2")
    return path


def seed_rows(report: str) -> list[dict[str, str]]:
    lines = report.split("## Seeds", 1)[1].strip().splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def test_report_writes_non_trivial_figures_and_a_matching_report(run_dir: Path) -> None:
    from matplotlib.image import imread

    code, output = esper("report", str(run_dir))
    assert code == 0, output
    # Five lines about the run, the last saying where the report and figures are; a line
    # longer than the terminal wraps between words onto indented continuation lines
    # (tests/cli/test_pipe_output.py checks the wrapping at 80 columns).
    lines: list[str] = []
    for line in output.splitlines():
        if line.startswith("  ") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    assert len(lines) == 5, output
    assert lines[0].startswith("run run: tiny / scripted / acc_delta (esper run, completed, 4 ")
    assert lines[1].startswith("final test accuracy ") and "%" in lines[1]
    assert lines[2].startswith("grew: ") and " fossilized" in lines[2]
    assert lines[3].startswith("parameters: +") and "training FLOPs per episode" in lines[3]
    assert lines[4].startswith(f"report: {run_dir / REPORT_FILE} (figures beside it: ")
    for name in FIGURES:
        path = run_dir / name
        assert name in lines[4]
        assert path.stat().st_size > 20_000, name
        pixels = imread(path)
        assert pixels.ndim == 3 and pixels.shape[0] > 300 and pixels.shape[1] > 600
        assert float(pixels[..., :3].std()) > 0.08, f"{name} looks blank"
        colours = {tuple(p) for p in (pixels[::7, ::7, :3] * 255).astype(int).reshape(-1, 3)}
        assert len(colours) > 50, f"{name} has too few colours to hold curves and legends"

    report = (run_dir / REPORT_FILE).read_text(encoding="utf-8")
    for name in FIGURES:
        assert f"]({name})" in report
    events = read_events(run_dir / "events.jsonl")
    germinated = {(e.env, e.episode, e.seed_id): e for e in events if isinstance(e, SeedGerminated)}
    assert germinated, "the scripted policy germinates from the first epoch"
    rows = seed_rows(report)
    assert {(int(r["env"]), int(r["episode"]), r["seed"]) for r in rows} == set(germinated)
    ended = {
        (e.env, e.episode, e.seed_id): e
        for e in events
        if isinstance(e, SeedFossilized | SeedPruned)
    }
    assert any(isinstance(e, SeedFossilized) for e in ended.values()), (
        "the run should fossilize a seed"
    )
    for row in rows:
        key = (int(row["env"]), int(row["episode"]), row["seed"])
        start = germinated[key]
        assert (row["blueprint"], row["slot"], row["germinated"]) == (
            start.blueprint,
            start.slot_id,
            str(start.epoch),
        )
        end = ended.get(key)
        if end is None:
            assert row["fate"] == "live at the end" and row["lifespan (epochs)"].startswith("≥")
        else:
            expected = (
                "fossilized"
                if isinstance(end, SeedFossilized)
                else f"pruned ({end.reason})".replace("(policy)", "(policy)")
            )
            assert row["fate"] == expected
            assert row["lifespan (epochs)"] == str(end.epoch - start.epoch)
            if end.contribution is not None:
                assert float(row["contribution (pts)"]) == pytest.approx(
                    end.contribution, abs=0.006
                )
    # the same records as the runner's summary.json (both come from SeedLedger)
    summary = json.loads((run_dir / "summary.json").read_text())
    ledger = SeedLedger()
    ledger.consume(events)
    assert summary["seeds"] == ledger.state_dict()
    assert len(summary["seeds"]) == len(rows)


def test_report_can_write_elsewhere_and_print_json(run_dir: Path, tmp_path: Path) -> None:
    code, output = esper(
        "report", str(run_dir), "--out", str(tmp_path / "plots"), "--json", "--dpi", "60"
    )
    assert code == 0, output
    written = json.loads(output)
    assert sorted(Path(p).name for p in written) == sorted([*FIGURES, REPORT_FILE])
    assert all(Path(p).parent == tmp_path / "plots" for p in written)


def one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    return lines[0]


def test_missing_run_directory(tmp_path: Path) -> None:
    code, output = esper("report", str(tmp_path / "nope"))
    assert code == 2
    assert one_line_error(output) == f"error: {tmp_path / 'nope'}: no such run directory"


def test_directory_without_events(tmp_path: Path) -> None:
    code, output = esper("report", str(tmp_path))
    assert code == 2
    line = one_line_error(output)
    assert "has no events.jsonl" in line and "--telemetry jsonl" in line


def test_events_written_by_a_newer_schema(run_dir: Path, tmp_path: Path) -> None:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    newer = [re.sub(r'^\{"schema":\d+', f'{{"schema":{SCHEMA_VERSION + 1}', line) for line in lines]
    (tmp_path / "events.jsonl").write_text("\n".join(newer) + "\n")
    code, output = esper("report", str(tmp_path))
    assert code == 2
    line = one_line_error(output)
    assert f"written by telemetry schema {SCHEMA_VERSION + 1}" in line and "upgrade Esper" in line


def test_events_file_without_a_completed_epoch(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").write_text("")
    code, output = esper("report", str(tmp_path))
    assert code == 2
    assert "holds no completed epoch" in one_line_error(output)


def test_the_default_backends_through_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default backends through the real command line: console (quiet), jsonl and csv."""
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "1")
    out = tmp_path / "run"
    code, output = esper(
        "run",
        "--plugin",
        str(FAKE_PLUGIN),
        "--plugin",
        "telemetry.console",
        "--plugin",
        "telemetry.jsonl",
        "--plugin",
        "telemetry.csv",
        "--task",
        "tiny",
        "--policy",
        "scripted",
        "--reward",
        "acc_delta",
        "--max-epochs",
        "4",
        "--quiet",
        "--out",
        str(out),
    )
    assert code == 0, output
    assert {"events.jsonl", "metrics.csv", "summary.json"} <= {p.name for p in out.iterdir()}
    assert len((out / "metrics.csv").read_text().splitlines()) == 1 + 4
