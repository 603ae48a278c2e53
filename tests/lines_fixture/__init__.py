"""A throwaway migration line for the tests: ``one/`` holds version 1, ``two/`` versions 1 and 2.

``gap/`` holds a version 2 without a version 1, which a line refuses.

The statements are the same on SQLite and PostgreSQL, so one folder serves
both engines. Neither file may run twice (no ``IF NOT EXISTS``): a line that
ran a file again would fail.
"""
