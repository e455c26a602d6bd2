"""The Grower: Esper inside the user's own training loop.

::

    grower = Grower(model, slots=["layer1", "layer2"], example_input=x, optimizer=opt)
    for epoch in range(epochs):
        train_one_epoch(model, opt, loader)  # the user's code, untouched
        grower.end_epoch(val_loader)
        print(grower.decision)  # what the policy does next, and why

``end_epoch`` is what the env does after an epoch (``MorphogeneticEnv.end_epoch``: slot
measurements with fused counterfactuals, governor, alpha ticks and cooldowns, reward,
observation), then the policy's action for the next epoch (``apply_action``: the
lifecycle rules), whose seed parameters join the user's optimizer in the host's groups
(:mod:`~esper_core.grow.loop_trainer`). The policy is any installed one, by the name
``esper run --policy`` takes (``"ppo:runs/x/checkpoint.pt"`` included), built by the
same resolution as a run's.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from attrs import frozen
from torch import nn

from esper_core.components.policy import InstallsAtBirth, grows_host
from esper_core.config import RunConfig, config_to_dict, load_config
from esper_core.config_io import merge
from esper_core.env import host_growth
from esper_core.env.decision import finished
from esper_core.env.observation import Observation
from esper_core.env.step import StepResult
from esper_core.errors import CheckpointError, ConfigError, GrowerError
from esper_core.grow.grower_state import (
    CONFIG_KEY,
    STATE_FORMAT,
    check_growth_config,
    check_state,
    growth_config,
)
from esper_core.grow.layer_growth import allow_layer_growth
from esper_core.grow.loop_env import LoopEnv, LoopTask
from esper_core.grow.loop_trainer import check_optimizer
from esper_core.grow.module_host import ModuleHost, host_from_module
from esper_core.lifecycle.actions import WAIT
from esper_core.lifecycle.model import MorphogeneticModel
from esper_core.lifecycle.slot_state import SlotReport
from esper_core.lifecycle.stages import Stage
from esper_core.plugins import PluginManager
from esper_core.run.policy_ref import PolicyRef
from esper_core.run.resolve import (
    component,
    policy_context,
    resolve_blueprints,
    resolve_operators,
    reward_setup,
)

# The attribute a Grower's host leaves on the user's module while its hooks are on it:
# the state lives on the module itself (not in a registry), so a second Grower on the
# same module can be refused instead of stacking a second set of hooks.
OWNER_ATTRIBUTE = "_esper_grower_host"

# The reason of the first epoch's WAIT: the policy decides only after an epoch.
FIRST_EPOCH = "the first epoch trains the model as it was given; the policy decides after it"


@frozen
class GrowthDecision:
    """The policy's decision at an epoch boundary: what it does in the epoch that starts
    now, and why (the policy's ``Action.reason``; empty when it gives none)."""

    epoch: int  # epochs done when it was taken (0: before the first)
    action: str  # described, e.g. "GERMINATE layer2 cnn/conv_small linear_add tempo=5"
    reason: str

    def __str__(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"epoch {self.epoch}: {self.action}{why}"


def _device_of(model: nn.Module) -> torch.device:
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def _config(
    config: RunConfig | None,
    overrides: Sequence[str],
    policy: str,
    seed: int,
    max_epochs: int,
    device: torch.device,
) -> RunConfig:
    data = config_to_dict(config or RunConfig())
    data.pop("schema_version", None)
    given = {
        "run": {"policy": policy, "seed": seed, "device": str(device)},
        "env": {"max_epochs": max_epochs},
    }
    return load_config(extra=merge(data, given), overrides=list(overrides))


class Grower:
    """Grows seeds in ``model`` at the named submodules while the user's loop trains it.

    ``optimizer``: the user's optimizer that seed parameters join, in the host's groups
    of their kind (or give it later with :meth:`attach_optimizer`); ``seed_group``:
    hyper-parameters of the seeds' own, in groups of their own (see
    :mod:`~esper_core.grow.loop_trainer`). ``max_epochs``: the planned length of training
    (observations and a PPO policy read it). ``val_data``: validation batches of the
    untrained model, measured once as the first "before" (the chance level otherwise).
    ``config``/``overrides``: lifecycle, governor and component options, as ``esper
    run`` takes them (``"lifecycle.min_training_epochs=3"``).
    """

    def __init__(
        self,
        model: nn.Module,
        slots: Sequence[str],
        *,
        example_input: torch.Tensor,
        policy: str = "heuristic",
        optimizer: torch.optim.Optimizer | None = None,
        seed_group: Mapping[str, Any] | None = None,
        max_epochs: int = 100,
        seed: int = 0,
        val_data: Iterable[Any] | None = None,
        config: RunConfig | None = None,
        overrides: Sequence[str] = (),
        plugins: Sequence[str] = (),
    ) -> None:
        owner = getattr(model, OWNER_ATTRIBUTE, None)
        if isinstance(owner, _Owner) and owner.grows():
            raise GrowerError(
                f"{type(model).__name__} is already grown by another Grower (or EsperGrowth "
                "callback); call its close() first, or grow a copy of the model"
            )
        if optimizer is not None:
            check_optimizer(optimizer, "optimizer")
        host = host_from_module(model, slots, example_input)
        device = _device_of(model)
        cfg = _config(config, overrides, policy, seed, max_epochs, device)
        pm = PluginManager(extra=list(plugins))
        ref = PolicyRef.parse(cfg.run.policy)
        problems: list[str] = []
        policy_c = component(pm, "policies", ref.name, cfg, problems)
        reward_c = component(pm, "rewards", cfg.run.reward, cfg, problems)
        if problems:
            raise ConfigError(problems)
        assert policy_c is not None and reward_c is not None
        blueprints = resolve_blueprints(pm, cfg, host.topology)
        if not blueprints:
            raise GrowerError(
                f"no blueprints are installed for {host.topology} slots; "
                "install esper-blueprints (pip install -e plugins/esper-blueprints)"
            )
        if host.output_features < 2:
            raise GrowerError(
                f"{type(model).__name__} returns no [batch, classes] (or [batch, seq, vocab]) "
                "logits on the example input; the Grower validates with cross-entropy on them"
            )
        task = LoopTask(host.topology, host.output_features, host)
        options = {"optimizer": optimizer, "group_options": seed_group}
        reward = reward_c.cls(reward_c.options, reward_setup(cfg))
        self.env = LoopEnv(task, reward, blueprints, cfg, options, device, resolve_operators(pm))
        self.config = cfg
        self._growth_config = growth_config(cfg, ref.name, policy_c.options)
        try:
            self.policy = policy_c.cls(
                policy_c.options, policy_context(cfg, [self.env], "loop", ref.argument)
            )
            self.policy.reset([0])
            if isinstance(self.policy, InstallsAtBirth):
                self.env.install_at_birth(list(self.policy.birth_seeds()))
            if grows_host(self.policy):
                allow_layer_growth(self.env, self.policy, host, example_input)
            baseline = None
            if val_data is not None:
                self.env.use_validation(val_data)
                baseline = self.env.measure()
            self.env.start(baseline, example_input)
            self._closed = False
            self._open_epoch(WAIT.because(FIRST_EPOCH))
        except BaseException:
            # The env put its hooks and slots on the user's module: a grower that fails
            # to start takes them off, so the module is as given and a retry can grow it.
            host.unroute()
            self.env.model.disown()
            raise
        object.__setattr__(model, OWNER_ATTRIBUTE, _Owner(self.env.model.host))

    # ------------------------------------------------------------ what the user reads

    @property
    def model(self) -> MorphogeneticModel:
        """The lifecycle's view of the grown model (slots by id, reports). The user's
        module is the grown model itself: it holds the slots (``model.esper_slots``) and
        runs them, so use it as before."""
        return self.env.model

    @property
    def module(self) -> nn.Module:
        """The user's own module; it holds the slots and calling it runs them (hooks)."""
        host = self.env.model.host
        assert isinstance(host, ModuleHost)
        return host.module

    @property
    def observation(self) -> Observation:
        return self.env.observation

    @property
    def epoch(self) -> int:
        return self.env.epoch

    @property
    def decision(self) -> GrowthDecision:
        """The policy's decision for the epoch under way, with its reason and what the host
        does (``WIDEN host x2``, ``FOLD host widening``: :mod:`esper_core.env.decision`);
        ``DONE`` once ``max_epochs`` are done. (The :class:`StepResult` that ``end_epoch``
        returns carries the reason of the epoch it ended.)"""
        said = self.env.open_decision or finished(self.env)
        return GrowthDecision(self.env.epoch, said.action, said.reason)

    @property
    def action(self) -> str:
        """The decision's action in words (e.g. ``GERMINATE layer2 cnn/conv_small
        linear_add tempo=5``, ``WIDEN host x2``; ``DONE`` once ``max_epochs`` are done)."""
        return self.decision.action

    def reports(self) -> list[SlotReport]:
        """Each slot's stage, blueprint, alpha, contribution and parameter count."""
        return self.env.model.reports()

    def attach_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer that holds the seeds' parameters from now on."""
        self._check_open("attach_optimizer")
        check_optimizer(optimizer, "attach_optimizer")
        self.env.loop_trainer.attach(optimizer)

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        return self.env.loop_trainer.optimizer

    # ------------------------------------------------------------ the epoch

    def _open_epoch(self, action: Any) -> None:
        self.env.apply_action(action)
        self.env.begin_epoch()

    def end_epoch(self, val_data: Iterable[Any]) -> StepResult:
        """After the user's epoch: validate with counterfactuals on ``val_data`` (batches
        of ``(inputs, targets)``), run the lifecycle, and apply the policy's next action
        (:attr:`decision`). The result is the epoch just ended: its events, its action's
        ``reason``, the reward."""
        self._check_open("end_epoch")
        if self.env.epoch >= self.env.max_epochs:
            raise GrowerError(
                f"the grower's {self.env.max_epochs} epochs are done; "
                "create it with a larger max_epochs"
            )
        if self.optimizer is None:
            raise GrowerError(
                "the grower has no optimizer for seed parameters; pass optimizer= "
                "or call grower.attach_optimizer(opt) before end_epoch()"
            )
        self.env.use_validation(val_data)
        result = self.env.end_epoch()
        self.policy.observe([result])
        if not result.done:
            self._open_epoch(self.policy.act([self.env.observation])[0])
        return result

    # ------------------------------------------------------------ checkpoints

    def state_dict(self, include_optimizer: bool = True) -> dict[str, Any]:
        """Everything an exact resume needs: the model (user's weights and seeds), the
        env's counters, governor and open step, the policy and (unless the optimizer's
        owner saves it, as Lightning does) the optimizer's state."""
        state: dict[str, Any] = {
            "format": STATE_FORMAT,
            "env": self.env.state_dict(),
            "step": self.env.step_state(),
            "policy": self.policy.state_dict(),
            CONFIG_KEY: self._growth_config,
        }
        if include_optimizer and self.optimizer is not None:
            state["optimizer"] = self.optimizer.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; the optimizer (if saved) after its seed groups exist.

        A state that does not fit (another model's, truncated, forged) raises
        :class:`~esper_core.errors.CheckpointError` in one line and leaves the grower,
        its model and its optimizer as they were."""
        self._check_open("load_state_dict")
        check_state(state, self.env.max_epochs)
        check_growth_config(state, self._growth_config)
        # Loading is not atomic (the model, then the optimizer, then the policy): a copy
        # of what is there now is put back if any part refuses the state.
        before = copy.deepcopy(self.state_dict())
        try:
            self._load(state)
        except (
            RuntimeError, KeyError, ValueError, TypeError, IndexError, AttributeError, ConfigError
        ) as exc:  # fmt: skip
            # What torch, the optimizer and the structuring of plain data raise for a
            # state of another shape; the grower's own one-line errors pass through below.
            self._load(before)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CheckpointError(
                f"the grower state does not fit this grower ({type(exc).__name__}: {first}); "
                "load a state saved by a Grower of the same model, slots and policy. "
                "The grower is unchanged"
            ) from None
        except BaseException:
            self._load(before)
            raise

    def _load(self, state: Mapping[str, Any]) -> None:
        self.env.load_state_dict(dict(state["env"]))
        self.env.load_step_state(state["step"])
        self.policy.load_state_dict(state["policy"])
        if "optimizer" in state and self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.env.open_action is None and self.env.epoch < self.env.max_epochs:
            # Saved after its last planned epoch, loaded by a grower that plans more (a
            # Lightning run extended past its max_epochs): growth goes on from here.
            self.env.apply_action(self.policy.act([self.env.observation])[0])
        self.env.begin_epoch()

    def close(self) -> str:
        """Remove the hooks and the slots: the user's module is its own again (its class's
        ``state_dict`` keys) and computes what it did without the seeds. A width growth
        still ramping (mask below 1) is pruned: its new channels go, the user's layers are
        as they were before it and the optimizer drops its parameters; one that reached
        mask 1 was folded into the user's layers and stays. Returns what became of the
        growth in flight ("pruned", "folded" or "" for none). The grower is done; its
        model (``grower.model``) still holds the grown seeds."""
        host = self.env.model.host
        assert isinstance(host, ModuleHost)
        ended = "" if self._closed else _end_growth(self.env)
        host.unroute()
        self.env.model.disown()
        self._closed = True
        if getattr(host.module, OWNER_ATTRIBUTE, None) is not None:
            object.__delattr__(host.module, OWNER_ATTRIBUTE)
        return ended

    def _check_open(self, method: str) -> None:
        if self._closed:
            raise GrowerError(
                f"{method}() after close(): this grower removed its hooks and is done; "
                "create a new Grower to grow the model further"
            )


def _end_growth(env: LoopEnv) -> str:
    """End the host growth in flight for :meth:`Grower.close`: folded if its ramp is done
    (mask 1), else pruned, the user's optimizer following either way."""
    growth = env.model.host_growth
    if growth is None:
        return ""
    if growth.stage == Stage.HOLDING:
        host_growth.host_changed(env, growth.fossilize())
        return "folded"
    host_growth.prune(env)
    return "pruned"


class _Owner:
    """The mark a Grower leaves on the user's module: a weak reference to its host, so it
    keeps nothing alive. A copy or a pickle of the module carries an empty mark (the
    copy is not grown by anyone), so ``torch.save(model)`` and ``deepcopy`` still work."""

    def __init__(self, host: nn.Module | None = None) -> None:
        self._host = None if host is None else weakref.ref(host)

    def grows(self) -> bool:
        host = None if self._host is None else self._host()
        return isinstance(host, ModuleHost) and host.routed

    def __reduce__(self) -> tuple[type[_Owner], tuple[()]]:
        return (_Owner, ())
