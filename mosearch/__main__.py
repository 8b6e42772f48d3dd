"""`python -m mosearch ...`: the `mosearch` command, from the tree it is imported from."""

import sys

from mosearch.cli import main

sys.exit(main())
