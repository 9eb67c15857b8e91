"""Benchmarks of gangrun, each a program: ``python -m benchmarks.bench_x`` from the repository's root (``./dev bench``
runs every ``bench_*``).

Imports go one way: a benchmark may import the tests' harness (``tests.harness``: the control plane, the real
node, the task builders), which is a library; no test imports a benchmark (a test that runs one starts it as a
program). What benchmarks share is in ``_lib`` (the repository's root, the load average, the real node's
prerequisites) and ``_goodput`` (the storm both goodput tiers play).
"""
