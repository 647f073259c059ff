import sys

from brrr.grading.gradebook import main

sys.exit(main())
