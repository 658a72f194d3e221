"""Node positions for the pictures, computed here so that a browser only draws.

The entity graph: a force layout (springs along edges, repulsion between nodes) started
from the entities' embeddings projected on their two main axes, so that entities that
mean alike start, and mostly stay, together. Repulsion is exact for small graphs and
approximated on a grid for large ones, so 10,000 entities take about a second. Every step
is seeded and in float64; positions are rounded, so the same build gives the same bytes.

Small diagrams (a query's subgraph, a plan) are laid out in columns instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

EXACT_UP_TO = 500  # nodes: exact pairwise repulsion up to here, a density grid above
ITERATIONS = 120
SEED = 16


def force_layout(count: int, edges: Sequence[tuple[int, int, float]],
                 start: np.ndarray | None = None) -> list[tuple[float, float]]:
    """Positions (x, y), in about -1000..1000, for `count` nodes joined by (source, target,
    weight) edges; `start`: a count x 2 array of starting positions (NaN rows: none)."""
    if count == 0:
        return []
    rng = np.random.default_rng(SEED)
    positions = rng.standard_normal((count, 2))
    unknown = None
    if start is not None:
        known = ~np.isnan(start).any(axis=1)
        unknown = ~known
        if known.any():
            given = start[known] - start[known].mean(axis=0)
            given /= (np.abs(given).max() or 1.0)
            positions[known] = given * 2.0 + positions[known] * 0.05
    # One spring a pair of nodes, however many relations join them (its strongest).
    pairs: dict[tuple[int, int], float] = {}
    for source, target, weight in edges:
        if source != target:
            key = (min(source, target), max(source, target))
            pairs[key] = max(pairs.get(key, 0.0), weight)
    ordered = sorted(pairs)
    sources = np.array([a for a, _ in ordered], np.int64)
    targets = np.array([b for _, b in ordered], np.int64)
    weights = np.array([pairs[key] for key in ordered], np.float64)
    if unknown is not None and unknown.any() and (~unknown).any() and len(sources):
        _place_unknown(positions, unknown, sources, targets)
    # Scale: a node takes about unit area.
    ideal = 1.0
    positions *= np.sqrt(count) / max(float(np.abs(positions).max()), 1e-9) * 0.5
    temperature = np.sqrt(count) * 0.1
    for step in range(ITERATIONS):
        force = _repulsion(positions, ideal)
        if len(sources):
            delta = positions[targets] - positions[sources]
            distance = np.sqrt((delta ** 2).sum(axis=1)) + 1e-9
            pull = (delta * (distance * weights / ideal)[:, None])
            for axis in range(2):
                force[:, axis] += np.bincount(sources, pull[:, axis], count)
                force[:, axis] -= np.bincount(targets, pull[:, axis], count)
        # gravity keeps separate components from drifting apart
        force -= positions * (0.02 * ideal)
        length = np.sqrt((force ** 2).sum(axis=1)) + 1e-9
        limit = temperature * (1.0 - step / ITERATIONS) + 0.01
        positions += force * (np.minimum(length, limit) / length)[:, None]
    positions = _pack_components(positions, sources, targets)
    # A few far outliers (loose nodes) must not squeeze the rest into a dot: scale by
    # the 98th percentile and pull what lies beyond it to the border.
    positions -= np.median(positions, axis=0)
    reach = float(np.quantile(np.abs(positions), 0.98)) if count > 50 else \
        float(np.abs(positions).max())
    positions = np.clip(positions * (900.0 / max(reach, 1e-9)), -1000.0, 1000.0)
    return [(round(float(x), 1), round(float(y), 1)) for x, y in positions]


def _components(count: int, sources: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Each node's connected component, as the smallest node index in it."""
    parent = np.arange(count)
    while True:  # label propagation: every edge pulls both ends to the smaller label
        low = np.minimum(parent[sources], parent[targets])
        before = parent.copy()
        np.minimum.at(parent, sources, low)
        np.minimum.at(parent, targets, low)
        parent = parent[parent]
        if np.array_equal(parent, before):
            return parent


