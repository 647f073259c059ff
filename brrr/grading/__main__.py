import sys

from brrr.grading.commands import main

sys.exit(main(sys.argv[1:]))
