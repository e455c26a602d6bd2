"""Esper tasks: ``digits`` (default, no download), ``cifar10`` and ``charlm``.

Each task module is an Esper plugin (entry points ``tasks.digits``, ``tasks.cifar10``,
``tasks.charlm``). Heavy libraries (torch, torchvision, scikit-learn, numpy) are
imported inside methods, so discovering the plugins stays fast.
"""

__version__ = "0.1.0"
