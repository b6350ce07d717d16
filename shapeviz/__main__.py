"""``python -m shapeviz``: see ``shapeviz.cli``."""
import sys

from shapeviz.cli import main

sys.exit(main())
