"""``python -m memwork`` runs the command line."""

from memwork.cli import main

if __name__ == "__main__":
    main()
