import sys

from syncfree.cli import main

sys.exit(main())
