import sys

from glmflash.cli import main

sys.exit(main())
