"""Config: every number that scales work has a bound,
lists a run chooses from cannot be empty, and paths the OS cannot take are refused, all
at config validation (also under ``--dry-run``), in one line with exit code 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import attrs
import pytest

from esper_core.config import load_config
from esper_core.converter import Each, Range
from esper_core.errors import ConfigError
from esper_core.run.resolve import resolve
from tests.conftest import Invoke
from tests.plugin_set import FAKE_COMPONENTS, plugin_manager
from tests.reliability.cli_runs import failed_in_one_line

KINDS = ("tasks", "rewards", "policies", "telemetry", "executors")
# Options whose values are not one number (each value is checked by its own rule).
NOT_NUMBERS = {"policies.ppo.init_op_bias"}


def numeric_options() -> list[tuple[str, attrs.Attribute]]:  # type: ignore[type-arg]
    pm = plugin_manager()
    found = []
    for kind in KINDS:
        registry = pm.registry(kind)
        for name in registry.names():
            for field in attrs.fields(registry.get(name).Options):
                annotated = str(field.type)
                if any(t in annotated for t in ("int", "float")) and annotated != "bool":
                    found.append((f"{kind}.{name}.{field.name}", field))
    return found


def test_every_numeric_option_of_a_first_party_plugin_has_a_finite_range() -> None:
    unbounded = []
    for key, field in numeric_options():
        check = field.metadata.get("check")
        inner = check.inner if isinstance(check, Each) else check
        bounded = (
            isinstance(inner, Range)
            and inner.lo is not None
            and inner.hi is not None
            and math.isfinite(inner.lo)
            and math.isfinite(inner.hi)
        )
        if not bounded and key not in NOT_NUMBERS:
            unbounded.append(key)
    assert unbounded == []


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        (
            "rewards.pbrs.epoch_bonus=1e20",
            "rewards.pbrs.epoch_bonus: expected a number in [0, 1000]",
        ),
        ("rewards.pbrs.potential_holding=-1e20", "rewards.pbrs.potential_holding"),
        ("policies.heuristic.gain_per_doubling=1e20", "policies.heuristic.gain_per_doubling"),
        ("tasks.glyphs.convs_per_block=100000", "tasks.glyphs.convs_per_block"),
        ("tasks.glyphs.noise=1e300", "tasks.glyphs.noise"),
    ],
)
def test_absurd_plugin_options_are_refused(assignment: str, expected: str) -> None:
    component = assignment.split(".")[1]
    kind = assignment.split(".")[0]
    selection = {"rewards": "reward", "policies": "policy", "tasks": "task"}[kind]
    config = load_config(overrides=[f"run.{selection}={component}", assignment])
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        resolve(config, plugin_manager())


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        ("env.blueprints=''", "env.blueprints: expected at least one item"),
        ("env.blueprints=[]", "env.blueprints: expected at least one item"),
        ("lifecycle.styles=''", "lifecycle.styles: expected at least one item"),
        ("lifecycle.styles=[]", "lifecycle.styles: expected at least one item"),
    ],
)
def test_an_empty_list_that_would_leave_nothing_to_grow_is_refused(
    invoke: Invoke, assignment: str, expected: str
) -> None:
    line = failed_in_one_line(invoke("config", "show", "--set", assignment))
    assert expected in line


def test_a_nul_byte_in_out_dir_is_refused_at_validation(invoke: Invoke, tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[run]\nout_dir = "\\u0000"\n')
    line = failed_in_one_line(invoke("config", "show", "--config", str(config)))
    assert "run.out_dir: expected a path of 1 to 4096 characters without NUL bytes" in line
    with pytest.raises(ConfigError, match=r"run\.out_dir"):
        load_config(overrides=['run.out_dir=""'])


COMPARE = ["compare", *FAKE_COMPONENTS, "--dry-run"]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--seeds", "100000000"], "seeds: expected an integer in [1, 1000]"),
        (["--resamples", "100000000000"], "resamples: expected an integer in [100, 1000000]"),
        (["--jobs", "100000"], "jobs: expected an integer in [1, 1024]"),
    ],
)
def test_compare_bounds_what_scales_its_work_even_in_a_dry_run(
    invoke: Invoke, tmp_path: Path, flags: list[str], expected: str
) -> None:
    line = failed_in_one_line(invoke(*COMPARE, "--out", str(tmp_path / "exp"), *flags))
    assert expected in line
    assert not (tmp_path / "exp").exists()


@pytest.mark.parametrize(
    ("experiment", "expected"),
    [
        ({"policies": [{"label": "mine"}]}, "policy entry 0: name: expected a policy component"),
        (
            {
                "policies": ["scripted"],
                "baselines": ["size-sweep"],
                "sweep": {"sizes": [{"label": "../../../../../../victimexp"}]},
            },
            "sweep.sizes.0.label: expected letters",
        ),
        (
            {
                "policies": ["scripted"],
                "baselines": ["size-sweep"],
                "sweep": {"sizes": [{"label": "a/b"}]},
            },
            "sweep.sizes.0.label: expected letters",
        ),
    ],
)
def test_an_experiment_file_that_cannot_be_meant_is_refused_in_a_dry_run(
    invoke: Invoke,
    tmp_path: Path,
    experiment: dict,
    expected: str,  # type: ignore[type-arg]
) -> None:
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(experiment))
    out = tmp_path / "out" / "exp"
    args = ["compare", str(path), "--plugin", FAKE_COMPONENTS[1], "--task", "tiny"]
    line = failed_in_one_line(invoke(*args, "--out", str(out), "--dry-run"))
    assert expected in line
    assert not (tmp_path / "victimexp").exists() and not out.exists()
