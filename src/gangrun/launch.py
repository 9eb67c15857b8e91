"""`python -m gangrun.launch -- <command...>`: every worker pod's command (see `gangrun._worker.launch`)."""

from gangrun._worker.launch import main

if __name__ == "__main__":
    raise SystemExit(main())
