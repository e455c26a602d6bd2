"""EsperGrowth: a :class:`esper_core.Grower` driven by Lightning's callback hooks.

The user's ``LightningModule`` is the host: slots sit on its named submodules' outputs
(forward hooks, so its own ``training_step`` runs them). After each epoch's validation
the callback measures counterfactuals on the validation batches, and the policy's next
action is applied and logged with its reason (``callback.grower.decision``); a new seed's parameters join the trainer's optimizer (the host's
parameter groups of their kind, so the trainer's schedulers move them too, see
:mod:`esper_core.grow.loop_trainer`) and leave it when the seed is pruned.

The module owns the seeds (``pl_module.esper_slots``). Checkpoints are Lightning's: the
callback state holds the grower's (slots, lifecycle counters, governor, policy, the order
the seeds joined the optimizer) and Lightning saves the optimizer itself; the seeds are
left out of the checkpoint's ``state_dict`` (see :meth:`EsperGrowth.on_save_checkpoint`). On resume the callback rebuilds the seeds and their parameter groups
in ``on_fit_start``, which runs after the optimizers exist and before Lightning loads
their state, the same moment ``BaseFinetuning`` restores its groups. A checkpoint saved
after the module's own layers grew resumes too: their entries are set aside by parameter
name before Lightning's strict load and put back once the growths are replayed
(:mod:`esper_lightning.grown_layers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info

from esper_core.errors import CheckpointError, GrowerError
from esper_core.grow.grower import Grower
from esper_core.grow.module_host import SLOTS_ATTRIBUTE
from esper_lightning.grown_layers import put_back, set_aside

# When ``Trainer(max_epochs=-1)`` (or None) sets no length, the grower plans for this many.
UNBOUNDED_EPOCHS = 1000


class EsperGrowth(Callback):
    """Grow seeds at ``slots`` (names of the ``LightningModule``'s submodules, as
    ``named_modules()`` gives them) while ``Trainer.fit`` trains it.

    ``example_input``: one batch of inputs (``LightningModule.example_input_array``
    otherwise). ``val_dataloader``: the batches of ``(inputs, targets)`` the counterfactuals
    are measured on (the trainer's validation loader otherwise). ``optimizer_index``: which
    of the trainer's optimizers holds the seeds. Other keyword arguments go to
    :class:`esper_core.Grower` (``seed_group``, ``overrides``, ``seed``, ``plugins``, ...).
    """

    def __init__(
        self,
        slots: Sequence[str],
        *,
        policy: str = "heuristic",
        example_input: torch.Tensor | None = None,
        val_dataloader: Iterable[Any] | None = None,
        optimizer_index: int = 0,
        **grower_options: Any,
    ) -> None:
        self.slots = list(slots)
        self.policy = policy
        self.example_input = example_input
        self.val_dataloader = val_dataloader
        self.optimizer_index = optimizer_index
        self.grower_options = grower_options
        self.grower: Grower | None = None
        self._saved: dict[str, Any] | None = None
        # A resumed checkpoint's entries of the module's grown layers, by parameter name
        # (grown_layers.set_aside), until the growths are replayed on the module.
        self._grown_layers: dict[str, torch.Tensor] = {}
        self._grown_epoch = -1

    @property
    def state_key(self) -> str:
        return self._generate_state_key(slots=self.slots)

    # ------------------------------------------------------------ fit

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # Lightning loads a resumed checkpoint's state_dict into the module strictly, as it
        # was built, before any callback hook: after this callback grew the module's own
        # layers, that state_dict has wider tensors and the widening's own. The module's
        # on_load_checkpoint is the one hook that sees the checkpoint first: wrapped on
        # this instance until on_fit_start, it sets those entries aside by name.
        if stage != "fit":
            return
        own = pl_module.on_load_checkpoint

        def set_aside_grown_layers(checkpoint: dict[str, Any]) -> None:
            self._set_aside_grown_layers(checkpoint, pl_module)
            own(checkpoint)

        pl_module.on_load_checkpoint = set_aside_grown_layers  # type: ignore[method-assign]

    def _set_aside_grown_layers(
        self, checkpoint: dict[str, Any], pl_module: pl.LightningModule
    ) -> None:
        saved = checkpoint.get("callbacks", {}).get(self.state_key, {}).get("grower")
        env = saved.get("env") if isinstance(saved, dict) else None
        # (A forged grower state is refused in one line by Grower.load_state_dict.)
        if not isinstance(env, dict) or not env.get("growths"):
            return
        state = checkpoint.get("state_dict")
        if not isinstance(state, dict):
            return
        self._grown_layers = set_aside(state, pl_module.state_dict())

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pl_module.__dict__.pop("on_load_checkpoint", None)  # setup's wrapper: done with
        example = self.example_input
        if example is None:
            example = pl_module.example_input_array  # type: ignore[assignment]
        if not isinstance(example, torch.Tensor):
            raise GrowerError(
                "EsperGrowth needs one batch of inputs: pass EsperGrowth(example_input=x) "
                "or set example_input_array on the LightningModule"
            )
        if len(trainer.optimizers) <= self.optimizer_index:
            raise GrowerError(
                f"EsperGrowth(optimizer_index={self.optimizer_index}): the trainer has "
                f"{len(trainer.optimizers)} optimizer(s); name one configure_optimizers returns"
            )
        options = dict(self.grower_options)
        if "max_epochs" not in options:  # the planned length: the trainer's, unless given
            epochs = trainer.max_epochs
            options["max_epochs"] = epochs if epochs and epochs > 0 else UNBOUNDED_EPOCHS
        self.grower = Grower(
            pl_module,
            self.slots,
            example_input=example.to(pl_module.device),
            policy=self.policy,
            optimizer=trainer.optimizers[self.optimizer_index],
            **options,
        )
        if self._saved is not None:
            # Seeds and their parameter groups now; Lightning loads the optimizer's state next.
            self.grower.load_state_dict(self._saved)
            self._saved = None
        if self._grown_layers:
            put_back(pl_module, self._grown_layers)
            self._grown_layers = {}

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The epoch's last validation; a checkpoint saved in this hook (ModelCheckpoint
        # runs after every other callback) then holds the grown state.
        if not trainer.sanity_checking and trainer.is_last_batch:
            self._grow(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._grow(trainer)  # an epoch without validation at its end

    def _grow(self, trainer: pl.Trainer) -> None:
        if self.grower is None or self._grown_epoch == trainer.current_epoch:
            return
        self._grown_epoch = trainer.current_epoch
        self.grower.end_epoch(self._validation(trainer))
        if self.grower.decision is not None:
            # Lightning's own log (rank 0): what the policy does next, and why.
            rank_zero_info(f"EsperGrowth {self.grower.decision}")

    def _validation(self, trainer: pl.Trainer) -> Iterable[Any]:
        if self.val_dataloader is not None:
            return self.val_dataloader
        loaders = trainer.val_dataloaders
        if isinstance(loaders, list | tuple):
            loaders = loaders[0] if loaders else None
        if loaders is None:
            raise GrowerError(
                "EsperGrowth measures seeds on validation batches: give the trainer a "
                "val_dataloader or pass EsperGrowth(val_dataloader=...)"
            )
        return loaders  # type: ignore[no-any-return]

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        if self.grower is None:
            return {} if self._saved is None else {"grower": self._saved}
        return {
            "grower": self.grower.state_dict(include_optimizer=False),
            "grown_epoch": self._grown_epoch,
        }

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # The module holds the seeds (``esper_slots``), but Lightning loads a checkpoint's
        # state_dict into the module strictly before on_fit_start builds the grower and
        # its slots, so seed keys there would break every resume. The seeds travel in
        # this callback's state (the grower's), which rebuilds them on resume.
        state = checkpoint.get("state_dict")
        if isinstance(state, dict):
            for key in [k for k in state if k.startswith(SLOTS_ATTRIBUTE + ".")]:
                del state[key]

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Lightning hands a callback only the state saved under its own key (which names
        # the slots) and drops the rest in silence: a checkpoint grown at other slots
        # would resume with none of its seeds.
        prefix = type(self).__qualname__ + "{"
        saved = [k for k in checkpoint.get("callbacks", {}) if str(k).startswith(prefix)]
        if saved and self.state_key not in saved:
            raise CheckpointError(
                f"this checkpoint was grown by {', '.join(map(str, saved))}, not by "
                f"{self.state_key}; create EsperGrowth with the slots it was saved with "
                "to resume it"
            )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        grown = state_dict.get("grown_epoch", -1)
        # A checkpoint is a file anyone can hand over: int("x") would be a raw traceback,
        # and int(2.7) or True a silently different epoch.
        if isinstance(grown, bool) or not isinstance(grown, int) or grown < -1:
            raise CheckpointError(
                f"this checkpoint's EsperGrowth state has grown_epoch = {grown!r:.40}, "
                "but a run saves a whole number >= -1; the file was edited or damaged: "
                "resume from an intact checkpoint"
            )
        self._saved = state_dict.get("grower")
        self._grown_epoch = grown
