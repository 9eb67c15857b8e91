"""gangrun: preemption-tolerant multi-node training gangs."""
