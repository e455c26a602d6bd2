"""Esper PPO Tamiyo: a factored, masked actor-critic trained with PPO.

The ``policies.ppo`` plugin lives in :mod:`esper_tamiyo_ppo.plugin`; the algorithm in
``network`` (actor-critic), ``distributions`` (masked factored heads), ``buffer``
(rollout storage), ``gae``, ``normalizers``, ``learner`` (the PPO update) and ``policy``
(the Policy/Trainable the runner drives). Importing this package does not import torch.
"""

__version__ = "0.1.0"
