"""File formats and converters to and from the places users keep RNN weights.

Each converter lives in its own module and is imported explicitly (``from cudnn_rnn.formats
import tf1_bundle``); this package imports nothing, so a pure-NumPy format such as
:mod:`cudnn_rnn.formats.tf1_bundle` can be used where torch is not installed.
"""
