"""``python -m ipscheduler``."""

import sys

from ipscheduler.cli import main

sys.exit(main())
