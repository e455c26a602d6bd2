"""Esper reward families: ``pbrs`` (the default), ``shaped``, ``simplified``, ``sparse``, ``loss``.

Each family is its own plugin module (entry points ``rewards.<name>``); the rules they
share (the potential Φ, the shaping term, the parameter rent) live in
:mod:`esper_rewards.common`. Families are pure Python arithmetic on a
:class:`esper_core.components.reward.RewardContext`: no torch import, no state between steps.
"""

__version__ = "0.1.0"
