"""Finished experiments: their results stay in bench/results/ (bench/README.md)."""
