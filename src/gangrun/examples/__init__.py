"""Runnable examples that ship with gangrun, so any image with gangrun installed can run them.

    python -m gangrun.examples.train     # a small data-parallel training loop that resumes (no dependencies)
"""
