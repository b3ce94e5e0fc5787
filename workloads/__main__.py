"""``python -m workloads`` is the same as the ``workloads`` console script."""

import sys

from workloads.cli import main

sys.exit(main())
