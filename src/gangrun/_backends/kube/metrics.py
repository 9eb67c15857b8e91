"""The controller's health and metrics endpoints: the series and the small HTTP server are
`gangrun._backends.metrics` (on `prometheus-client`), shared with the local backend.
"""

from gangrun._backends.metrics import Metrics, serve

__all__ = ["Metrics", "serve"]
