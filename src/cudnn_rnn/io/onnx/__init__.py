"""ONNX models, read and written as data: the file loaded and checked
(:mod:`~cudnn_rnn.io.onnx.file`), the values and data flow of its graphs
(:mod:`~cudnn_rnn.io.onnx.eval`), where its RNNs are (:mod:`~cudnn_rnn.io.onnx.find`), one RNN
read (:mod:`~cudnn_rnn.io.onnx.read`), and the graph of an RNN stack written
(:mod:`~cudnn_rnn.io.onnx.graph`). This package imports nothing: import the module you need."""
