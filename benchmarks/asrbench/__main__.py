import sys

from benchmarks.asrbench.cli import main

sys.exit(main())
