"""Esper PPO Tamiyo: a factored, masked actor-critic trained with PPO.

The ``policies.ppo`` component is :class:`esper_tamiyo_ppo.plugin.PPO`, a torch-free front
for :class:`esper_tamiyo_ppo.policy.PPOPolicy` (acting, rollout, checkpoints); the update
is ``learner`` (one function, top to bottom), built on ``network`` (actor-critic),
``distributions`` (masked factored heads), ``buffer`` (rollout storage), ``gae`` and
``normalizers``. Importing this package does not import torch.
"""

__version__ = "0.1.0"
