"""What the site runs at build time: proof tables, publication rules, old queue files.

It needs only the standard library and queue_core, so `make site` builds the
site with the documentation requirements alone; the test suite imports it too.
"""
