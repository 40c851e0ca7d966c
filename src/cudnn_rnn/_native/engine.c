/* cudnn_rnn's native CPU engine: the time loops of one direction of one layer.
 *
 * The Python side (cudnn_rnn/engines/native.py) calls in here, through ctypes on the tensors'
 * data pointers:
 *
 *   cr_forward   the input projection gi = x @ W^T (in passes, see pass_rows; or gi given),
 *                then per step: gates = gi[t] + h @ R^T (+ bR for the GRU), the gate math, h
 *                and c; optionally keeps what cr_backward needs (the workspace, in time order)
 *   cr_backward  per step in reverse: the gradient of the gates' pre-activations (dgi) and
 *                the carried dh, dc (dh_prev = dgates @ R)
 *   cr_gemm      the backward's products over all steps: the weight gradients (dgi^T u,
 *                dgi^T h), the biases' sums and the input gradient (dgi @ W), each element one
 *                chain in increasing k, so that their bits do not follow the thread count (a
 *                vendor GEMM's split of k across threads does)
 *
 * Threads: torch's own OpenMP pool when the process has one (cr_use_openmp attaches to the GNU
 * OpenMP runtime torch loaded, so our steps run on the threads torch's GEMMs just used, and the
 * two never compete for cores), else a pthread team of our own.
 *
 * Design (DeepCPU, Zhang et al., USENIX ATC 2018): a persistent team of threads, each owning a
 * slice of the hidden units with all gates' rows of R for them, packed once per call into its
 * own buffer (so they stay in that core's cache for the whole sequence), or read in place when
 * a small batch makes the packing cost more than it saves (see in_place_r); the gate math runs
 * on the slice right after its product; one barrier per time step. The input projection's
 * column blocks are tasks any thread of the team may take (tasks_t), so a thread slowed by
 * another process does not hold up the rest there. No torch headers: only
 * pointers, sizes and strides cross the boundary (cr_*_args below, mirrored in native.py).
 *
 * The instruction set is chosen at run time (AVX-512, AVX2 + FMA, the x86-64 baseline; plain C
 * vectors elsewhere); kernel.inc holds the loops once and is compiled once per ISA, and twice
 * for AVX-512 (two shapes of micro-kernel, chosen by the batch: see isa_for).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "step.h"

#define CR_RNN_RELU 0
#define CR_RNN_TANH 1
#define CR_LSTM 2
#define CR_GRU 3
#define CR_MAX_THREADS 256
#define CR_STR2(x) #x
#define CR_STR(x) CR_STR2(x)

/* The activations of a variant (cudnn_rnn.core.variant.ACTIVATIONS, in this order). */
enum {
    CR_SIGMOID, CR_TANH, CR_RELU, CR_HARD_SIGMOID, CR_AFFINE, CR_LEAKY_RELU, CR_THRESHOLDED_RELU,
    CR_SCALED_TANH, CR_ELU, CR_SOFTSIGN, CR_SOFTPLUS, CR_SELU, CR_EXPONENTIAL, CR_SILU, CR_ACTS
};

/* A variant's math (ABI 18; NULL in the arguments: cuDNN's own, the mode's loops unchanged).
 * act: the gates' (f), the candidate's or plain RNN's (g) and the LSTM output's (h) activation,
 * each with its alpha and beta; the clips are 0 for none; reset_before: the GRU's candidate is
 * g(W x + R_n (r * h) + b_Rn). With a variant the workspace keeps the gates' pre-activations
 * (before the gate clip, the peepholes' terms included) instead of their values, and the GRU
 * with the reset gate before the product keeps r * h_prev in place of ghn (the weight gradient
 * of R_n reads it). */
typedef struct {
    int64_t act[3];
    double alpha[3], beta[3];
    double gate_clip, cell_clip;
    int64_t input_forget, reset_before;
} cr_variant;

/* Sizes and strides are in elements; every tensor is float32, C-contiguous unless a stride is
 * given. Time-order arrays ([T, B, ...]) are indexed by the input's time, also for the reverse
 * direction; `lengths` (NULL: all T) follows cuDNN's padded semantics. */
typedef struct {
    int64_t mode, steps, batch, units, reverse, threads;
    const float *gi; /* [T, B, G*H] input projection, without bias */
    int64_t gi_st, gi_sb;
    const float *bi; /* [G*H] its bias: bW (bR is added: bi2; the GRU's sits inside r * (...)) */
    const float *r;  /* [G*H, H] recurrent weights, cuDNN's gate order */
    const float *br; /* [G*H] the GRU's recurrent bias (NULL otherwise) */
    const float *h0, *c0;
    const int64_t *lengths;
    float *y; /* output: element (t, b, u) at y[t*y_st + b*y_sb + u] */
    int64_t y_st, y_sb;
    float *hn, *cn;
    /* NULL for inference. The state each step started from is not kept (ABI 10): the
     * backward reads it out of the layer's output. */
    float *ws_gates, *ws_extra;
    /* Instead of gi: the input x [T*B, input_size] (C-contiguous rows in time order) and W
     * [G*H, input_size]; the library makes the projection itself. */
    const float *x, *w;
    int64_t input_size;
    /* [G*H] added to bi once per call (LSTM and RNN: bR; NULL: none). Summed here as torch
     * would (one float addition per element), so the bits are those of bi + bi2. */
    const float *bi2;
    /* With lengths, x may hold only the rows of valid steps: `rows` of them, and rowmap [T*B]
     * gives row t*B + b's place in x (-1: a padded step, never read). NULL: x has all T*B. */
    int64_t rows;
    const int64_t *rowmap;
    /* With lengths, the workspace may keep only the valid steps' rows (ABI 8): `ws_rows` of
     * them, wsmap [T*B] giving row t*B + b's place (-1: a padded step, nothing kept; the same
     * contents as rowmap). NULL: the workspace has all T*B rows. */
    int64_t ws_rows;
    const int64_t *wsmap;
    /* ABI 18: the variant (NULL: none) and the LSTM's peepholes [3H] (P_i, P_f, P_o; NULL). */
    const cr_variant *variant;
    const float *peep;
} cr_forward_args;

typedef struct {
    int64_t mode, steps, batch, units, reverse, threads;
    const float *r;
    const int64_t *lengths;
    /* the forward's workspace; hout is this direction's output (the layer's, at an offset of
     * d*H), read for the state each step started from (the GRU's backward needs it): element
     * (row, u) at hout[row * hout_rs + u], rows t*B + b, or with hout_compact the workspace's
     * rows by wsmap; the first step's is h0 [B, H]. */
    const float *gates, *hout, *extra, *c0;
    const float *dy;
    int64_t dy_st, dy_sb;
    const float *dhy, *dcy;  /* NULL: zero */
    /* [T, B, G*H], [T, B, H] (the GRU). They may be `gates` and `extra` themselves (ABI 7):
     * each step reads a row's gates and ghn before it writes that row's dgi and dghn, and
     * never reads the row again. */
    float *dgi, *dghn;
    float *dh0, *dc0;
    int64_t ws_rows; /* as in cr_forward_args: the forward's workspace rows and their map */
    const int64_t *wsmap;
    int64_t hout_rs, hout_compact;
    const float *h0;
    /* ABI 18: as in the forward; dpeep [3H] receives the peepholes' gradient (with peep). */
    const cr_variant *variant;
    const float *peep;
    float *dpeep;
} cr_backward_args;

/* The backward's products over all steps (cr_gemm): C[m, n] = A @ B with A [m, k], or with `at`
 * C[m, n] = A^T @ B with A [k, m] (a sum over k rows: the weight gradients); B [k, n]. Row
 * strides lda, ldb, ldc (elements; the columns are contiguous). `accumulate`: C += instead of
 * C =. colsum (at only; NULL: none): A's [m] column sums. */
typedef struct {
    int64_t at, m, n, k;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    float *c;
    int64_t ldc, accumulate;
    float *colsum;
    int64_t threads;
} cr_gemm_args;

typedef struct {
    int64_t u0, n, npad; /* this thread's units [u0, u0 + n), padded to npad */
    int tid;             /* the thread's place in its team */
} slice_t;

