"""Root conftest: loads the docs-as-tests adaptation for every collected path."""

pytest_plugins = ["tests.markdown_docs"]
