"""The seed lifecycle (DOMAIN §2).

* ``rules``: every stage set, the cooldown table and the legality predicates;
* ``stages``: stages, legal transitions and the quality gates;
* ``slot_state``, ``slot``: a slot's plain values and the SeedSlot module;
* ``alpha``: alpha curves, schedules and blends; ``model``: the host with its slots;
* ``actions``: the action space and its masks; ``governor``: the safety rollback;
* ``blueprint_check``: the checks of every seed module a blueprint builds;
* ``views``: values copied by field name (settings from the config, reports from state);
* ``host_growth``: the ramp and stages every growth of the host itself shares, with
  ``module_swap`` (masked modules put in place and folded), ``width_parts`` and
  ``width_fold`` (what every width operator's modules share); the operators themselves
  come from a plugin (``plugins/esper-operators``).
"""
