import sys

from asyncrl.cli import main

sys.exit(main())
