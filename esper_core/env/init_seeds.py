"""The init seed of every module an episode grows, from the env's seed: below the env's
helpers (birth, apply, host growth), each of which draws from it."""


def init_seed(env_seed: int, germination: int) -> int:
    """The init seed of the ``germination``-th seed (from 1) of an episode seeded ``env_seed``."""
    return env_seed * 1_000_003 + germination
