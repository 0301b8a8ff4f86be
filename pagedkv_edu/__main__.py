"""``python -m pagedkv_edu``: the book's command line."""

from .cli import main

raise SystemExit(main())
