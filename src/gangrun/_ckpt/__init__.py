"""Checkpoint internals behind `gangrun.checkpoint` (private; the public API is `Checkpoint`).

    layout     where saves live and how their names read back (the directory drawing)
    manifest   the document written last: sizes, CRC-32s, step
    storage    byte access through fsspec (local paths get fsync and atomic rename)
    commit     PendingCheckpoint: finalize() is the only commit (rename or manifest marker)
    catalog    committed saves newest first across attempts; next seq; retention
    transfer   what a save is made of, its snapshot, verified reads into the cache
    pool       many files on a few threads (the parallelism of a save, snapshot and load)
    writer     the background writer and the count of saves in flight
    notice     SIGTERM -> stop notice (cause, deadline, hooks), flush, exit in time
    events     checkpoint_committed lines for the task timeline
    logs       the lines a worker's user must see
"""
