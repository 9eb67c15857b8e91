"""Which GPUs of one machine each admitted gang may use (the local backend's CUDA_VISIBLE_DEVICES).

On Kubernetes the device plugin gives every pod its own GPUs. On one machine nothing does, so two
admitted 4-GPU gangs on an 8-GPU box would both use GPUs 0-3. `assign` gives every gang that asks for
GPUs disjoint indices out of the quota: each of its nodes (local worker groups) gets
`resources.gpu` indices of its own, and every process of a node sees that node's GPUs (LOCAL_RANK
picks one). Gangs that already hold GPUs keep them; newcomers get the lowest free indices.

    assign(8, {"a": (2, 2), "b": (1, 4)}, held={"a": ((0, 1), (2, 3))})
        == {"a": ((0, 1), (2, 3)), "b": ((4, 5, 6, 7),)}
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

Assignment = tuple[tuple[int, ...], ...]  # per node, the GPU indices it sees


class NotEnoughGPUs(ValueError):
    """More GPUs asked for than the quota has free: admission let through what it should not have."""


def free(total: int, held: Mapping[Hashable, Assignment]) -> list[int]:
    """The indices of `total` GPUs that no assignment in `held` uses, lowest first."""
    used = {g for a in held.values() for node in a for g in node}
    return [g for g in range(total) if g not in used]


def allocate(total: int, held: Mapping[Hashable, Assignment], *, nodes: int, per_node: int) -> Assignment:
    """Lowest free indices for one gang of `nodes` × `per_node` GPUs. Raises NotEnoughGPUs."""
    if per_node <= 0:
        return tuple(() for _ in range(nodes))
    available = free(total, held)
    want = nodes * per_node
    if want > len(available):
        raise NotEnoughGPUs(f"{want} GPUs wanted, {len(available)} of {total} free")
    return tuple(tuple(available[n * per_node:(n + 1) * per_node]) for n in range(nodes))


def assign(total: int, wanted: Mapping[Hashable, tuple[int, int]],
           held: Mapping[Hashable, Assignment] | None = None) -> dict[Hashable, Assignment]:
    """Disjoint GPUs for every gang in `wanted` (gang → (nodes, GPUs per node)), in its order.

    A gang in `held` whose shape is unchanged keeps its indices; gangs not in `wanted` give theirs
    back. Raises NotEnoughGPUs when the gangs ask for more than `total`.
    """
    kept: dict[Hashable, Assignment] = {}
    for gang, (nodes, per_node) in wanted.items():
        a = (held or {}).get(gang)
        if a is not None and len(a) == nodes and all(len(node) == per_node for node in a):
            kept[gang] = a
    out: dict[Hashable, Assignment] = {}
    for gang, (nodes, per_node) in wanted.items():
        out[gang] = kept[gang] if gang in kept else allocate(total, {**kept, **out}, nodes=nodes, per_node=per_node)
    return out


def visible_devices(gpus: Sequence[int]) -> str:
    """CUDA_VISIBLE_DEVICES for one node: `"4,5"`; `""` hides every GPU."""
    return ",".join(str(g) for g in gpus)
