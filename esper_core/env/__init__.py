"""The environment: one RL episode is one host training run, one step one epoch.

Modules by job, in the order a step uses them:

* ``env``: :class:`MorphogeneticEnv` (construction, the step's order) and ``run_epoch``;
* ``apply``: applying the controller's action to the model; ``decision``: the action in
  words and its reason, with what the host's own growth does at that boundary;
* ``data``, ``training``, ``amp``, ``device``: batches, THE epoch trainer, its
  precision and its device; ``optimizers`` and ``gradients``: the recipe's optimizers
  (:mod:`esper_core.recipe`) and the one gradient budget;
* ``evaluation``, ``pending``: fused counterfactual validation, read in one sync;
* ``epoch_end``: governor rollback, stage ticks, auto-advance and the reward;
* ``episode``, ``events``, ``observation``, ``step``: what the step counts, emits,
  shows the controller and returns;
* ``birth``: seeds installed as fossils before the first epoch (a fixed architecture);
* ``cost``: parameters in the forward pass and held, training FLOPs;
* ``state``: the env's checkpoint; ``gym``: the Gymnasium adapter.
"""
