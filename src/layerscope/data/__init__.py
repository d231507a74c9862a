"""Datasets: statement pairs (bundled and user files), with validation."""

from .pairs import Category, PairDataset, bundled_pairs_path, load_pairs

__all__ = ["Category", "PairDataset", "bundled_pairs_path", "load_pairs"]
