"""The few comparisons export verification and the metrics share."""

from __future__ import annotations

import numpy as np


def as_float(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def max_abs_diff(reference: np.ndarray, candidate: np.ndarray) -> float:
    if reference.size == 0:
        return 0.0
    return float(np.max(np.abs(as_float(reference) - as_float(candidate))))


def mean_abs_diff(reference: np.ndarray, candidate: np.ndarray) -> float:
    if reference.size == 0:
        return 0.0
    return float(np.mean(np.abs(as_float(reference) - as_float(candidate))))


def cosine_per_sample(reference: np.ndarray, candidate: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Cosine similarity of each sample (axis 0) flattened; two all-zero samples count as identical."""
    ref = as_float(reference).reshape(reference.shape[0] if reference.ndim else 1, -1)
    cand = as_float(candidate).reshape(ref.shape)
    dot = np.sum(ref * cand, axis=1)
    norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(cand, axis=1)
    both_zero = (np.linalg.norm(ref, axis=1) < eps) & (np.linalg.norm(cand, axis=1) < eps)
    return np.where(both_zero, 1.0, dot / np.maximum(norms, eps))


def is_floating(a: np.ndarray) -> bool:
    return np.issubdtype(np.asarray(a).dtype, np.floating)
