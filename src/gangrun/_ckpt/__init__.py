"""Checkpoint internals behind `gangrun.checkpoint` (private; the public API is `Checkpoint`).

    layout     where saves live and how their names read back (the directory drawing)
    manifest   the document written last: sizes, CRC-32s, step
    storage    byte access through fsspec (local paths get fsync and atomic rename)
    local_files  local files as checkpoints need them: private, kernel copies, checksums, fsync
    commit     the one commit path of every save (data, manifest last, then the event), and the
               protocol under it: PendingCheckpoint.finalize() is the only commit (rename or marker)
    catalog    committed saves newest first across attempts; next seq; retention after a commit
    resume     where spec.checkpoint.resumeFrom points, as saves to try newest first
    resume_point  one resume point per gang start: rank 0 chooses, every other rank loads exactly it
    rendezvous  step 1 of a sharded save: rank 0 publishes the seq, every rank derives the same folder
    shards     sharded saves: each rank writes its part, one commit makes them a checkpoint together
    polls      waiting on the store until something appears, a timeout passes or the gang stops
    transfer   what a save is made of, its snapshot, verified reads into the cache
    cache      the process's folder of restored copies and snapshots, removed on exit, reclaimed after a kill
    pool       many files on a few threads (the parallelism of a save, snapshot and load)
    writer     the background writer (a save here or in the background, retention after it) and
               the count of saves in flight
    notice     SIGTERM -> stop notice (cause, deadline, hooks), flush, exit in time
    events     the lines for the task timeline: commits, first steps, what resumeFrom gave a load
    logs       the lines a worker's user must see
"""
