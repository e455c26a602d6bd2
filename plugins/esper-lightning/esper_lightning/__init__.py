"""Esper inside ``Trainer.fit``: the :class:`~esper_lightning.callback.EsperGrowth` callback."""

from esper_lightning.callback import EsperGrowth

__all__ = ["EsperGrowth"]
