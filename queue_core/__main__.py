"""``python -m queue_core`` is the same as ``queue-core``."""

import sys

from .cli import main

sys.exit(main())
