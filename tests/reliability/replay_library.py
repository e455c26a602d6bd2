"""The attack on the library API, as a library user meets it: each case below runs in a
process of its own (``python -m tests.reliability.replay_library NAME DIR``), as the
attack ran them. An ``EsperError`` is what a user's program sees: the driver prints it as
``error: ...`` and exits 2, so the replay judges it as it judges the CLI. A case that must
work raises :class:`Wrong` when it does not (exit 3); any other exception is a traceback."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.reliability import replay_grower_growth as growth
from tests.reliability.replay_case import Case, Check, nothing_lost


class Wrong(Exception):
    """The library accepted the input but did the wrong thing."""


def _grower_attack() -> Any:
    from tests.reliability import test_grower_attack

    return test_grower_attack


def _forged(name: str) -> Callable[[Path], None]:
    def case(_d: Path) -> None:
        attack = _grower_attack()
        saved = attack._saved()
        mutate, _expected = attack.FORGERIES[name]
        g = attack.grower()
        attack.epoch(g)
        weights = copy.deepcopy(g.state_dict()["env"]["model"])
        try:
            g.load_state_dict(mutate(copy.deepcopy(saved)))
        finally:  # refused or not, the grower must be as it was
            after = g.state_dict()["env"]["model"]
            for key, value in weights.items():
                if hasattr(value, "equal") and not value.equal(after[key]):
                    raise Wrong(f"a refused state changed {key}")
        raise Wrong("the state was loaded")

    return case


def _mismatched(_d: Path) -> None:
    attack = _grower_attack()
    saved = attack._saved()
    attack.grower(attack.Net(classes=6), slots=["c2"]).load_state_dict(saved)
    raise Wrong("another model's state was loaded")


def _built(**options: Any) -> Callable[[Path], None]:
    def case(_d: Path) -> None:
        import torch

        attack = _grower_attack()
        built = {k: (v() if callable(v) else v) for k, v in options.items()}
        if built.pop("scalar", False):
            built["model"] = attack.Scalar()
        if "example_input" in options:
            built["example_input"] = torch.randn(4, 5, 8, 8)
        attack.grower(**built)
        raise Wrong("the Grower was built")

    return case


def _two_growers(_d: Path) -> None:
    attack = _grower_attack()
    model = attack.Net()
    attack.grower(model)
    attack.grower(model)
    raise Wrong("a second Grower took the same model")


def _end_epoch_after_close(_d: Path) -> None:
    attack = _grower_attack()
    g = attack.grower()
    g.close()
    g.end_epoch([(attack.X, attack.Y)])
    raise Wrong("end_epoch ran after close()")


def _lightning_fit(epochs: int, root: Path, slots: list[str], ckpt: str | None = None) -> Any:
    import logging
    import warnings

    import torch
    from esper_lightning import EsperGrowth
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tests.plugin_set import first_party
    from tests.plugins.esper_lightning.test_callback import EAGER, SmallNet, _loaders, _trainer

    # Lightning's banner and its warnings go to stderr too; the verdict reads ours alone.
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    torch.manual_seed(0)
    growth = EsperGrowth(slots, overrides=EAGER, plugins=first_party())
    saver = ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1, every_n_epochs=1)
    train, val = _loaders()
    _trainer(epochs, root, [growth, saver]).fit(SmallNet(), train, val, ckpt_path=ckpt)
    return growth


def _lightning_extended(d: Path) -> None:
    _lightning_fit(2, d / "a", ["features.1", "features.4"])
    last = max((d / "a" / "ckpt").glob("*.ckpt"))
    growth = _lightning_fit(4, d / "b", ["features.1", "features.4"], ckpt=str(last))
    if growth.grower is None or growth.grower.epoch != 4:
        raise Wrong("the extended fit did not grow through its 4 epochs")


def _lightning_other_model(d: Path) -> None:
    _lightning_fit(2, d / "a", ["features.1", "features.4"])
    last = max((d / "a" / "ckpt").glob("*.ckpt"))
    _lightning_fit(4, d / "b", ["features.1"], ckpt=str(last))
    raise Wrong("a grower of other slots resumed from the checkpoint")


def _gym_env() -> Any:
    from esper_core.env.gym import EsperGymEnv
    from tests.plugin_set import plugin_manager

    return EsperGymEnv(
        overrides=['run.task="tiny"', 'run.policy="scripted"', "run.telemetry=[]"],
        pm=plugin_manager("tests.fake_plugin"),
    )


def _gym_huge_seed(_d: Path) -> None:
    env = _gym_env()
    env.reset(seed=0)
    try:
        env.reset(seed=2**70)
    except ValueError as exc:
        if "takes an integer in [0, 4294967295]" not in str(exc):
            raise
    else:
        raise Wrong("reset(seed=2**70) was accepted")
    env.reset()  # the env still works
    env.reset(seed=5)


def _gym_index_past_its_head(_d: Path) -> None:
    import numpy as np

    env = _gym_env()
    env.reset(seed=0)
    for action in ([1, 0, 999, 0, 0, 0], [1, 0, 0, 0, 99, 0], [3, 0, 0, 0, 0, 99]):
        *_, info = env.step(np.array(action))
        if "out of range" not in str(info["refused"]):
            raise Wrong(f"{action} was not refused: {info['refused']!r}")


FUNCTIONS: dict[str, Callable[[Path], None]] = {
    "forged-epoch": _forged("epoch huge"),
    "forged-counter": _forged("counter negative"),
    "forged-reward-nan": _forged("reward nan"),
    "truncated-env": _forged("env truncated"),
    "truncated-weights": _forged("model weights truncated"),
    "not-a-dict": _forged("not a dict"),
    "foreign-optimizer": _forged("optimizer of another model"),
    "mismatched-model": _mismatched,
    "no-such-slot": _built(slots=["c3"]),
    "non-torch-optimizer": _built(optimizer=object),
    "wrong-input-shape": _built(example_input=True),
    "one-d-output": _built(scalar=True),
    "two-growers": _two_growers,
    "end-epoch-after-close": _end_epoch_after_close,
    "lightning-extended": _lightning_extended,
    "lightning-other-model": _lightning_other_model,
    "gym-huge-seed": _gym_huge_seed,
    "gym-index-past-its-head": _gym_index_past_its_head,
    **growth.FUNCTIONS,  # width growth through the Grower
}


def _case(name: str) -> Callable[[Path], tuple[list[str], Check]]:
    def setup(d: Path) -> tuple[list[str], Check]:
        return ["-m", "tests.reliability.replay_library", name, str(d)], nothing_lost

    return setup


CASES = (
    Case("6 Grower.load_state_dict: epoch 10**9", _case("forged-epoch"), says="env.epoch"),
    Case("6 Grower.load_state_dict: counter -1", _case("forged-counter"), says="n_pruned"),
    Case("6 Grower.load_state_dict: reward NaN", _case("forged-reward-nan"), says="nan"),
    Case("6 Grower.load_state_dict: env truncated", _case("truncated-env"), says="holds env."),
    Case(
        "6 Grower.load_state_dict: weights truncated",
        _case("truncated-weights"),
        says="does not fit this grower",
    ),
    Case("6 Grower.load_state_dict: not a dict", _case("not-a-dict"), says="is a dict"),
    Case(
        "6 Grower.load_state_dict: another model's optimizer",
        _case("foreign-optimizer"),
        says="does not fit this grower",
    ),
    Case(
        "6 Grower.load_state_dict: another model's state",
        _case("mismatched-model"),
        says="The grower is unchanged",
    ),
    Case("6 Grower: a slot that does not exist", _case("no-such-slot"), says="no submodule"),
    Case("6 Grower: a non-torch optimizer", _case("non-torch-optimizer"), says="torch.optim"),
    Case("6 Grower: a wrong-shaped example input", _case("wrong-input-shape"), says="rejects it"),
    Case("6 Grower: a model with 1-D output", _case("one-d-output"), says="[batch, classes]"),
    Case("6 two Growers on one model", _case("two-growers"), says="another Grower"),
    Case("6 end_epoch after close()", _case("end-epoch-after-close"), says="after close()"),
    Case("6 Lightning fit extended past its epochs", _case("lightning-extended"), code=0),
    Case(
        "6 Lightning resumed from another model's checkpoint",
        _case("lightning-other-model"),
        says="create EsperGrowth with the slots it was saved with",
    ),
    # ---- Newer surfaces (RELIABILITY.md, "the newer surfaces").
    Case("N gym reset(seed=2**70), then reset() (works)", _case("gym-huge-seed"), code=0),
    Case(
        "N gym action indices past their heads (refused)", _case("gym-index-past-its-head"), code=0
    ),
    *growth.cases(_case),
)


def main(name: str, directory: str) -> int:
    from esper_core.errors import EsperError

    try:
        FUNCTIONS[name](Path(directory))
    except EsperError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (Wrong, growth.Wrong) as exc:
        print(f"WRONG: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
