"""The fused RNN as PyTorch custom operators: ``cudnn_rnn::rnn`` and ``cudnn_rnn::rnn_backward``.

Registered with ``torch.library`` (schema, fake implementation, autograd, vmap) on import of this
package, once, so that ``torch.compile``, ``torch.export`` and ``torch.func`` see one node that
takes the opaque buffer. Five modules, one idea each, each importing only those before it:

- :mod:`~cudnn_rnn.operator.implementation`: the operator's one implementation, what every
  route runs: the call the rule table of :mod:`cudnn_rnn.engines` sees, the lengths, the dropout
  masks, the empty batch, the engine's forward and backward;
- :mod:`~cudnn_rnn.operator.library`: the two operators' schemas, fake implementations and vmap
  rules, as ``torch.library`` registers them;
- :mod:`~cudnn_rnn.operator.autograd`: the backward, the double backward, and the
  differentiable call ``torch.func`` needs;
- :mod:`~cudnn_rnn.operator.routes`: the one way in. Every layer, op, cell and
  ``cudnn_rnn.nn`` module calls :func:`rnn` (the layers' zero-state calls go through
  :func:`planned_call`, which keeps the call between calls and then runs the same
  implementation, or for one unidirectional layer the native engine's argument record, filled
  once); :func:`route` is the one rule that picks how the call reaches the
  implementation (:class:`Route`); a cell's step in plain eager execution takes
  :func:`step`, the same implementation without a sequence's arguments;
- :mod:`~cudnn_rnn.operator.planned_step`: a cell's step where the rule table picks the native
  engine, planned once per buffer and batch (the engine's argument records filled once), with
  its own autograd Function over the cell's parameters: the same engine calls on the same
  numbers as :func:`step`, so the same bits, in a fraction of its time (issue 48).

Which engine runs is decided by the rule table from what is fixed before the call, never by
timing; the operator does what is the same for every engine and calls the chosen one without
knowing which it is.
"""

# Importing the routes imports the other three modules, which register the operators.
from cudnn_rnn.operator.implementation import GOLDEN
from cudnn_rnn.operator.implementation import static_of as static_of
from cudnn_rnn.operator.routes import EagerPlan, Route, planned_call, rnn, route, step

__all__ = ["GOLDEN", "EagerPlan", "Route", "planned_call", "rnn", "route", "step"]
