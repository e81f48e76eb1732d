"""`python -m gpulens` runs the command line."""

from gpulens.present.cli import main

main()
