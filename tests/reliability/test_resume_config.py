"""Resuming, the library's part: a resumed run is the run that wrote the
checkpoint. A config edited since is refused in one line naming what changed; only the
run's length may change, and a longer run is recorded in its config.toml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper_core.config import load_config
from esper_core.errors import RunDirError
from esper_core.run import api
from esper_core.run.checkpoint import load_checkpoint, save_checkpoint
from esper_core.run.content_digest import DIGEST_KEY
from tests.conftest import Invoke
from tests.plugins.esper_telemetry.faulty_plugin import CRASH_FILE
from tests.plugins.esper_telemetry.helpers import FAULTY_PLUGIN, plugin_manager, run_tiny
from tests.reliability.cli_runs import FAKE, failed_in_one_line


def crashed_run(run_dir: Path, *sets: str) -> None:
    """A run killed in epoch 7 of its first episode, with a checkpoint at epoch 5."""
    run_dir.mkdir(parents=True)
    (run_dir / CRASH_FILE).write_text("7")
    with pytest.raises(BaseException, match="simulated crash"):
        run_tiny(run_dir, ["crash"], "run.checkpoint_every=5", *sets)


def resume(run_dir: Path, *sets: str) -> dict:  # type: ignore[type-arg]
    config = load_config(run_dir / "config.toml", list(sets))
    return api.run(config, plugin_manager(), run_dir=run_dir, resume=True, quiet=True)


def test_an_edited_config_is_refused_in_one_line_naming_the_change(
    invoke: Invoke, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    crashed_run(run_dir)
    config = run_dir / "config.toml"
    config.write_text(config.read_text().replace("width = 4", "width = 6"))  # the host's shape
    result = invoke(
        "run", "--plugin", FAKE, "--plugin", str(FAULTY_PLUGIN), "--resume", str(run_dir), "--quiet"
    )
    line = failed_in_one_line(result)
    assert "size mismatch" not in line
    assert "config changed since the checkpoint (tasks.tiny.width: 4 -> 6)" in line


def test_a_resume_may_extend_the_run_and_records_its_new_length(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    crashed_run(run_dir)
    summary = resume(run_dir, "run.episodes=2")
    assert summary["status"] == "completed" and summary["episodes_completed"] == 2
    assert load_config(run_dir / "config.toml").run.episodes == 2
    assert load_checkpoint(run_dir / "checkpoint.pt")["outer"] == 2


def test_a_resume_may_not_shorten_the_run_below_what_is_done(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_tiny(run_dir, [], "run.episodes=2", "env.max_epochs=2")
    with pytest.raises(RunDirError, match=r"with run\.episodes=1: 2 episodes are already done"):
        resume(run_dir, "run.episodes=1")


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--max-epochs", "20"], "--max-epochs"),
        (["--set", "env.max_epochs=20", "--seed", "3"], "--set, --seed"),
        (["--plugin", "rewards.pbrs"], "--plugin rewards.pbrs"),
    ],
)
def test_flags_that_would_change_a_resumed_run_are_refused_by_name(
    invoke: Invoke, tmp_path: Path, flags: list[str], named: str
) -> None:
    run_dir = tmp_path / "run"
    run_tiny(run_dir, [], "env.max_epochs=2")
    result = invoke("run", "--plugin", FAKE, "--resume", str(run_dir), "--quiet", *flags)
    line = failed_in_one_line(result)
    assert f"error: {named} cannot be used with --resume" in line
    assert "only --episodes may change" in line


def test_plugins_naming_the_runs_own_components_only_load_them(
    invoke: Invoke, tmp_path: Path
) -> None:
    """With autoloading off, ``--plugin KIND.NAME`` is how a resumed run (and its --nproc
    ranks) loads the plugins it started with: one that names the run's own task, reward,
    policy, executor or telemetry backend, or a blueprint plugin, changes nothing."""
    run_dir = tmp_path / "run"
    run_tiny(run_dir, ["jsonl"], "env.max_epochs=2")
    same = ["tasks.tiny", "rewards.acc_delta", "policies.scripted", "executors.serial"]
    same += ["telemetry.jsonl", "blueprints.cnn"]
    flags = [arg for name in same for arg in ("--plugin", name)]
    result = invoke(
        "run", "--plugin", FAKE, "--resume", str(run_dir), "--episodes", "2", "--quiet", *flags
    )
    assert result.exit_code == 0, result.output
    refused = invoke(
        "run", "--plugin", FAKE, "--resume", str(run_dir), "--quiet", *flags,
        "--plugin", "telemetry.csv", "--plugin", "tasks.digits",
    )  # fmt: skip
    line = failed_in_one_line(refused)
    assert (
        "error: --plugin tasks.digits, --plugin telemetry.csv cannot be used with --resume" in line
    )


def test_episodes_with_resume_lengthens_the_run_and_says_so(invoke: Invoke, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_tiny(run_dir, [], "env.max_epochs=2")
    result = invoke(
        "run", "--plugin", FAKE, "--resume", str(run_dir), "--episodes", "2", "--quiet", "--json"
    )
    assert result.exit_code == 0, result.output
    assert "Resuming with run.episodes 1 -> 2." in result.stderr
    assert json.loads(result.stdout)["episodes_completed"] == 2


def test_a_refused_resume_does_not_announce_the_longer_run(invoke: Invoke, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_tiny(run_dir, [], "env.max_epochs=2")
    data = load_checkpoint(run_dir / "checkpoint.pt")
    (run_dir / "checkpoint.pt").write_bytes(b"not a checkpoint")  # refused when verified
    assert data  # the run did write one
    result = invoke("run", "--plugin", FAKE, "--resume", str(run_dir), "--episodes", "2")
    assert result.exit_code != 0
    assert "Resuming with" not in result.stderr
    failed_in_one_line(result)


def test_updates_with_resume_is_refused_for_training(invoke: Invoke, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoint.pt").write_bytes(b"")  # refused before it is read
    (run_dir / "config.toml").write_text("")
    line = failed_in_one_line(invoke("train", "--resume", str(run_dir), "--updates", "5"))
    assert "--updates cannot be used with --resume" in line
    assert "schedules span its planned updates" in line


def test_a_run_checkpointed_before_an_option_existed_resumes_at_its_default(
    tmp_path: Path,
) -> None:
    # An option added to a component since the checkpoint (here the tiny task's
    # ``blocks``, removed from the saved config and config.toml as an older Esper
    # would have written them) is what its default makes: the resume goes on.
    run_dir = tmp_path / "run"
    crashed_run(run_dir)
    data = load_checkpoint(run_dir / "checkpoint.pt")
    assert data["config"]["tasks"]["tiny"].pop("blocks") == 2
    metadata = json.loads((run_dir / "checkpoint.json").read_text())
    metadata.pop(DIGEST_KEY, None)
    data.pop("format", None), data.pop(DIGEST_KEY, None)
    save_checkpoint(run_dir / "checkpoint.pt", data, metadata)
    config = run_dir / "config.toml"
    config.write_text(config.read_text().replace("blocks = 2\n", ""))
    summary = resume(run_dir)
    assert summary["status"] == "completed"
    # A value other than the default is still a change.
    crashed_run(tmp_path / "again")
    with pytest.raises(RunDirError, match=r"tasks\.tiny\.blocks: 2 -> 3"):
        resume(tmp_path / "again", "tasks.tiny.blocks=3")
