"""Host networks of the Esper tasks (import torch; load them lazily from plugin modules)."""
