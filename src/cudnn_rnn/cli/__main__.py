"""``python -m cudnn_rnn.cli``: the ``cudnn-rnn`` command (importing this module runs nothing)."""

from cudnn_rnn.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
