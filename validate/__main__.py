import sys

from zoo.cli.validate import main

sys.exit(main())
