"""Verdicts tested where the answer is known: plants, nulls and the validation card."""
