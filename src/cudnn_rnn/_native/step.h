/* One step of one unidirectional layer of a cuDNN mode (a cell's step): the engine's entry
 * points for it, shared by engine.c and the step's autograd node (step_node.cpp), which are
 * compiled apart (C and C++).
 *
 * cr_step_forward and cr_step_backward make the calls the general path makes for a sequence
 * of one step (cr_forward; cr_backward, then the weight gradients' cr_gemm products in the
 * order engines/common.py makes them), on the same operands, so the same bits. Every array is
 * float32 and C-contiguous. */
#ifndef CUDNN_RNN_STEP_H
#define CUDNN_RNN_STEP_H

#include <stdint.h>

/* The engine's ABI version (cr_abi_version), here so that the step node, compiled apart, is
 * compiled with the same number: cudnn_rnn loads neither a library nor a node of another. */
#define CR_ABI_VERSION 20

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t mode, batch, units, input_size, threads;
    /* The layer's weights in its buffer: W [G*H, I], R [G*H, H], bW and bR [G*H]. */
    const float *w_ih, *w_hh, *b_ih, *b_hh;
    /* x [B, I]; the states [B, H] (c0: the LSTM's, NULL otherwise). */
    const float *x, *h0, *c0;
    /* The forward's outputs [B, H] (c1: the LSTM's); read by the backward (h1). */
    float *h1, *c1;
    /* What the backward reads, written by a forward that keeps it (NULL gates: it keeps
     * nothing): the gates [B, G*H] and the LSTM's cell state or the GRU's ghn [B, H] (NULL for
     * the RNN modes). */
    float *gates, *extra;
    /* The backward's: the incoming gradients (dc1 NULL: zero) and the outputs; dx, the
     * weights' pair and the biases' pair each NULL where not asked for (dh0 always). */
    const float *dh1, *dc1;
    float *dx, *dh0, *dc0, *dw_ih, *dw_hh, *db_ih, *db_hh;
} cr_step_args;

/* Each returns 0, 1 when memory ran out, 2 on bad sizes or a missing pointer. */
int cr_step_forward(const cr_step_args *a);
int cr_step_backward(const cr_step_args *a);

#ifdef __cplusplus
}
#endif

#endif
