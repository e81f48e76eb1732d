"""`python -m gpulens` runs the command line."""

from gpulens.present.entry import main

if __name__ == "__main__":
    main()
