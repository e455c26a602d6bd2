"""Esper blueprints: seed modules for CNN and transformer hosts.

``esper_blueprints.cnn`` and ``esper_blueprints.transformer`` are Esper plugins
(entry points ``blueprints.cnn`` and ``blueprints.transformer``). The modules they
build live in ``cnn_modules`` and ``transformer_modules``, imported only when a
blueprint is built, so discovering the plugins does not import torch.
"""

__version__ = "0.1.0"