/* A thread's packed W, its projection buffer and their columns, which the team may fill: the
 * projection's column blocks are tasks any thread of the team takes (see the forward). */
typedef struct {
    _Alignas(64) atomic_llong next; /* the next of this thread's tasks to take */
    float *pw, *gi;
    int64_t ncols;
} tasks_t;

typedef struct {
    int nthreads;
    atomic_int count, generation, failed;
    float *h[2], *c, *dh; /* shared between the team: see the workers */
    float *rh;            /* the forward's r * h [B, H] (a GRU with the reset gate before R) */
    tasks_t tasks[CR_MAX_THREADS];
} shared_t;

/* The index of the next task below `end` on `next` (taken: no other thread gets it), or -1. */
static inline int64_t take_task(atomic_llong *next, int64_t end) {
    long long cur = atomic_load(next);
    while (cur < end && !atomic_compare_exchange_weak(next, &cur, cur + 1)) {
    }
    return cur < end ? (int64_t)cur : -1;
}

static inline int64_t gates_of(int64_t mode) {
    return mode == CR_LSTM ? 4 : mode == CR_GRU ? 3 : 1;
}

static inline int active(const int64_t *lengths, int64_t b, int64_t s) {
    return lengths == NULL || s < lengths[b];
}

/* The input time of step s of row b: the reverse direction walks each sequence backwards
 * from its last valid step; padded steps stay where they are. */
static inline int64_t time_of(const int64_t *lengths, int64_t reverse, int64_t T, int64_t b,
                              int64_t s) {
    if (!reverse) return s;
    int64_t len = lengths ? lengths[b] : T;
    return s < len ? len - 1 - s : s;
}

/* The micro-kernels' blocks of rows: M rows in ceil(M / most) blocks as even as they go (8
 * rows of at most 6 as 4 + 4, not 6 + 2: a block reads all of its columns' weights whatever
 * its rows, and a kernel of few rows waits on its multiply-adds' latency). Block q ends at
 * row_block_end(M, nb, q) and starts where block q - 1 ended. Which block a row is in never
 * changes how its sums are made. */
static inline int64_t row_blocks(int64_t M, int64_t most) { return (M + most - 1) / most; }
static inline int64_t row_block_end(int64_t M, int64_t nb, int64_t q) { return M * (q + 1) / nb; }

static float *aligned_floats(int64_t count) {
    void *p = NULL;
    size_t bytes = ((size_t)(count > 0 ? count : 1) * sizeof(float) + 63) / 64 * 64;
    return posix_memalign(&p, 64, bytes) == 0 ? (float *)p : NULL;
}

/* Each thread's scratch (its packed weights and step buffers) lives from call to call and only
 * grows: a fresh allocation per call cost more in page faults (about 100 us for 1 MB) than a
 * short sequence's whole time loop. Freed with the thread. */
static __thread float *scratch_base;
static __thread size_t scratch_floats;

static void scratch_free(void *p) { free(p); }
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static void scratch_init(void) { pthread_key_create(&scratch_key, scratch_free); }

