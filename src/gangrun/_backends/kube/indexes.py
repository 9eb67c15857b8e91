"""The informer indexes the controller reads through, so a sync costs O(its own objects).

    BY_TASK     JobSets, pods       (namespace, task label)  -> the task's JobSets / pods
    BY_UID      JobSets             metadata.uid             -> the JobSet a Workload names
    BY_JOB_UID  Workloads           Kueue's job-uid label    -> the Workloads of one JobSet
    BY_NODE     pods                spec.nodeName            -> the workers on a node, whose tasks a
                                                                node about to go concerns
    ELASTIC     ClusteredTasks      True                     -> the tasks with elastic gangs, which a
                                                                change of quota may resize

An object without the label or UID is filed under nothing; it can then only be found by a scan,
which no reconcile does.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from gangrun._backends.kube import adapter, crd, fields
from gangrun._backends.kube.informer import IndexFunc, key_of
from gangrun._backends.kube.nodes import node_name
from gangrun._backends.kube.stored import spec_or_none

BY_TASK = "task"
BY_UID = "uid"
BY_JOB_UID = "job-uid"
ELASTIC = "elastic"
BY_NODE = "node"


def task_of(obj: dict[str, Any]) -> list[Hashable]:
    task = fields.labels(obj).get(crd.TASK_LABEL)
    return [(key_of(obj)[0], task)] if task else []


def uid_of(obj: dict[str, Any]) -> list[Hashable]:
    uid = adapter.uid(obj)
    return [uid] if uid else []


def job_uid_of(obj: dict[str, Any]) -> list[Hashable]:
    uid = adapter.workload_job_uid(obj)
    return [uid] if uid else []


def node_of(pod: dict[str, Any]) -> list[Hashable]:
    node = node_name(pod)
    return [node] if node else []


def elastic(task: dict[str, Any]) -> list[Hashable]:
    """Filed under True when its spec asks for an elastic gang (minNodes below nodes): parsed once as
    the task changes, not for every task at every change of quota."""
    spec = spec_or_none(task)
    return [True] if spec is not None and spec.elastic else []


TASK_INDEXERS: dict[str, IndexFunc] = {ELASTIC: elastic}
JOBSET_INDEXERS: dict[str, IndexFunc] = {BY_TASK: task_of, BY_UID: uid_of}
POD_INDEXERS: dict[str, IndexFunc] = {BY_TASK: task_of, BY_NODE: node_of}
WORKLOAD_INDEXERS: dict[str, IndexFunc] = {BY_JOB_UID: job_uid_of}
