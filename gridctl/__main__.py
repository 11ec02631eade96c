"""Allow ``python -m gridctl``."""

import sys

from gridctl.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
