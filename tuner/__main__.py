"""`python -m tuner`: the same as the `tuner` command."""
import sys

from .cli import main

sys.exit(main())
