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


def probabilities(output: np.ndarray) -> np.ndarray:
    """``[batch, classes]`` rows as probabilities: as they are when they already are (non-negative, summing
    to 1), else their softmax (logits)."""
    values = np.asarray(output, dtype=np.float64).reshape(output.shape[0], -1)
    if values.size and np.all(values >= 0) and np.allclose(values.sum(axis=1), 1.0, atol=1e-3):
        return values
    exp = np.exp(values - values.max(axis=1, keepdims=True))
    return np.asarray(exp / exp.sum(axis=1, keepdims=True))


def top1_lead(output: np.ndarray) -> np.ndarray:
    """How far each sample's top-1 probability leads its runner-up's (1 with a single class)."""
    probs = probabilities(output)
    if probs.shape[1] < 2:
        return np.ones(probs.shape[0])
    top = np.partition(probs, probs.shape[1] - 2, axis=1)[:, -2:]
    return np.asarray(top[:, 1] - top[:, 0])
