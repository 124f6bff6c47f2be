import sys

from migslice.cli import main

sys.exit(main())
