"""Growth in the user's own model and loop: a host from any ``nn.Module``
(:func:`~esper_core.grow.module_host.host_from_module`) and the :class:`~esper_core.grow.grower.Grower`."""
