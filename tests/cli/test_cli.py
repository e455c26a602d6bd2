"""The command line: exit codes, one-line errors, listings and config show."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from esper_cli.main import build_cli
from esper_core.plugins import PluginManager
from tests.plugin_set import FAKE_COMPONENTS, FAKE_PLUGIN, REPO, plugin_manager, subprocess_env


def esper(*args: str, autoload: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "esper_cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=subprocess_env(autoload),
        timeout=120,
    )


def test_version(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke("--version")
    assert result.exit_code == 0 and "0.1.0" in result.output


def test_train_help_says_what_one_rollout_is(invoke) -> None:  # type: ignore[no-untyped-def]
    from esper_tamiyo_ppo.options import PPOOptions

    result = invoke("train", "--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())  # click wraps the help text
    default = PPOOptions().rollout_episodes
    assert (
        "each learns from one rollout of policies.ppo.rollout_episodes episodes of every env "
        f"({default} by default)"
    ) in text
    assert "one rollout = one episode" not in text


def test_the_train_section_does_not_say_a_rollout_is_one_episode() -> None:
    from esper_core.config import TrainSection

    doc = TrainSection.__doc__ or ""
    assert "one rollout = one episode" not in doc
    assert "policies.ppo.rollout_episodes" in doc


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "env.bogus=1"], "env: unknown key(s) bogus"),
        (["--set", 'run.gamma="abc"'], 'run.gamma: expected a number, got "abc"'),
        (["--set", "run.gamma=1.5"], "run.gamma: expected a number in (0, 1], got 1.5"),
        (["--task", "nonexistent"], "unknown tasks component 'nonexistent'; available:"),
    ],
)
def test_config_errors_are_one_line_and_exit_2(args: list[str], expected: str) -> None:
    result = esper("config", "show", *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_broken_toml_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "broken.toml"
    bad.write_text("[run]\nseed = = 3\n")
    result = esper("config", "show", "--config", str(bad))
    assert (
        result.returncode == 2
        and str(bad) in result.stderr
        and len(result.stderr.strip().splitlines()) == 1
    )


def test_debug_shows_the_traceback() -> None:
    result = esper("--debug", "config", "show", "--set", "run.gamma=9")
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_config_show_round_trips(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = invoke(
        "config",
        "show",
        *FAKE_COMPONENTS,
        "--set",
        "run.seed=4",
        "--set",
        "rewards.acc_delta.scale=2.0",
    )
    assert result.exit_code == 0, result.output
    data = tomllib.loads(result.output)
    assert data["rewards"]["acc_delta"] == {"scale": 2.0}
    assert data["tasks"]["tiny"]["n_train"] == 256  # component defaults are filled in
    path = tmp_path / "resolved.toml"
    path.write_text(result.output)
    again = invoke("config", "show", "--plugin", FAKE_PLUGIN, "--config", str(path))
    assert again.exit_code == 0 and tomllib.loads(again.output) == data


def test_component_options_are_validated_with_their_path(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke(
        "config",
        "show",
        *FAKE_COMPONENTS,
        "--set",
        'rewards.acc_delta.scale="big"',
        "--set",
        "tasks.tiny.nope=1",
    )
    assert result.exit_code == 2
    assert 'rewards.acc_delta.scale: expected a number, got "big"' in result.stderr
    assert "tasks.tiny: unknown key(s) nope" in result.stderr


def test_plugins_json_lists_first_party_plugins_with_versions() -> None:
    result = esper("plugins", "--json", autoload=True)
    assert result.returncode == 0, result.stderr
    plugins = {p["name"]: p for p in json.loads(result.stdout)}
    assert plugins["executors.serial"]["version"] == "0.1.0"
    for name, info in plugins.items():
        assert info["version"], f"{name} has no version"
        assert info["components"], f"{name} registers nothing"


def test_third_party_example_is_listed_and_usable() -> None:
    """examples/third-party-plugin is installed in the test environment (requirements-test.txt)
    and discovered through its entry point."""
    group, pm = build_cli(PluginManager(autoload=True))
    runner = CliRunner()
    listing = json.loads(runner.invoke(group, ["plugins", "--json"], obj={"pm": pm}).output)
    example = next(p for p in listing if p["name"] == "blueprints.example")
    assert example["distribution"] == "esper-example-plugin" and example["components"] == [
        "blueprints.cnn/dilated"
    ]
    listed = runner.invoke(group, ["blueprints", "--topology", "cnn", "--json"], obj={"pm": pm})
    blueprints = json.loads(listed.output)
    assert any(b["key"] == "cnn/dilated" and b["identity_at_birth"] for b in blueprints)


def test_help_and_plugins_import_neither_torch_nor_matplotlib() -> None:
    """What keeps the listings fast, checked without a clock (a timed test fails under load;
    the timing itself is benchmarks/cli_latency.py)."""
    probe = (
        "import sys\n"
        "from esper_cli.main import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
        "heavy = sorted({'torch', 'matplotlib', 'numpy'} & set(sys.modules))\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    for args in (["--help"], ["plugins"]):
        result = subprocess.run(
            [sys.executable, "-c", probe, *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=subprocess_env(autoload=True),
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        assert "HEAVY ['numpy']" in result.stderr or "HEAVY []" in result.stderr, (
            args,
            result.stderr,
        )


def test_an_unknown_slot_is_one_line_and_leaves_no_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "run"
    slots = ("--set", 'env.slots=["r9"]', "--set", "run.telemetry=[]")
    result = esper("run", *FAKE_COMPONENTS, *slots, "--out", str(out))
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: env.slots: unknown slot id(s) r9"), line
    assert not out.exists()


def test_third_party_blueprint_germinates_by_name(tmp_path: Path) -> None:
    from esper_core.config import load_config
    from esper_core.env.gym import make_env
    from esper_core.lifecycle.stages import Stage

    pm = plugin_manager("blueprints.example")
    env = make_env(load_config(overrides=["run.telemetry=[]", "env.max_epochs=2"]), pm)
    env.reset(0)
    assert "cnn/dilated" in env.space.blueprints
    result = env.step(env.space.germinate("r0c0", "dilated"))
    slot = env.model.slot("r0c0")
    assert (
        result.refused is None
        and slot.stage == Stage.BLENDING  # the default lifecycle blends from germination
        and slot.state.blueprint == "cnn/dilated"
    )
    assert type(slot.seed).__module__ == "esper_example_plugin.blueprints"


def test_the_fake_plugin_file_loads_from_any_directory(
    fake_plugin_file: Path, tmp_path: Path
) -> None:
    """``--plugin path/to/tests/fake_plugin.py`` needs no ``tests`` package on sys.path."""
    args = ["config", "show", "--plugin", str(fake_plugin_file), *FAKE_COMPONENTS[2:]]
    result = subprocess.run(
        [sys.executable, "-m", "esper_cli", *args, "--set", "run.telemetry=[]"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=subprocess_env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(result.stdout)["tasks"]["tiny"]["n_train"] == 256


def test_ppo_without_a_checkpoint_is_one_line_and_leaves_no_run_directory(tmp_path: Path) -> None:
    """`esper run --policy ppo` used to evaluate an untrained policy without a word."""
    out = tmp_path / "run"
    fake = (*FAKE_COMPONENTS[:4], "--plugin", "policies.ppo", "--reward", "acc_delta")
    result = esper("run", *fake, "--policy", "ppo", "--set", "run.telemetry=[]", "--out", str(out))
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "would evaluate an untrained policy" in line and "ppo:DIR/checkpoint.pt" in line
    assert not out.exists()
