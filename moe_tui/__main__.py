"""`python -m moe_tui` is the `moe-tui` command."""

import sys

from moe_tui.cli import main

sys.exit(main())
