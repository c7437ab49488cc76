"""`python -m durable_sidecar` runs the CLI."""

import sys

from .cli import main

sys.exit(main())
