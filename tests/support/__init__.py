"""What the tests share: helpers, the cuDNN stand-in, hostile files, the fuzz worker, paths."""
