"""Root conftest: the docs-as-tests adaptation, and the built site's fixtures."""

pytest_plugins = ["tests.markdown_docs", "tests.site_build"]
