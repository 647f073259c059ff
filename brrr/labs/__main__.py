import sys

from brrr.labs.generate import main

sys.exit(main())
