"""What the tests (and the benchmarks) build on: a library, not tests.

Shared builders and fakes: ``builders`` (gangs, workloads and times for the pure core), ``kube_builders`` (the
Kubernetes objects), ``kube_fake`` (a `KubeApi` in memory) and ``kube_http`` (that fake behind a real HTTP
server), ``view_shape`` (a view held to its TypedDict), ``optional_extra`` (pytest as on a machine without an
extra).

The end-to-end cluster: ``binaries`` (the control plane's cached build), ``pki`` (its certificates),
``processes`` (each component in its own process group), ``client`` (the test client, on gangrun's own),
``kwok`` (the fake kubelets' stages), ``addons`` (JobSet and Kueue: configurations, webhooks, queues),
``controlplane`` (``ControlPlane``, tiers A to C), ``tasks`` (ClusteredTasks on it), ``realnode`` (a real node:
containerd, the kubelet, CoreDNS), ``incluster`` (the controller deployed from the image), ``realnode_tasks``
(tasks on the real node), ``faults`` (its parts crashed and restarted mid-run), ``cluster`` (``./dev cluster``:
``python -m tests.harness.cluster up|down|status``).

The controller benchmark's parts that tests check: ``controller_probe`` (the controller with timers, run as
``python -m tests.harness.controller_probe``) and ``controller_timeline`` (what the benchmark reads from a storm).
"""