/* `count` floats of this thread's scratch, 64-byte aligned (NULL when memory ran out). */
static float *scratch(size_t count) {
    if (count <= scratch_floats) return scratch_base;
    pthread_once(&scratch_once, scratch_init);
    size_t want = count + count / 4 + 1024;
    void *p = NULL;
    if (posix_memalign(&p, 64, want * sizeof(float)) != 0) return NULL;
    free(scratch_base);
    scratch_base = p;
    scratch_floats = want;
    pthread_setspecific(scratch_key, p);
    return scratch_base;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins briefly, then yields the core: the other threads of the team are usually microseconds
 * away, but on an oversubscribed machine a spinning thread would keep them off the core. */
static void barrier_on(int nthreads, atomic_int *count, atomic_int *generation) {
    if (nthreads == 1) return;
    int gen = atomic_load(generation);
    if (atomic_fetch_add(count, 1) == nthreads - 1) {
        atomic_store(count, 0);
        atomic_fetch_add(generation, 1);
        return;
    }
    for (int spins = 0; atomic_load(generation) == gen; spins++) {
        if (spins < 20000)
            cpu_relax();
        else
            sched_yield();
    }
}

static inline void barrier_wait(shared_t *sh) { barrier_on(sh->nthreads, &sh->count, &sh->generation); }

/* The forward's products by rule. A weight matrix is read where it is (kernel.inc's in_place_dir)
 * when few rows multiply it, and packed into each thread's scratch first otherwise:
 * packing costs several products of one row (a transpose through memory), and pays off only
 * when the packed copy serves enough rows. R serves the batch at every step: in place when the
 * call's batch is at most CR_IN_PLACE_BATCH, or when the call has one step (a cell's: the packed
 * copy would serve that one product, measured 0.86-0.97 of the packed time at B 8-64) of at most
 * CR_IN_PLACE_ROWS rows (the dot products are not blocked for more: docs/design_notes.md). A
 * batch of one with at most CR_PACK_UNITS units still packs R for a sequence of at least
 * H / 16 + 4 steps: a dot product over H <= 128 is short, so its fixed part (the tree, the
 * stores, the loop over columns) outweighs the packing within that many steps (LSTM (25, 1, 64)
 * took 0.69 of the in-place time, GRU (100, 1, 128) 0.74, LSTM (10, 1, 64) 0.89). W serves the
 * projection's rows once: in place when they are at most CR_IN_PLACE_ROWS. In place takes one of
 * two forms by the product's rows (the call's batch for R, the projection's rows for W): below
 * CR_ROWS_FORM, dot products of A's rows with S's; from CR_ROWS_FORM on, the micro-kernels over
 * S's rows against A^T, packed (rows_gemm_dir: the dot products' reduction trees cost a step of
 * B 32 H 256 about 11% of its time, forward, every cell; at B 16 the form by rows took 1.05-1.15
 * of the dot products' time, at B 24 1.11). Dot products sum in another order than the
 * packed product; the form by rows sums as it does. So the rules look at the call's sizes alone
 * (never at the rows still active at a step, nor at the thread count or the machine): a call
 * gives the same bits every time. cr_set_products forces any way (tests and benchmarks compare
 * them). */
#define CR_IN_PLACE_BATCH 1
#define CR_IN_PLACE_ROWS 128
#define CR_PACK_UNITS 128
#define CR_ROWS_FORM 32
static atomic_int forced_r = -1, forced_w = -1; /* -1: the rule, 0: packed, 1, 2: in place */

/* Which in-place form a product of `rows` rows takes: 1 dot products, 2 the micro-kernels over
 * S's rows (kernel.inc's rows_gemm_dir, the packed product's bits). */
static inline int in_place_form(int64_t rows) { return rows >= CR_ROWS_FORM ? 2 : 1; }

static inline int in_place_r(int64_t batch, int64_t steps, int64_t units) {
    int forced = atomic_load(&forced_r);
    if (forced >= 0) return forced;
    if (steps == 1) return batch <= CR_IN_PLACE_ROWS ? in_place_form(batch) : 0;
    return batch <= CR_IN_PLACE_BATCH && (steps < units / 16 + 4 || units > CR_PACK_UNITS);
}

/* The backward's product on R (dh = dg @ R) needs no transposition: R's rows are the rows of
 * its B, so the micro-kernels can read them where they are. Packing still pays over steps (the
 * packed blocks stay in L1; R's rows in place, H floats apart, map onto few cache sets), so a
 * call of one step (a cell's) reads R in place and longer ones pack it; cr_set_products' R forces
 * either way here too. Both give the same bits (each element one chain in increasing k). */
static inline int in_place_back(int64_t steps) {
    int forced = atomic_load(&forced_r);
    return forced >= 0 ? forced : steps == 1;
}

/* Whether [p, p + n) and [q, q + m) (floats; q NULL: none) share memory. */
static int overlap(const float *p, int64_t n, const float *q, int64_t m) {
    if (!p || !q || n <= 0 || m <= 0) return 0;
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return a < b + (uintptr_t)m * sizeof(float) && b < a + (uintptr_t)n * sizeof(float);
}

/* A forward of one step (a cell's) needs no barrier when its threads share nothing before the
 * step and nothing after it: each reads the caller's h0 where it is (all of it, for its product)
 * instead of the team's copy, makes its own units' gates and writes only their outputs. The
 * loop (kernel.inc's forward_worker) also needs no packed W whose column blocks the team takes
 * in turn, nor the reset-before GRU's product over the team's r * h; here, what the call itself
 * decides: h0 shares no memory with anything a thread writes (else a thread could overwrite a
 * row another still reads). A barrier cost a call at B 32 about 5% of its time on two threads
 * (one thread waits for the other, twice). The same arithmetic on the same values: the bits do
 * not change. */
static int step_alone(const cr_forward_args *a) {
    if (a->steps != 1) return 0;
    const int64_t B = a->batch, H = a->units, n = B * H, rows = a->wsmap ? a->ws_rows : B;
    return !overlap(a->h0, n, a->hn, n) && !overlap(a->h0, n, a->cn, n) &&
           !overlap(a->h0, n, a->y, (B - 1) * a->y_sb + H) &&
           !overlap(a->h0, n, a->ws_gates, rows * gates_of(a->mode) * H) &&
           !overlap(a->h0, n, a->ws_extra, rows * H);
}

/* The rule, for tests. */
int cr_step_alone(const cr_forward_args *a) { return step_alone(a); }

static inline int in_place_w(int64_t rows) {
    int forced = atomic_load(&forced_w);
    return forced >= 0 ? forced : rows <= CR_IN_PLACE_ROWS ? in_place_form(rows) : 0;
}

/* The scratch rows_gemm_dir takes for `rows` rows of A over K, into ncols columns, at an ISA of
 * vec floats per vector (its chunks of A's rows rounded up to whole vectors). */
static inline int64_t rows_work(int64_t rows, int64_t K, int64_t ncols, int64_t vec) {
    const int64_t chunk = rows < CR_IN_PLACE_ROWS ? rows : CR_IN_PLACE_ROWS;
    return (chunk + vec - 1) / vec * vec * (K + ncols);
}

/* The packed input projection in passes, by rule. In one pass over all of a call's rows, the
 * micro-kernel reads every row of the input once per column block, and the projections of all
 * steps go out to memory, to come back a step at a time: at (100, 64, 512) that is 13 MB of
 * input read 16 times and 26 MB written per thread. A pass takes as many rows as keep its input
 * and its projections within CR_PASS_BYTES each, so both stay in the core's cache while the
 * column blocks go by; without lengths, the pass for a chunk of steps is made just before them
 * (chunk_steps), so the gate math finds the projections in cache, and the buffer holds one
 * chunk. Every pass reads the thread's packed W again: where rows are so wide (I or the
 * thread's columns above 1024 floats) that a pass would hold fewer than CR_PASS_ROWS rows, the
 * projection stays one pass (0 here), since fewer rows lost more to that than they saved
 * (measured: GRU H 1024, RNN H 1760). Which pass a row is in never changes its sums (every
 * element is one chain over all of K), so these sizes may follow the thread count; the bits
 * do not. */
#define CR_PASS_BYTES (1 << 20)
#define CR_PASS_ROWS 256
static atomic_llong forced_pass = 0; /* 0: the rule, > 0: rows per pass */

/* Rows per pass for a thread's ncols columns; 0: one pass of all rows. */
static inline int64_t pass_rows(int64_t input_size, int64_t ncols) {
    int64_t forced = (int64_t)atomic_load(&forced_pass);
    if (forced > 0) return forced;
    int64_t widest = input_size > ncols ? input_size : ncols;
    int64_t rows = CR_PASS_BYTES / (int64_t)sizeof(float) / (widest > 0 ? widest : 1);
    return rows >= CR_PASS_ROWS ? rows : 0;
}

/* The rule's rows per pass (or the forced count); 0: one pass. */
int64_t cr_pass_rows(int64_t input_size, int64_t ncols) { return pass_rows(input_size, ncols); }

/* Every call's passes of `rows` rows (0: the rule again); tests check that the bits do not move. */
int cr_set_pass_rows(int64_t rows) {
    if (rows < 0) return -1;
    atomic_store(&forced_pass, (long long)rows);
    return 0;
}

/* Steps per pass of the projection made in the time loop (T: one pass before it). */
static inline int64_t chunk_steps(int64_t steps, int64_t batch, int64_t pass) {
    int64_t chunk = pass > 0 ? pass / batch : steps;
    return chunk < 1 ? 1 : chunk < steps ? chunk : steps;
}

/* The first input time that pass p of the time loop serves (steps [p * chunk, ...), at most
 * chunk of them): the reverse direction takes its steps from the end of the input. */
static inline int64_t chunk_first(int64_t steps, int64_t chunk, int64_t reverse, int64_t p) {
    int64_t s0 = p * chunk, end = s0 + chunk < steps ? s0 + chunk : steps;
    return reverse ? steps - end : s0;
}

/* Whether every element of v[0..n) is zero (either sign). A loop that starts from a zero state
 * has no first-step product to make: R h0 is zero, so the first step's product buffer is
 * written with zeros instead. The gates then differ from the product's only in the sign of a
 * zero (R h0 sums w * +0, which is -0 where every w of a row is negative), and only where the
 * rest of the gate's input is a zero as well. Each thread scans the whole state (the product
 * needs all of it), so the team agrees. */
static int all_zero(const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (v[i] != 0.0f) return 0;
    return 1;
}

int cr_in_place_batch(void) { return CR_IN_PLACE_BATCH; }
int cr_in_place_rows(void) { return CR_IN_PLACE_ROWS; }

int cr_rows_form(void) { return CR_ROWS_FORM; }

/* For R and for W: -1 restores the rule, 0 packs, 1 reads in place by dot products, 2 in place
 * by S's rows, for every call. */
int cr_set_products(int r, int w) {
    if (r < -1 || r > 2 || w < -1 || w > 2) return -1;
    atomic_store(&forced_r, r);
    atomic_store(&forced_w, w);
    return 0;
}

/* The backward products' steps at one ISA (kernel.inc): pack columns of B's chunk, make rows
 * of C over it; or make a part of C with nothing packed; sum A's columns. */
typedef struct gemm_ops {
    void (*pack)(const cr_gemm_args *, int64_t, int64_t, int64_t, int64_t, const int64_t *,
                 float *);
    void (*rows)(const cr_gemm_args *, int64_t, int64_t, int64_t, int64_t, const float *,
                 float *);
    void (*direct)(const cr_gemm_args *, int64_t, int64_t, int64_t, int64_t, float *);
    void (*column_sums)(const cr_gemm_args *, int64_t, int64_t);
} gemm_ops_t;

typedef void (*forward_fn)(const cr_forward_args *, const slice_t *, shared_t *);
typedef void (*backward_fn)(const cr_backward_args *, const slice_t *, shared_t *);
typedef struct {
    const char *name;
    int vec, rows, vectors; /* floats per vector; the packed product's micro-kernel */
    forward_fn forward;
    backward_fn backward;
    void (*activation)(int, int64_t, const float *, float *);
    const struct gemm_ops *gemm;
} isa_t;

/* The backward products' chunks: GK rows of K (a column block of B's packed chunk, GK x 64
 * floats at AVX-512, stays in L1 while the row blocks go by), GM rows of C at a time (A's packed
 * panels, GM x GK floats, in L2 while the column blocks go by). Against 256 x 96, 128 x 192 and
 * 192 x 144, this gave 3-8% less time on two cores (Emerald Rapids). The bits depend on neither
 * (kernel.inc, gemm_rows); -DGK=.. -DGM=.. try others. */
#ifndef GK
#define GK 128
#endif
#ifndef GM
#define GM 96
#endif

/* The backward's products with nothing packed (kernel.inc's gemm_direct) when C has at most
 * CR_DIRECT_ROWS rows or K is one chunk: packing B pays for itself only over many row blocks and
 * chunks. On two AVX-512 cores the packed way took 2.4x the direct time at a cell's dx (32 x 1024
 * @ 1024 x 256), 1.6x at 128 rows, 1.3x at 400; at 1600 rows 0.95x, and 0.55-0.72x at a layer's
 * (100, 64, 512) products, where B read in place (rows 2 KiB apart) no longer stays in L1. Both
 * ways give the same bits (one chain in increasing k per element), so the rule only chooses the
 * speed; cr_set_gemm forces either way (the tests compare them). */
#define CR_DIRECT_ROWS 512
static atomic_int forced_gemm = -1; /* -1: the rule, 0: packed, 1: direct */

static inline int gemm_direct(int64_t m, int64_t n, int64_t k) {
    if (n == 0 || k == 0) return 0;
    int forced = atomic_load(&forced_gemm);
    return forced >= 0 ? forced : m <= CR_DIRECT_ROWS || k <= GK;
}

/* -1 restores the rule, 0 packs B, 1 reads A and B in place, for every cr_gemm call. */
int cr_set_gemm(int direct) {
    if (direct < -1 || direct > 1) return -1;
    atomic_store(&forced_gemm, direct);
    return 0;
}

/* ---- one instantiation of kernel.inc per instruction set --------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#define ISA avx512
#define ISA_NAME "avx512"
#define VEC 16
#define MR 6
#define NV 4
#define DMB 6
#include "kernel.inc"
#undef ISA
#undef MR
#undef NV
/* The same loops with micro-kernels of up to 8 rows by 3 vectors (see isa_for); the backward's
 * products run the first build's */
#define ISA avx512_tall
#define MR 8
#define NV 3
#define NO_GEMM
#include "kernel.inc"
#undef NO_GEMM
#undef ISA
#undef ISA_NAME
#undef VEC
#undef MR
#undef NV
#undef DMB
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define ISA avx2
#define ISA_NAME "avx2"
#define VEC 8
#define MR 4
#define NV 3
#define DMB 2
#include "kernel.inc"
#undef ISA
#undef ISA_NAME
#undef VEC
#undef MR
#undef NV
#undef DMB
#pragma GCC pop_options
#define CR_HAVE_X86 1
#endif

#define ISA base
#define ISA_NAME "base"
#define VEC 4
#define MR 4
#define NV 3
#define DMB 2
#include "kernel.inc"
#undef ISA
#undef ISA_NAME
#undef VEC
#undef MR
#undef NV
#undef DMB

/* Levels: 0 baseline, 1 AVX2 + FMA, 2 AVX-512. */
static int supported_level(void) {
#ifdef CR_HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
    return 0;
}

static const isa_t *isa_of(int level) {
#ifdef CR_HAVE_X86
    if (level == 2) return &isa_table_avx512;
    if (level == 1) return &isa_table_avx2;
#endif
    (void)level;
    return &isa_table_base;
}

static atomic_int chosen_level = -1;

int cr_abi_version(void) { return CR_ABI_VERSION; }

/* The gate count of a mode code (ABI 17): the package checks it against its mode table when it
 * loads the library, so the two cannot disagree on what a code means. */
int cr_mode_gates(int mode) { return (int)gates_of(mode); }

/* The number of activations a variant may name (their codes are 0 .. this - 1). */
int cr_activations(void) { return CR_ACTS; }

int cr_supported_level(void) { return supported_level(); }

/* The level the engine runs at (the best supported unless cr_set_level chose one). */
int cr_level(void) {
    int level = atomic_load(&chosen_level);
    return level < 0 ? supported_level() : level;
}

const char *cr_level_name(int level) { return isa_of(level)->name; }

/* Chooses a level at or below the supported one (tests run every ISA); -1 restores the best. */
int cr_set_level(int level) {
    if (level > supported_level()) return -1;
    atomic_store(&chosen_level, level < 0 ? -1 : level);
    return 0;
}

/* The products' micro-kernels by rule. At AVX-512 the loops come in two builds that differ
 * only in the shape of the packed product's micro-kernel: 6 rows by 4 vectors (64 columns),
 * or 8 rows by 3 (48 columns). Each is 24 accumulators; a step's product reads the thread's
 * whole packed R once per block of rows, from L2, so 8-row blocks read it less often: at a
 * batch of 7 to 16 that is 1-2 passes instead of 2-3 (measured in one process: 0.94-0.98 of
 * the time at B = 7, 8 and 16, no change on the large shapes). Below, the wider blocks win
 * (B = 4: 1.01-1.04 with 8 rows), as the batch is a single block either way. Every element is
 * one chain of multiply-adds in increasing k in both, so they give the same bits and the rule
 * may look at anything: it looks at the loop's batch. cr_set_tall forces either (tests). */
#define CR_TALL_BATCH 7
static atomic_int forced_tall = -1; /* -1: the rule, 0: 6 x 4, 1: 8 x 3 */

static const isa_t *isa_for(int level, int64_t batch) {
#ifdef CR_HAVE_X86
    int forced = atomic_load(&forced_tall);
    if (level == 2 && (forced >= 0 ? forced : batch >= CR_TALL_BATCH)) return &isa_table_avx512_tall;
#endif
    (void)batch;
    return isa_of(level);
}

/* The packed product's micro-kernel that a loop of `batch` runs at the engine's level, by the
 * rule above (or as forced): rows * 100 + vectors of columns. */
int cr_micro_kernel(int64_t batch) {
    const isa_t *isa = isa_for(cr_level(), batch);
    return isa->rows * 100 + isa->vectors;
}

/* -1 restores the rule, 0 runs the 6 x 4 micro-kernels, 1 the 8 x 3, for every call. */
int cr_set_tall(int tall) {
    if (tall < -1 || tall > 1) return -1;
    atomic_store(&forced_tall, tall);
    return 0;
}

/* ---- the thread team --------------------------------------------------------------------- */

typedef struct {
    void (*run)(void *, int);
    void *job;
    int nthreads;
} task_t;

static pthread_mutex_t team_call = PTHREAD_MUTEX_INITIALIZER; /* one call uses the team */
static pthread_mutex_t team_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t team_wake = PTHREAD_COND_INITIALIZER;
static int team_size = 1; /* threads that exist, the caller included */
static atomic_int team_generation, team_left;
static task_t team_task;

/* The generation each worker was created at: it must not read the counter itself, or it could
 * miss the first task (posted before the new thread got to run). */
static int team_born[CR_MAX_THREADS];

static void *team_worker(void *arg) {
    int tid = (int)(intptr_t)arg;
    int seen = team_born[tid];
    for (;;) {
        for (int spins = 0; atomic_load(&team_generation) == seen; spins++) {
            if (spins < 2000) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&team_lock);
            while (atomic_load(&team_generation) == seen) pthread_cond_wait(&team_wake, &team_lock);
            pthread_mutex_unlock(&team_lock);
        }
        seen = atomic_load(&team_generation);
        if (tid < team_task.nthreads) {
            team_task.run(team_task.job, tid);
            atomic_fetch_sub(&team_left, 1);
        }
    }
    return NULL;
}

