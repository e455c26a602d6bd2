"""A PPO checkpoint whose numbers no training run writes (a NaN or 1e30
weight, a NaN normaliser mean, a negative variance), its content digest recomputed as
anyone handing over a file can, is refused in one line wherever it is loaded: ``esper
run --policy ppo:PATH``, the Grower, ``esper compare`` (which would pool it as a run)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from esper_core.errors import CheckpointError, EsperError
from tests.conftest import Invoke
from tests.reliability.cli_runs import failed_in_one_line

pytest.importorskip("esper_tamiyo_ppo")


def _first_weight(policy: dict[str, Any]) -> torch.Tensor:
    return next(iter(policy["network"].values()))


def _nan_weight(p: dict[str, Any]) -> None:
    _first_weight(p)[0] = math.nan


def _inf_weight(p: dict[str, Any]) -> None:
    _first_weight(p)[0] = math.inf


def _absurd_weights(p: dict[str, Any]) -> None:
    _first_weight(p).mul_(1e30)


def _nan_mean(p: dict[str, Any]) -> None:
    p["obs_normalizer"]["global"]["mean"][0] = math.nan


def _negative_var(p: dict[str, Any]) -> None:
    p["obs_normalizer"]["slot"]["var"][0] = -1.0


FORGERIES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "nan-weight": (_nan_weight, "is not finite"),
    "inf-weight": (_inf_weight, "is not finite"),
    "absurd-weights": (_absurd_weights, "past 10000"),
    "nan-mean": (_nan_mean, "obs_normalizer.global mean is not finite"),
    "negative-var": (_negative_var, "obs_normalizer.slot var is negative"),
}


def forged_checkpoint(path: Path, forgery: str) -> Path:
    """The shipped pretrained checkpoint, edited, saved with a matching digest again."""
    from esper_tamiyo_ppo.compat import pretrained_path

    from esper_core.run.checkpoint import load_checkpoint, save_checkpoint

    data = load_checkpoint(pretrained_path())
    data.pop("format", None)
    FORGERIES[forgery][0](data["policy"])
    save_checkpoint(path, data)
    return path


@pytest.mark.parametrize("forgery", FORGERIES)
def test_each_forgery_is_refused_on_load(tmp_path: Path, forgery: str) -> None:
    from esper_tamiyo_ppo.compat import load_policy_state
    from esper_tamiyo_ppo.state_values import check_state_values

    path = forged_checkpoint(tmp_path / "forged.pt", forgery)
    state, source = load_policy_state(str(path))  # the digest matches: it loads
    with pytest.raises(CheckpointError, match=FORGERIES[forgery][1]) as caught:
        check_state_values(state, source)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_the_shipped_checkpoints_pass(tmp_path: Path) -> None:
    from esper_tamiyo_ppo.compat import load_policy_state
    from esper_tamiyo_ppo.state_values import check_state_values

    docs = Path(__file__).resolve().parents[2] / "docs" / "results" / "checkpoints"
    for argument in ("pretrained", *map(str, sorted(docs.glob("*.pt")))):
        check_state_values(*load_policy_state(argument))


def test_the_cli_refuses_a_forged_checkpoint(invoke: Invoke, tmp_path: Path) -> None:
    path = forged_checkpoint(tmp_path / "forged.pt", "nan-weight")
    args = ["run", "--task", "digits", "--policy", f"ppo:{path}", "--quiet", "--max-epochs", "1"]
    line = failed_in_one_line(invoke(*args, "--out", str(tmp_path / "r")))
    assert "is not finite" in line
    assert not (tmp_path / "r").exists()  # refused before the run directory was made


def test_the_grower_refuses_a_forged_checkpoint(tmp_path: Path) -> None:
    from tests.reliability.test_grower_attack import grower

    path = forged_checkpoint(tmp_path / "forged.pt", "negative-var")
    with pytest.raises(EsperError, match="var is negative"):
        grower(policy=f"ppo:{path}")
