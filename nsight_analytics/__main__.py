"""`python -m nsight_analytics`: the `nsa` command, for environments without the console script."""

from .cli import main

if __name__ == "__main__":
    main(prog_name="nsa")
