"""``python -m ipscheduler``."""

import sys

from ipscheduler.cmd.cli import main

sys.exit(main())
