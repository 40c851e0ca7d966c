"""Keras files, read as data without Keras or TensorFlow: Keras 2 / tf.keras ``.h5`` files
(:mod:`~cudnn_rnn.io.keras.h5`, read in a child process, :mod:`~cudnn_rnn.io.keras.h5_child`)
and Keras 3 ``.keras`` archives (:mod:`~cudnn_rnn.io.keras.keras3`); what a layer's settings
compute, its mode and variant, is :mod:`~cudnn_rnn.io.keras.variants`. This package imports
nothing: import the module you need."""
