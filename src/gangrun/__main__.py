"""`python -m gangrun`: the same as the `gangrun` command."""

import sys

from gangrun.cli import main

sys.exit(main())
