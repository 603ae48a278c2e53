"""The conformance suite: what every engine must do alike (see conftest.py)."""
