"""Helpers shared by the studies' figures and markdown reports."""