/* A forked child has none of the parent's workers: it starts a team of its own. */
static void team_after_fork(void) {
    pthread_mutex_init(&team_call, NULL);
    pthread_mutex_init(&team_lock, NULL);
    pthread_cond_init(&team_wake, NULL);
    team_size = 1;
}

static pthread_once_t team_once = PTHREAD_ONCE_INIT;
static void team_init(void) { pthread_atfork(NULL, NULL, team_after_fork); }

/* Takes the team for a call that wants `want` threads; returns how many it got (1 when another
 * call holds the team: the results do not depend on the count). */
static int team_acquire(int want) {
    pthread_once(&team_once, team_init);
    if (want <= 1 || pthread_mutex_trylock(&team_call) != 0) return 1;
    while (team_size < want) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        team_born[team_size] = atomic_load(&team_generation);
        int err = pthread_create(&th, &attr, team_worker, (void *)(intptr_t)team_size);
        pthread_attr_destroy(&attr);
        if (err != 0) break;
        team_size++;
    }
    int got = want < team_size ? want : team_size;
    if (got == 1) pthread_mutex_unlock(&team_call);
    return got;
}

/* Runs `run` on `nthreads` threads of a team that team_acquire gave this call (it stays taken:
 * the caller releases it once it is done with it). */
static void team_run(void (*run)(void *, int), void *job, int nthreads) {
    if (nthreads <= 1) {
        run(job, 0);
        return;
    }
    team_task = (task_t){run, job, nthreads};
    atomic_store(&team_left, nthreads - 1);
    pthread_mutex_lock(&team_lock);
    atomic_fetch_add(&team_generation, 1);
    pthread_cond_broadcast(&team_wake);
    pthread_mutex_unlock(&team_lock);
    run(job, 0);
    while (atomic_load(&team_left) > 0) cpu_relax();
}

