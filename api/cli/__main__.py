"""``python -m api.cli``: the ``amber`` command."""

from api.cli import main

if __name__ == "__main__":
    main()
