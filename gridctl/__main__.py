"""Allow ``python -m gridctl``."""

import sys

from gridctl.cli.main import main

sys.exit(main())