/* ---- torch's OpenMP pool ------------------------------------------------------------------- */

typedef void (*gomp_parallel_t)(void (*)(void *), void *, unsigned, unsigned);
typedef int (*omp_int_t)(void);
static _Atomic(gomp_parallel_t) gomp_parallel;
static omp_int_t omp_thread_num, omp_num_threads;

/* Attaches to a GNU OpenMP runtime that is already loaded (RTLD_NOLOAD: never a second one);
 * 0 on success. NULL detaches (our own team again). */
int cr_use_openmp(const char *path) {
    if (path == NULL) { /* back to our own team */
        atomic_store(&gomp_parallel, NULL);
        return 0;
    }
    void *handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!handle) return -1;
    gomp_parallel_t parallel = (gomp_parallel_t)dlsym(handle, "GOMP_parallel");
    omp_int_t num = (omp_int_t)dlsym(handle, "omp_get_thread_num");
    omp_int_t count = (omp_int_t)dlsym(handle, "omp_get_num_threads");
    if (!parallel || !num || !count) return -1;
    omp_thread_num = num;
    omp_num_threads = count;
    atomic_store(&gomp_parallel, parallel);
    return 0;
}

/* 1 when calls run on an OpenMP pool, 0 on our own team. */
int cr_threading(void) { return atomic_load(&gomp_parallel) != NULL; }

/* ---- the calls ----------------------------------------------------------------------------- */

/* One loop (a direction of a layer, forward or backward) and what its team shares. */
typedef struct {
    const isa_t *isa;
    const void *args;
    int backward;
    int64_t batch, gates, units, width; /* the loop's and its shared state's sizes */
    int64_t steps, input_size;          /* (input_size: of the projection C makes, else 0) */
    int lstm_carry, dh_carry, reset_before;
    slice_t slices[CR_MAX_THREADS];
    shared_t shared;
} job_t;

/* Loops that run at the same time, each on a team of its own: job j on the group's threads
 * [first[j], first[j + 1]). A bidirectional layer's two directions are independent, so they
 * need no barrier between them, and each team keeps a whole direction's weights in its cache. */
#define CR_MAX_GROUP 8
typedef struct {
    job_t *jobs;
    int count;
    int first[CR_MAX_GROUP + 1];
} group_t;

static void split_units(job_t *job, int nthreads);

static void job_run(job_t *job, int tid) {
    if (job->backward)
        job->isa->backward(job->args, &job->slices[tid], &job->shared);
    else
        job->isa->forward(job->args, &job->slices[tid], &job->shared);
}

static void group_thread(void *p, int tid) {
    group_t *g = p;
    int j = 0;
    while (tid >= g->first[j + 1]) j++;
    job_run(&g->jobs[j], tid - g->first[j]);
}

/* OpenMP may give a region fewer threads than asked (nesting, limits): then its first thread
 * runs every loop alone, one after the other, the same arithmetic. */
static void openmp_entry(void *p) {
    group_t *g = p;
    int tid = omp_thread_num();
    if (omp_num_threads() != g->first[g->count]) {
        for (int j = 0; tid == 0 && j < g->count; j++) {
            g->jobs[j].shared.nthreads = 1;
            split_units(&g->jobs[j], 1);
            job_run(&g->jobs[j], 0);
        }
        return;
    }
    group_thread(g, tid);
}

/* Threads by rule: never more than slices of VEC units, and one thread when a step's product
 * is too small to pay for a barrier (about a microsecond of work). A loop of one step (a
 * cell's call) pays for waking the team instead, several microseconds: its products (the
 * projection's too) must make up for that. Measured on 2 cores at B 1: an LSTM step of 128
 * units took 17.0 us on one thread and 18.1 on two, one of 256 units 79 and 42. */
static int threads_for(int64_t requested, const job_t *job) {
    int64_t blocks = (job->units + job->isa->vec - 1) / job->isa->vec;
    int64_t want = requested < blocks ? requested : blocks;
    if (want > CR_MAX_THREADS) want = CR_MAX_THREADS;
    int64_t work = job->batch * job->gates * job->units * job->units;
    if (work < 65536) want = 1;
    if (job->steps == 1 && work + job->batch * job->gates * job->units * job->input_size < (1 << 18))
        want = 1;
    return want < 1 ? 1 : (int)want;
}

static void split_units(job_t *job, int nthreads) {
    int64_t vec = job->isa->vec, blocks = (job->units + vec - 1) / vec;
    for (int p = 0; p < nthreads; p++) {
        int64_t b0 = blocks * p / nthreads, b1 = blocks * (p + 1) / nthreads;
        int64_t end = b1 * vec < job->units ? b1 * vec : job->units;
        job->slices[p] = (slice_t){b0 * vec, end - b0 * vec, (b1 - b0) * vec, p};
    }
}

static void job_release(job_t *job) {
    shared_t *sh = &job->shared;
    free(sh->h[0]);
    free(sh->h[1]);
    free(sh->c);
    free(sh->dh);
    free(sh->rh);
    sh->h[0] = sh->h[1] = sh->c = sh->dh = sh->rh = NULL;
}

/* The shared state of a team of `nthreads`; 0 when memory ran out (nothing is held then). */
static int job_prepare(job_t *job, int nthreads) {
    shared_t *sh = &job->shared;
    sh->nthreads = nthreads;
    atomic_init(&sh->count, 0);
    atomic_init(&sh->generation, 0);
    atomic_init(&sh->failed, 0);
    for (int t = 0; t < nthreads; t++) atomic_init(&sh->tasks[t].next, 0);
    split_units(job, nthreads);
    sh->h[0] = aligned_floats(job->batch * job->width);
    sh->h[1] = aligned_floats(job->batch * job->width);
    sh->c = job->lstm_carry ? aligned_floats(job->batch * job->units) : NULL;
    sh->dh = job->dh_carry ? aligned_floats(job->batch * job->units) : NULL;
    sh->rh = job->reset_before ? aligned_floats(job->batch * job->units) : NULL;
    int ok = sh->h[0] && sh->h[1] && (!job->lstm_carry || sh->c) && (!job->dh_carry || sh->dh) &&
             (!job->reset_before || sh->rh);
    if (!ok) job_release(job);
    return ok;
}

/* Runs the group on the threads its `first` gives (the team, if it is ours, already taken). */
static int run_group(group_t *g, gomp_parallel_t openmp) {
    int total = g->first[g->count], ok = 1;
    for (int j = 0; j < g->count && ok; j++) /* the rest hold nothing (calloc, or released) */
        ok = job_prepare(&g->jobs[j], g->first[j + 1] - g->first[j]);
    if (ok && openmp && total > 1)
        openmp(openmp_entry, g, (unsigned)total, 0);
    else if (ok)
        team_run(group_thread, g, total);
    int failed = !ok;
    for (int j = 0; j < g->count; j++) {
        failed |= ok && atomic_load(&g->jobs[j].shared.failed);
        job_release(&g->jobs[j]);
    }
    return failed;
}

/* The L2 cache of a core in bytes (1 MiB where the system does not say). */
static int64_t l2_bytes(void) {
#ifdef _SC_LEVEL2_CACHE_SIZE
    long size = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (size > 0) return size;
#endif
    return 1 << 20;
}

/* Whether independent loops run at the same time, by rule: when each keeps a team of at least
 * two threads and the recurrent weights a thread then reads at every step (its slice of R,
 * twice what it reads when the loops take turns) stay within a quarter of its L2. On two
 * threads they take turns: measured there, running a bidirectional layer's directions on one
 * thread each gained at most within the noise and lost up to 30% where a direction's R
 * outgrew the L2 (docs/design_notes.md). With many threads, halving each team halves the
 * threads that meet at every step's barrier. The bits are the same either way. */
static int slice_fits(int64_t gates, int64_t units, int64_t share) {
    int64_t slice = (units + share - 1) / share;
    return gates * units * slice * (int64_t)sizeof(float) <= l2_bytes() / 4;
}

