"""Shared test fixtures and set-up (no test module imports another test module)."""
