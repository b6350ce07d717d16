"""``python -m shapeviz``: see ``shapeviz.cli``."""
import sys

from shapeviz.allocator import arrow_pool_from_malloc

arrow_pool_from_malloc()   # before the commands import pyarrow: Arrow reads its pool choice once

from shapeviz.cli import main  # noqa: E402

sys.exit(main())
