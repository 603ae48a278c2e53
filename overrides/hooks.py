"""MkDocs build hook (mkdocs.yml `hooks:`): no repository, no repository buttons.

`repo_url` comes from the environment (REPO_URL, set by the Pages workflow).
Without it MkDocs would still join `edit_uri` onto nothing and give every page
a relative, broken "edit" link (and warn, which fails the strict build), so
the build drops `edit_uri` and the pages get neither an edit nor a view button.
"""

from __future__ import annotations

from typing import Any


def on_config(config: Any) -> Any:
    if not config.get("repo_url"):
        config["edit_uri"] = None
    return config
