import sys

from zoo.run import main

sys.exit(main())