static int together_by_rule(const job_t *jobs, int count, int64_t threads) {
    if (count < 2 || threads < 2 * count) return 0;
    for (int j = 0; j < count; j++)
        if (!slice_fits(jobs[j].gates, jobs[j].units, threads / count)) return 0;
    return 1;
}

/* The rule for `count` loops of `gates` x `units` each on `threads` threads (tests ask it). */
int cr_together(int64_t count, int64_t threads, int64_t gates, int64_t units) {
    if (count < 2 || count > CR_MAX_GROUP || threads < 2 * count) return 0;
    return slice_fits(gates, units, threads / count);
}

/* Runs `count` independent loops on `threads` threads: at the same time, the threads shared
 * out evenly, where together_by_rule says so; else one loop after the other on all of them.
 * The number of threads never changes the bits (each element is computed the same way
 * whichever thread owns it), so neither does this. Returns 0, or 1 when memory ran out
 * (nothing but the outputs was written). */
static int run_jobs(job_t *jobs, int count, int64_t threads) {
    int together = together_by_rule(jobs, count, threads), total = 0;
    int want[CR_MAX_GROUP];
    for (int j = 0; j < count; j++) {
        want[j] = threads_for(together ? threads / count : threads, &jobs[j]);
        total = together ? total + want[j] : (want[j] > total ? want[j] : total);
    }
    gomp_parallel_t openmp = atomic_load(&gomp_parallel);
    int got = openmp ? total : team_acquire(total);
    int failed = 0;
    if (together && got == total) {
        group_t g = {jobs, count, {0}};
        for (int j = 0; j < count; j++) g.first[j + 1] = g.first[j] + want[j];
        failed = run_group(&g, openmp);
    } else { /* one after the other (or our team had fewer threads to give) */
        for (int j = 0; j < count && !failed; j++) {
            group_t g = {&jobs[j], 1, {0, want[j] < got ? want[j] : got}};
            failed = run_group(&g, openmp);
        }
    }
    if (!openmp && got > 1) pthread_mutex_unlock(&team_call);
    return failed;
}

static int valid_sizes(int64_t mode, int64_t steps, int64_t batch, int64_t units) {
    return mode >= CR_RNN_RELU && mode <= CR_GRU && steps >= 1 && batch >= 1 && units >= 1;
}

/* A time-major [T, B, >= width] layout given by its strides: rows of at least `width` elements
 * that do not overlap, steps of at least `batch` rows. */
static int valid_strides(int64_t st, int64_t sb, int64_t batch, int64_t width) {
    return sb >= width && st >= batch * sb;
}

/* Every length in [0, steps] (what the loops index time with). */
static int valid_lengths(const int64_t *lengths, int64_t batch, int64_t steps) {
    if (!lengths) return 1;
    for (int64_t b = 0; b < batch; b++)
        if (lengths[b] < 0 || lengths[b] > steps) return 0;
    return 1;
}

/* A row map that sends every valid step's row to a distinct row below `rows` (those are the
 * rows the loops read or write) and counts them exactly. */
static int valid_rowmap(const int64_t *map, int64_t rows, const int64_t *lengths, int64_t steps,
                        int64_t batch) {
    int64_t n = 0, total = steps * batch;
    for (int64_t i = 0; i < total; i++) {
        int64_t t = i / batch, b = i % batch, m = map[i];
        if (t < lengths[b]) {
            if (m != n) return 0; /* valid rows in order, 0..rows-1, as the caller packs them */
            n++;
        } else if (m != -1) {
            return 0;
        }
    }
    return n == rows;
}

/* A variant the loops compute: known activations, finite parameters and clips, and each field
 * only where its mode has it. */
static int valid_variant(const cr_variant *v, int64_t mode, const float *peep) {
    if (!v) return peep == NULL;
    for (int k = 0; k < 3; k++) {
        if (v->act[k] < 0 || v->act[k] >= CR_ACTS) return 0;
        if (!(v->alpha[k] - v->alpha[k] == 0) || !(v->beta[k] - v->beta[k] == 0)) return 0;
    }
    if (!(v->gate_clip >= 0 && v->gate_clip < 1e300) || !(v->cell_clip >= 0 && v->cell_clip < 1e300))
        return 0;
    if (mode != CR_LSTM && (v->cell_clip > 0 || v->input_forget || peep)) return 0;
    if (mode != CR_GRU && v->reset_before) return 0;
    return 1;
}

/* 0 when the forward's arguments are usable, else the return code that refuses them. */
static int check_forward(const cr_forward_args *a) {
    if (!valid_sizes(a->mode, a->steps, a->batch, a->units)) return 2;
    if (!(a->gi || (a->x && a->w && a->input_size >= 1))) return 2;
    if (a->gi && !valid_strides(a->gi_st, a->gi_sb, a->batch, gates_of(a->mode) * a->units))
        return 2;
    if (!valid_strides(a->y_st, a->y_sb, a->batch, a->units)) return 2;
    if (!valid_lengths(a->lengths, a->batch, a->steps)) return 3;
    if (a->rowmap &&
        !(a->x && a->lengths && valid_rowmap(a->rowmap, a->rows, a->lengths, a->steps, a->batch)))
        return 2;
    if (a->wsmap &&
        !(a->lengths && valid_rowmap(a->wsmap, a->ws_rows, a->lengths, a->steps, a->batch)))
        return 2;
    if (!a->bi || !a->r || !a->h0 || !a->y || !a->hn) return 2;
    if (a->mode == CR_GRU && !a->br) return 2;
    if (a->mode == CR_LSTM && (!a->c0 || !a->cn)) return 2;
    if (a->ws_gates && gates_of(a->mode) > 1 && !a->ws_extra) return 2;
    if (!valid_variant(a->variant, a->mode, a->peep)) return 2;
    return 0;
}

static int check_backward(const cr_backward_args *a) {
    if (!valid_sizes(a->mode, a->steps, a->batch, a->units)) return 2;
    if (!valid_strides(a->dy_st, a->dy_sb, a->batch, a->units)) return 2;
    if (!valid_lengths(a->lengths, a->batch, a->steps)) return 3;
    if (!a->r || !a->gates || !a->dy || !a->dgi || !a->dh0) return 2;
    const int before = a->variant && a->variant->reset_before; /* no dghn: see cr_variant */
    if (a->mode == CR_GRU && (!a->extra || (!a->dghn && !before) || !a->hout || !a->h0)) return 2;
    if (!valid_variant(a->variant, a->mode, a->peep) || (a->peep && !a->dpeep)) return 2;
    if (a->hout && a->hout_rs < a->units) return 2;
    if (a->hout_compact && !a->wsmap) return 2;
    if (a->mode == CR_LSTM && (!a->extra || !a->c0 || !a->dc0)) return 2;
    if (a->wsmap &&
        !(a->lengths && valid_rowmap(a->wsmap, a->ws_rows, a->lengths, a->steps, a->batch)))
        return 2;
    return 0;
}

/* `count` (1 to CR_MAX_GROUP) independent loops, forward or backward, checked first (none runs
 * if one is refused), then run by run_jobs on the first one's thread count. */
static int run_loops(const void *const *list, int64_t count, int backward) {
    if (!list || count < 1 || count > CR_MAX_GROUP) return 2;
    for (int64_t j = 0; j < count; j++) {
        if (!list[j]) return 2;
        int rc = backward ? check_backward(list[j]) : check_forward(list[j]);
        if (rc) return rc;
    }
    job_t *jobs = calloc((size_t)count, sizeof(job_t));
    if (!jobs) return 1;
    const int level = cr_level();
    int64_t threads = backward ? ((const cr_backward_args *)list[0])->threads
                               : ((const cr_forward_args *)list[0])->threads;
    for (int64_t j = 0; j < count; j++) {
        job_t *job = &jobs[j];
        int64_t mode;
        if (backward) {
            const cr_backward_args *a = list[j];
            mode = a->mode, job->batch = a->batch, job->units = a->units, job->steps = a->steps;
        } else {
            const cr_forward_args *a = list[j];
            mode = a->mode, job->batch = a->batch, job->units = a->units, job->steps = a->steps;
            job->input_size = a->w ? a->input_size : 0;
            job->reset_before = a->variant && a->variant->reset_before;
        }
        job->isa = isa_for(level, job->batch), job->args = list[j], job->backward = backward;
        job->gates = gates_of(mode);
        job->width = backward ? job->gates * job->units : job->units;
        job->lstm_carry = mode == CR_LSTM, job->dh_carry = backward;
    }
    int rc = run_jobs(jobs, (int)count, threads);
    free(jobs);
    return rc;
}

