"""TF's string constants of tf.contrib.cudnn_rnn; they are the accepted spellings everywhere."""

CUDNN_LSTM = "lstm"
CUDNN_GRU = "gru"
CUDNN_RNN_TANH = "rnn_tanh"
CUDNN_RNN_RELU = "rnn_relu"
CUDNN_RNN_UNIDIRECTION = "unidirectional"
CUDNN_RNN_BIDIRECTION = "bidirectional"
CUDNN_INPUT_LINEAR_MODE = "linear_input"
CUDNN_INPUT_SKIP_MODE = "skip_input"
CUDNN_INPUT_AUTO_MODE = "auto_select"

MODES = (CUDNN_LSTM, CUDNN_GRU, CUDNN_RNN_TANH, CUDNN_RNN_RELU)
DIRECTIONS = (CUDNN_RNN_UNIDIRECTION, CUDNN_RNN_BIDIRECTION)
INPUT_MODES = (CUDNN_INPUT_LINEAR_MODE, CUDNN_INPUT_SKIP_MODE, CUDNN_INPUT_AUTO_MODE)
