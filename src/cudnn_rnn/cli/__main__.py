"""``python -m cudnn_rnn.cli``: the ``cudnn-rnn`` command."""

from cudnn_rnn.cli import main

raise SystemExit(main())