/* Returns 0, 1 when memory ran out (nothing but the outputs was written), 2 on bad sizes,
 * strides or a missing pointer, 3 on lengths outside [0, steps]. The caller hands every array
 * C-contiguous with the sizes these describe (engines/native.py's one boundary). */
int cr_forward(const cr_forward_args *a) {
    const void *list[1] = {a};
    return run_loops(list, 1, 0);
}

int cr_backward(const cr_backward_args *a) {
    const void *list[1] = {a};
    return run_loops(list, 1, 1);
}

/* Independent loops at once (a bidirectional layer's two directions), the threads shared out
 * between them: the bits of calling cr_forward / cr_backward on each in turn. */
int cr_forward_many(const cr_forward_args *const *list, int64_t count) {
    return run_loops((const void *const *)list, count, 0);
}

int cr_backward_many(const cr_backward_args *const *list, int64_t count) {
    return run_loops((const void *const *)list, count, 1);
}

/* ---- the backward's products ---------------------------------------------------------------- */

typedef struct {
    const cr_gemm_args *g;
    const isa_t *isa;
    int threads;         /* our team's size (OpenMP's is its own) */
    int64_t npad;        /* B's columns rounded up to whole vectors */
    int64_t *col;        /* npad column numbers, -1 for a pad (packed only) */
    float *P;            /* B's packed chunk, GK x npad: shared by the team (packed only) */
    int direct;          /* nothing packed (gemm_direct): no P, no barriers */
    int by_columns;      /* direct: the threads share C's column blocks, not its rows */
    atomic_int count, generation, failed;
} gemm_job_t;

/* Part p of n of a range of `size` in whole units of `unit` where it can. */
static int64_t share(int64_t size, int64_t unit, int p, int n) {
    int64_t blocks = (size + unit - 1) / unit, start = blocks * p / n * unit;
    return start < size ? start : size;
}

/* Thread `tid` of a team of `team`: per chunk of K, its share of B's column blocks packed into
 * the shared P, a barrier, its share of C's rows made over all of P, a barrier (P is packed
 * again next). Each packs a part of B once for the team, where each used to pack all of it
 * (the cost of a pass over B per thread). The shares follow the team's size; the bits do not. */
static void gemm_thread(gemm_job_t *job, int tid, int team) {
    const cr_gemm_args *g = job->g;
    const gemm_ops_t *ops = job->isa->gemm;
    const int64_t block = (int64_t)job->isa->vec * job->isa->vectors;
    if (job->direct) { /* each thread on its own: no shared P, so no barrier */
        float *Pt = scratch((size_t)GK * (size_t)job->isa->vec + 16);
        if (!Pt) {
            atomic_store(&job->failed, 1);
            return;
        }
        int64_t m0 = 0, m1 = g->m, c0 = 0, c1 = job->npad;
        const int64_t rows = job->isa->rows;
        if (job->by_columns)
            c0 = share(job->npad, block, tid, team), c1 = share(job->npad, block, tid + 1, team);
        else
            m0 = share(g->m, rows, tid, team), m1 = share(g->m, rows, tid + 1, team);
        if (m1 > m0 && c1 > c0) ops->direct(g, m0, m1, c0, c1, Pt); /* n, k > 0 */
        if (g->colsum && !job->by_columns && m1 > m0) ops->column_sums(g, m0, m1);
        if (g->colsum && job->by_columns && tid == 0) ops->column_sums(g, 0, g->m);
        return;
    }
    float *Ap = scratch((size_t)GM * GK + 16);
    if (!Ap) atomic_store(&job->failed, 1);
    barrier_on(team, &job->count, &job->generation);
    if (atomic_load(&job->failed)) return; /* every thread sees it: none waits at a barrier */
    const int64_t m0 = share(g->m, job->isa->rows, tid, team);
    const int64_t m1 = share(g->m, job->isa->rows, tid + 1, team);
    const int64_t c0 = share(job->npad, block, tid, team), c1 = share(job->npad, block, tid + 1, team);
    for (int64_t k0 = 0; g->n > 0 && k0 < g->k; k0 += GK) {
        const int64_t kc = g->k - k0 < GK ? g->k - k0 : GK;
        ops->pack(g, k0, kc, c0, c1, job->col, job->P);
        barrier_on(team, &job->count, &job->generation);
        if (m1 > m0) ops->rows(g, m0, m1, k0, kc, job->P, Ap);
        barrier_on(team, &job->count, &job->generation);
    }
    if (g->n > 0 && g->k == 0 && !g->accumulate)
        for (int64_t r = m0; r < m1; r++) memset(g->c + r * g->ldc, 0, (size_t)g->n * sizeof(float));
    if (g->colsum && m1 > m0) ops->column_sums(g, m0, m1);
}

static void gemm_team(void *p, int tid) {
    gemm_job_t *job = p;
    gemm_thread(job, tid, job->threads);
}

static void gemm_openmp(void *p) { gemm_thread(p, omp_thread_num(), omp_num_threads()); }

static int check_gemm(const cr_gemm_args *g) {
    if (g->m < 0 || g->n < 0 || g->k < 0 || (g->at != 0 && g->at != 1)) return 2;
    if (g->m > 0 && g->n > 0 && (!g->c || g->ldc < g->n)) return 2;
    if (g->m > 0 && g->k > 0 && (!g->a || g->lda < (g->at ? g->m : g->k))) return 2;
    if (g->n > 0 && g->k > 0 && (!g->b || g->ldb < g->n)) return 2;
    if (g->colsum && !g->at) return 2;
    return 0;
}

/* C (+)= A @ B or A^T @ B (see cr_gemm_args) on up to `threads` threads, each packing a share
 * of B for the team and making whole rows of C (gemm_thread); the bits depend on none of it
 * (kernel.inc, gemm_rows). Returns 0, 1 when memory ran
 * out, 2 on bad sizes, strides or a missing pointer. */
int cr_gemm(const cr_gemm_args *g) {
    if (!g) return 2;
    int rc = check_gemm(g);
    if (rc) return rc;
    if (g->m == 0) return 0;
    cr_gemm_args args = *g;
    if (args.n == 0) args.ldc = 0; /* colsum alone */
    gemm_job_t job = {.g = &args, .isa = isa_of(cr_level())};
    job.direct = gemm_direct(args.m, args.n, args.k);
    atomic_init(&job.count, 0);
    atomic_init(&job.generation, 0);
    atomic_init(&job.failed, 0);
    const int64_t vec = job.isa->vec;
    job.npad = (args.n + vec - 1) / vec * vec;
    if (!job.direct) { /* the packed way's column map and B's shared chunk */
        job.col = malloc((size_t)(job.npad > 0 ? job.npad : 1) * sizeof(int64_t));
        job.P = aligned_floats((int64_t)GK * job.npad);
        if (!job.col || !job.P) {
            free(job.col);
            free(job.P);
            return 1;
        }
        for (int64_t c = 0; c < job.npad; c++) job.col[c] = c < args.n ? c : -1;
    }
    int64_t blocks = (args.m + job.isa->rows - 1) / job.isa->rows;
    if (job.direct && args.m <= GM) { /* few rows: the threads share B's columns instead */
        const int64_t block = (int64_t)job.isa->vec * job.isa->vectors;
        job.by_columns = 1, blocks = (job.npad + block - 1) / block;
    }
    int64_t want = args.threads < blocks ? args.threads : blocks;
    if (want > CR_MAX_THREADS) want = CR_MAX_THREADS;
    if (args.m * (args.n + 1) * args.k < (1 << 18)) want = 1; /* less than a barrier's worth */
    if (want < 1) want = 1;
    gomp_parallel_t openmp = atomic_load(&gomp_parallel);
    if (openmp && want > 1) {
        openmp(gemm_openmp, &job, (unsigned)want, 0);
    } else {
        job.threads = openmp ? 1 : team_acquire((int)want);
        team_run(gemm_team, &job, job.threads);
        if (!openmp && job.threads > 1) pthread_mutex_unlock(&team_call);
    }
    free(job.col);
    free(job.P);
    return atomic_load(&job.failed) ? 1 : 0;
}

