import sys

from trainlens.cli import main

sys.exit(main())
