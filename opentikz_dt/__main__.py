"""`python -m opentikz_dt` is `dtgen`."""

from .cli import main

if __name__ == "__main__":
    main()
