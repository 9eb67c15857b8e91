"""gangrun: preemption-tolerant multi-node training gangs."""

from gangrun._context import Context, context
from gangrun.checkpoint import Checkpoint

__all__ = ["Checkpoint", "Context", "context"]
