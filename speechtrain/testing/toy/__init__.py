"""Tiny models for tests and for users rehearsing the engine (in the package, as lhotse does)."""