/* ---- a cell's step (step.h) ----------------------------------------------------------------- */

static int step_sizes_ok(const cr_step_args *a) {
    return a && a->batch > 0 && a->units > 0 && a->input_size > 0 && a->w_ih && a->w_hh &&
           a->b_ih && a->b_hh && a->x && a->h0 && a->h1 &&
           (a->mode == CR_LSTM) == (a->c0 != NULL);
}

/* engines/native.py's forward for one step: the input projection made inside (x and W), the
 * LSTM and RNN modes' two biases summed into the input term, the GRU's bR inside r * (...). */
int cr_step_forward(const cr_step_args *a) {
    if (!step_sizes_ok(a) || (a->mode == CR_LSTM && !a->c1)) return 2;
    const int64_t h = a->units, gh = gates_of(a->mode) * h, gru = a->mode == CR_GRU;
    cr_forward_args f = {
        .mode = a->mode, .steps = 1, .batch = a->batch, .units = h, .threads = a->threads,
        .gi_st = a->batch * gh, .gi_sb = gh, .bi = a->b_ih, .bi2 = gru ? NULL : a->b_hh,
        .r = a->w_hh, .br = gru ? a->b_hh : NULL, .h0 = a->h0, .c0 = a->c0,
        .y = a->h1, .y_st = a->batch * h, .y_sb = h, .hn = a->h1, .cn = a->c1,
        .ws_gates = a->gates, .ws_extra = a->gates ? a->extra : NULL,
        .x = a->x, .w = a->w_ih, .input_size = a->input_size,
    };
    return cr_forward(&f);
}

/* The record of c = A^T @ b (n columns; 0: none) with A's column sums into colsum (NULL:
 * none): sums over k rows, A's m columns at a with row stride lda, b [k, n], c [m, n]. */
static cr_gemm_args step_sums(int64_t threads, int64_t k, int64_t m, const float *a, int64_t lda,
                              const float *b, int64_t n, float *c, float *colsum) {
    cr_gemm_args g = {.at = 1, .m = m, .n = n, .k = k, .a = a, .lda = lda, .b = n ? b : NULL,
                      .ldb = n, .c = n ? c : NULL, .ldc = n, .colsum = colsum,
                      .threads = threads};
    return g;
}

/* engines/native.py's backward for one step, then the products of engines/common.py's
 * recurrent_grads and input_grads on the same operands, in their order: dR = dgi^T h0 with the
 * biases' column sums (the GRU's candidate third from dghn, its rows of dR and bR at an offset,
 * and bW's sums over all of dgi; the other modes' bR gradient is bW's, the same sums again),
 * dW = dgi^T x, dx = dgi W. */
int cr_step_backward(const cr_step_args *a) {
    if (!step_sizes_ok(a) || !a->gates || !a->dh1 || !a->dh0) return 2;
    const int64_t mode = a->mode, h = a->units, gh = gates_of(mode) * h, n_in = a->input_size;
    const int64_t batch = a->batch, threads = a->threads, gru = mode == CR_GRU;
    if ((mode == CR_LSTM && !a->dc0) || (gates_of(mode) > 1 && !a->extra)) return 2;
    if ((a->dw_ih == NULL) != (a->dw_hh == NULL) || (a->db_ih == NULL) != (a->db_hh == NULL))
        return 2;
    float *dgi = aligned_floats(batch * gh);
    float *dghn = gru ? aligned_floats(batch * h) : NULL;
    if (!dgi || (gru && !dghn)) {
        free(dgi);
        free(dghn);
        return 1;
    }
    cr_backward_args b = {
        .mode = mode, .steps = 1, .batch = batch, .units = h, .threads = threads,
        .r = a->w_hh, .gates = a->gates, .hout = a->h1, .extra = a->extra, .c0 = a->c0,
        .dy = a->dh1, .dy_st = batch * h, .dy_sb = h, .dcy = a->dc1, .dgi = dgi, .dghn = dghn,
        .dh0 = a->dh0, .dc0 = a->dc0, .hout_rs = h, .h0 = a->h0,
    };
    cr_gemm_args p[5];
    int count = 0;
    const int64_t n = a->dw_hh ? h : 0;
    float *w = a->dw_hh, *bi = a->db_ih, *bh = a->db_hh;
    if (w || bi) {
        if (gru) {
            p[count++] = step_sums(threads, batch, 2 * h, dgi, gh, a->h0, n, w, bh);
            p[count++] = step_sums(threads, batch, h, dghn, h, a->h0, n, w ? w + 2 * h * h : NULL,
                                   bh ? bh + 2 * h : NULL);
            if (bi) p[count++] = step_sums(threads, batch, gh, dgi, gh, NULL, 0, NULL, bi);
        } else {
            p[count++] = step_sums(threads, batch, gh, dgi, gh, a->h0, n, w, bi);
            if (bh) p[count++] = step_sums(threads, batch, gh, dgi, gh, NULL, 0, NULL, bh);
        }
    }
    if (a->dw_ih) p[count++] = step_sums(threads, batch, gh, dgi, gh, a->x, n_in, a->dw_ih, NULL);
    if (a->dx) {
        cr_gemm_args g = {.m = batch, .n = n_in, .k = gh, .a = dgi, .lda = gh, .b = a->w_ih,
                          .ldb = n_in, .c = a->dx, .ldc = n_in, .threads = threads};
        p[count++] = g;
    }
    int rc = cr_backward(&b);
    for (int i = 0; rc == 0 && i < count; i++) rc = cr_gemm(&p[i]);
    free(dgi);
    free(dghn);
    return rc;
}

/* madvise(advice) over the whole units of `unit` bytes inside [p, p + bytes); 0, or -1 where
 * madvise refused. */
static int advise_inside(void *p, int64_t bytes, uintptr_t unit, int advice) {
    if (!p || bytes <= 0 || unit == 0) return 0;
    uintptr_t start = ((uintptr_t)p + unit - 1) / unit * unit;
    uintptr_t end = ((uintptr_t)p + (uintptr_t)bytes) / unit * unit;
    if (end <= start) return 0;
    return madvise((void *)start, end - start, advice) == 0 ? 0 : -1;
}

/* Gives the whole pages inside [p, p + bytes) back to the OS (they read as zeros if touched
 * again): the backward's way of freeing the parts of the workspace it has finished with while
 * the workspace itself stays alive (the autograd node holds it until the backward returns).
 * Returns 0, or -1 where madvise refused. */
int cr_release(void *p, int64_t bytes) {
    long page = sysconf(_SC_PAGESIZE);
#ifdef MADV_DONTNEED
    return page > 0 ? advise_inside(p, bytes, (uintptr_t)page, MADV_DONTNEED) : 0;
#else
    (void)p, (void)bytes, (void)page;
    return 0;
#endif
}

/* Asks for transparent huge pages (2 MiB) over the whole 2 MiB blocks inside [p, p + bytes),
 * before anything is written there: a training call's workspace is a fresh allocation the
 * forward writes in full, and with 4 KiB pages its page faults took about 30% of the forward
 * (3-layer bidirectional LSTM (100, 32, 256): 98 MB, 24 000 faults; 226 ms against 160).
 * Where the kernel has no huge pages, or keeps them off, nothing changes. Returns 0, or -1
 * where madvise refused (the call still ran: the data are not touched either way). */
int cr_advise_huge(void *p, int64_t bytes) {
#ifdef MADV_HUGEPAGE
    return advise_inside(p, bytes, (uintptr_t)2 << 20, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
    return 0;
#endif
}

/* The engine's own sigmoid (kind 0), tanh (1) and exp (2), for the accuracy tests. */
void cr_activation(int kind, int64_t count, const float *x, float *y) {
    isa_of(cr_level())->activation(kind, count, x, y);
}
