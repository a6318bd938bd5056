"""`python -m marl.cli ...`: the same as the `marl` command."""

import sys

from marl.cli.main import main

sys.exit(main())
