"""Tamiyo policies that do not learn: ``heuristic``, ``random``, ``wait`` and ``static``.

Each policy lives in its own module, which is also its plugin entry point
(``policies.heuristic = esper_tamiyo_heuristic.heuristic`` ...). The modules import
torch only when a policy first acts, so ``esper plugins`` stays fast. The heuristic's
options live in ``options`` and the numbers it decides on in ``signals``.
"""
