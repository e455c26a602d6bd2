"""Tamiyo policies that do not learn: ``heuristic``, ``random`` and ``wait``.

Each policy lives in its own module, which is also its plugin entry point
(``policies.heuristic = esper_tamiyo_heuristic.heuristic`` ...). The modules import
torch only when a policy first acts, so ``esper plugins`` stays fast.
"""
