"""`python -m app.cli`: the same as the `oasr` console script."""

import sys

from app.cli.entry import main

if __name__ == "__main__":
    sys.exit(main())
