"""Where ``AsyncHttpBackend`` used to live; it is now in ``ors_gym.backends.http``."""

from ors_gym.backends.http import AsyncHttpBackend, PooledClient, ShardedTransport, pooled_client

__all__ = ["AsyncHttpBackend", "PooledClient", "ShardedTransport", "pooled_client"]