def _pack_components(positions: np.ndarray, sources: np.ndarray, targets: np.ndarray
                     ) -> np.ndarray:
    """Components side by side in rows, largest first, each at the scale where its
    nodes sit about one unit from their nearest neighbour, and the nodes with no edge in
    a block of their own: the force layout alone leaves gaps between components and
    packs a small dense one too tight to read."""
    count = len(positions)
    labels = _components(count, sources, targets) if len(sources) else np.arange(count)
    groups: dict[int, list[int]] = {}
    for node, label in enumerate(labels.tolist()):
        groups.setdefault(label, []).append(node)
    if len(groups) == 1:
        return positions
    lone = [nodes[0] for nodes in groups.values() if len(nodes) == 1]
    boxes: list[tuple[np.ndarray, np.ndarray]] = []  # (nodes, their positions from 0, 0)
    for nodes in groups.values():
        if len(nodes) > 1:
            index = np.array(nodes)
            local = positions[index] - positions[index].min(axis=0)
            local *= 1.0 / max(_nearest_spacing(local), 1e-9)
            boxes.append((index, local))
    if lone:
        side = int(np.ceil(np.sqrt(len(lone))))
        grid = np.array([(i % side, i // side) for i in range(len(lone))], np.float64)
        boxes.append((np.array(lone), grid * 1.5))
    boxes.sort(key=lambda box: (-len(box[0]), int(box[0].min())))
    area = sum(float(np.prod(local.max(axis=0) + 2.0)) for _, local in boxes)
    row_width = max(np.sqrt(area) * 1.2, float(max(local[:, 0].max() for _, local in boxes)))
    out = np.zeros_like(positions)
    x = y = row_height = 0.0
    for index, local in boxes:
        width, height = local.max(axis=0) + 2.0
        if x > 0 and x + width > row_width:
            x, y, row_height = 0.0, y + row_height, 0.0
        out[index] = local + (x, y)
        x += width
        row_height = max(row_height, height)
    return out


def _nearest_spacing(local: np.ndarray) -> float:
    """The median distance from a node to its nearest neighbour (a sample of 200 nodes
    of a large component)."""
    sample = local if len(local) <= 200 else local[:: len(local) // 200 + 1]
    delta = sample[:, None, :] - local[None, :, :]
    distance = np.sqrt((delta ** 2).sum(axis=2))
    distance[distance == 0] = np.inf
    nearest = distance.min(axis=1)
    return float(np.median(nearest[np.isfinite(nearest)])) if np.isfinite(nearest).any() \
        else 1.0


def _place_unknown(positions: np.ndarray, unknown: np.ndarray, sources: np.ndarray,
                   targets: np.ndarray) -> None:
    """Nodes with no starting position (skills, skill states) start at the mean of their
    placed neighbours', a little apart."""
    count = len(positions)
    for _ in range(3):
        placed = ~unknown
        total = np.zeros((count, 2))
        seen = np.zeros(count)
        for a, b in ((sources, targets), (targets, sources)):
            mask = placed[b]
            for axis in range(2):
                total[:, axis] += np.bincount(a[mask], positions[b[mask], axis], count)
            seen += np.bincount(a[mask], minlength=count)
        now = unknown & (seen > 0)
        if not now.any():
            return
        positions[now] = total[now] / seen[now, None] + positions[now] * 0.05
        unknown &= ~now


def _repulsion(positions: np.ndarray, ideal: float) -> np.ndarray:
    count = len(positions)
    if count <= EXACT_UP_TO:
        force = np.zeros_like(positions)
        for begin in range(0, count, 512):  # (blocks: memory stays small)
            block = positions[begin:begin + 512]
            delta = block[:, None, :] - positions[None, :, :]
            squared = (delta ** 2).sum(axis=2) + 1e-6
            force[begin:begin + 512] = (delta * (ideal ** 2 / squared)[:, :, None]).sum(axis=1)
        return force
    return _grid_repulsion(positions, ideal)


def _grid_repulsion(positions: np.ndarray, ideal: float) -> np.ndarray:
    """Repulsion from the density of nodes around each one (a histogram, smoothed; nodes
    move down its gradient), and apart from the middle of the cell they share."""
    count = len(positions)
    size = int(np.clip(np.sqrt(count / 2.0), 16, 256))
    low = positions.min(axis=0)
    span = max(float((positions.max(axis=0) - low).max()), 1e-9)
    cell = span / size
    index = np.minimum(((positions - low) / cell).astype(np.int64), size - 1)
    flat = index[:, 0] * size + index[:, 1]
    density = np.bincount(flat, minlength=size * size).astype(np.float64).reshape(size, size)
    smooth = density.copy()
    for _ in range(2):  # a small blur: the gradient sees neighbouring cells
        padded = np.pad(smooth, 1, mode="edge")
        smooth = (padded[:-2, 1:-1] + padded[2:, 1:-1] + padded[1:-1, :-2]
                  + padded[1:-1, 2:] + 2.0 * padded[1:-1, 1:-1]) / 6.0
    grad_x, grad_y = np.gradient(smooth, cell)
    force = -np.stack([grad_x[index[:, 0], index[:, 1]], grad_y[index[:, 0], index[:, 1]]],
                      axis=1) * (ideal ** 2 * cell * cell)
    # within a cell: away from the cell's centre, harder the more nodes share it
    sums = np.zeros((size * size, 2))
    for axis in range(2):
        sums[:, axis] = np.bincount(flat, positions[:, axis], size * size)
    shared = density.reshape(-1)[flat]
    centre = sums[flat] / shared[:, None]
    force += (positions - centre) * (ideal * (shared - 1.0) / cell)[:, None]
    return force


def column_layout(columns: Sequence[Sequence[int]], gap_x: float = 260.0,
                  gap_y: float = 70.0, rows: bool = False) -> dict[int, tuple[float, float]]:
    """Positions for nodes in columns (left to right, each top to bottom, centred); with
    rows, the columns become rows (top to bottom, each left to right)."""
    placed: dict[int, tuple[float, float]] = {}
    for column, nodes in enumerate(columns):
        across = gap_x if rows else gap_y
        start = -(len(nodes) - 1) * across / 2.0
        for row, node in enumerate(nodes):
            along = start + row * across
            placed[node] = ((round(along, 1), round(column * gap_y, 1)) if rows
                            else (round(column * gap_x, 1), round(along, 1)))
    return placed
