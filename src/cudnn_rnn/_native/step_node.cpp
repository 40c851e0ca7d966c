// A cell's step as one torch operator with its autograd node in C++ (issue 48).
//
// A cell stepped in a Python loop is latency bound. Its step through a Python
// torch.autograd.Function paid for the Function's Python forward and backward, the ctypes records
// and the saved tensors' Python unpacking: at B 1 more than the engine's arithmetic, and more
// than torch.nn's whole step (one C++ call with C++ nodes). Here the step is the operator
// cudnn_rnn_step::step, whose node is a torch::autograd::Function in C++: its forward and backward
// call the native engine's cr_step_forward and cr_step_backward (step.h), the functions the
// Python path (engines/native_step.py) calls, on the same numbers, so the same bits. It reads
// the parameters it is given (not the buffer), after checking every operand; where one does not
// fit (another dtype, device, size or layout) it returns an empty list and the cell takes its
// other paths.
//
// The engine is the C library cudnn_rnn loaded (engines/native_library.py; the sanitizer run's
// build too): cudnn_rnn_step::bind hands this library its two functions' addresses, and the step
// refuses to run before that. A backward in grad mode (create_graph: a double backward) is the
// operator cudnn_rnn_step::step_grads, which cudnn_rnn implements in Python
// (nn/_step_node.py): the step again through cudnn_rnn's operator, differentiated by
// autograd. What the step read is saved as torch saves it for its own cells: an input, state or
// parameter edited in place before the backward makes the backward raise torch's error.
//
// Built against one torch version (setup.py: the file's name says which), loaded by cudnn_rnn
// only under that version; without it the Python path runs, with the same bits.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <atomic>
#include <optional>
#include <vector>

#include "step.h"

namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using step_fn = int (*)(const cr_step_args *);
std::atomic<step_fn> engine_forward{nullptr};
std::atomic<step_fn> engine_backward{nullptr};

// The C engine's mode codes (cuDNN's) and their gates per unit.
enum { RNN_RELU, RNN_TANH, LSTM, GRU };
int64_t gates_of(int64_t mode) { return mode == LSTM ? 4 : mode == GRU ? 3 : 1; }

float *out(const Tensor &t) { return t.defined() ? t.data_ptr<float>() : nullptr; }
const float *in(const Tensor &t) { return t.defined() ? t.const_data_ptr<float>() : nullptr; }

void run(const std::atomic<step_fn> &fn, const cr_step_args &a, const char *what) {
    step_fn f = fn.load();
    TORCH_CHECK(f != nullptr, "cudnn_rnn_step: the native engine is not bound (cudnn_rnn binds it "
                              "when it loads this library)");
    int rc = f(&a);
    TORCH_CHECK_WITH(OutOfMemoryError, rc != 1, "cudnn_rnn native engine: ", what,
                     " ran out of memory");
    TORCH_CHECK(rc == 0, "cudnn_rnn native engine: ", what, " returned ", rc,
                " (refused its sizes or a missing pointer; a bug: please report it)");
}

// Every operand is checked here before C sees a pointer (a call of the operator from elsewhere
// must not make the engine read past an array): CPU float32, C-contiguous, of the sizes x [B, I]
// and h0 [B, H] give.
bool fits(const Tensor &t, c10::IntArrayRef sizes) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat &&
           t.is_contiguous() && t.sizes() == sizes;
}

void check(const Tensor &t, c10::IntArrayRef sizes, const char *name) {
    TORCH_CHECK(fits(t, sizes), "cudnn_rnn_step: ", name,
                " must be a contiguous CPU float32 tensor of size ", sizes);
}

// A step's record from its operands: x [B, I], h0 [B, H], the LSTM's c0, and the layer's
// parameters W [G*H, I], R [G*H, H] and (with biases) bW, bR [G*H]; without them, zeros
// (the values the buffer holds there: the same bits). False where an operand does not fit
// (another dtype, device, size or layout: the caller takes another path); a call that is
// wrong in kind (an unknown mode, a cell state for another mode, parameters that are not
// two or four, operands that are not matrices) raises.
bool record(int64_t mode, const Tensor &x, const Tensor &h0, const std::optional<Tensor> &c0,
            at::TensorList params, Tensor &zeros, cr_step_args &a) {
    TORCH_CHECK(mode >= RNN_RELU && mode <= GRU, "cudnn_rnn_step: unknown mode code ", mode);
    TORCH_CHECK(x.dim() == 2 && h0.dim() == 2, "cudnn_rnn_step: x and h0 must be 2-D");
    const bool lstm = c0.has_value() && c0->defined();
    TORCH_CHECK(lstm == (mode == LSTM), "cudnn_rnn_step: c0 is the LSTM's, and the LSTM's only");
    TORCH_CHECK(params.size() == 2 || params.size() == 4,
                "cudnn_rnn_step: the parameters are W, R and optionally bW, bR");
    a = cr_step_args{};
    a.mode = mode, a.batch = x.size(0), a.units = h0.size(1), a.input_size = x.size(1);
    a.threads = at::get_num_threads();
    const int64_t gh = gates_of(mode) * a.units;
    const bool biases = params.size() == 4;
    if (a.batch == 0 || a.units == 0 || a.input_size == 0 || !fits(x, {a.batch, a.input_size}) ||
        !fits(h0, {a.batch, a.units}) || (lstm && !fits(*c0, {a.batch, a.units})) ||
        !fits(params[0], {gh, a.input_size}) || !fits(params[1], {gh, a.units}) ||
        (biases && (!fits(params[2], {gh}) || !fits(params[3], {gh}))))
        return false;
    if (!biases) zeros = at::zeros({gh}, x.options());
    a.w_ih = in(params[0]), a.w_hh = in(params[1]);
    a.b_ih = biases ? in(params[2]) : in(zeros);
    a.b_hh = biases ? in(params[3]) : in(zeros);
    a.x = in(x), a.h0 = in(h0), a.c0 = lstm ? in(*c0) : nullptr;
    return true;
}

struct Outputs {
    Tensor h1, c1, gates, extra;
};

// The forward on a record (record's) of x's options; keep: what the backward reads too.
Outputs forward_step(cr_step_args a, const at::TensorOptions &options, bool keep) {
    const int64_t mode = a.mode;
    Outputs o;
    o.h1 = at::empty({a.batch, a.units}, options);
    if (mode == LSTM) o.c1 = at::empty({a.batch, a.units}, options);
    if (keep) {
        o.gates = at::empty({a.batch, gates_of(mode) * a.units}, options);
        if (gates_of(mode) > 1) o.extra = at::empty({a.batch, a.units}, options);
    }
    a.h1 = out(o.h1), a.c1 = out(o.c1), a.gates = out(o.gates), a.extra = out(o.extra);
    run(engine_forward, a, "cr_step_forward");
    return o;
}

variable_list results(const Outputs &o) {
    return o.c1.defined() ? variable_list{o.h1, o.c1} : variable_list{o.h1};
}

struct Step : public torch::autograd::Function<Step> {
    // Saved: x, h0, (c0,) h1, gates, (extra,) then the parameters.
    static variable_list forward(AutogradContext *ctx, const Tensor &x, const Tensor &h0,
                                 const std::optional<Tensor> &c0, int64_t mode,
                                 at::TensorList params) {
        Tensor zeros;
        cr_step_args a;
        TORCH_CHECK(record(mode, x, h0, c0, params, zeros, a),
                    "cudnn_rnn_step: operands that do not fit (a bug: step checked them)");
        Outputs o = forward_step(a, x.options(), true);
        const bool lstm = c0.has_value() && c0->defined();
        variable_list saved{x, h0};
        if (lstm) saved.push_back(*c0);
        saved.push_back(o.h1);
        saved.push_back(o.gates);
        if (o.extra.defined()) saved.push_back(o.extra);
        saved.insert(saved.end(), params.begin(), params.end());
        ctx->save_for_backward(saved);
        ctx->saved_data["mode"] = mode;
        ctx->saved_data["lstm"] = lstm;
        ctx->saved_data["extra"] = o.extra.defined();
        ctx->saved_data["params"] = static_cast<int64_t>(params.size());
        ctx->set_materialize_grads(false);
        return results(o);
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads) {
        variable_list saved = ctx->get_saved_variables();
        const int64_t mode = ctx->saved_data["mode"].toInt();
        const bool lstm = ctx->saved_data["lstm"].toBool();
        const bool has_extra = ctx->saved_data["extra"].toBool();
        const int64_t n_params = ctx->saved_data["params"].toInt();
        size_t k = 0;
        Tensor x = saved[k++], h0 = saved[k++];
        Tensor c0 = lstm ? saved[k++] : Tensor();
        Tensor h1 = saved[k++], gates = saved[k++];
        Tensor extra = has_extra ? saved[k++] : Tensor();
        std::vector<Tensor> params(saved.begin() + static_cast<int64_t>(k), saved.end());
        Tensor dh1 = grads[0];
        Tensor dc1 = grads.size() > 1 ? grads[1] : Tensor();
        // One gradient per forward argument: x, h0, c0, the mode, each parameter.
        variable_list none(4 + static_cast<size_t>(n_params));
        if (!dh1.defined() && !dc1.defined()) return none;
        if (!dh1.defined()) dh1 = at::zeros_like(h1);
        const size_t first_param = lstm ? 3 : 2;  // (the inputs' edges: x, h0, c0, params)
        auto needs = [&](size_t edge) { return ctx->needs_input_grad(edge); };
        if (at::GradMode::is_enabled()) return differentiable(ctx, x, h0, c0, mode, params, dh1, dc1);
        Tensor zeros;
        std::optional<Tensor> c0_opt = lstm ? std::optional<Tensor>(c0) : std::nullopt;
        cr_step_args a;
        TORCH_CHECK(record(mode, x, h0, c0_opt, params, zeros, a),
                    "cudnn_rnn_step: what the step saved does not fit (a bug: please report it)");
        const int64_t gh = gates_of(mode) * a.units;
        check(h1, {a.batch, a.units}, "h1");
        auto options = x.options();
        Tensor dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh;
        dh0 = at::empty({a.batch, a.units}, options);
        if (lstm) dc0 = at::empty({a.batch, a.units}, options);
        if (needs(0)) dx = at::empty({a.batch, a.input_size}, options);
        if (needs(first_param) || needs(first_param + 1)) {
            dw_ih = at::empty({gh, a.input_size}, options);
            dw_hh = at::empty({gh, a.units}, options);
        }
        if (n_params > 2 && (needs(first_param + 2) || needs(first_param + 3))) {
            db_ih = at::empty({gh}, options);
            db_hh = at::empty({gh}, options);
        }
        dh1 = dh1.contiguous();
        check(dh1, {a.batch, a.units}, "the gradient of h1");
        if (dc1.defined()) {
            dc1 = dc1.contiguous();
            check(dc1, {a.batch, a.units}, "the gradient of c1");
        }
        a.h1 = out(h1), a.gates = out(gates), a.extra = out(extra);
        a.dh1 = in(dh1), a.dc1 = in(dc1);
        a.dx = out(dx), a.dh0 = out(dh0), a.dc0 = out(dc0);
        a.dw_ih = out(dw_ih), a.dw_hh = out(dw_hh), a.db_ih = out(db_ih), a.db_hh = out(db_hh);
        run(engine_backward, a, "cr_step_backward");
        variable_list g{dx, dh0, dc0, Tensor(), dw_ih, dw_hh};
        if (n_params > 2) g.insert(g.end(), {db_ih, db_hh});
        return g;
    }

    // The gradients as a differentiable function of the inputs and of the incoming gradients:
    // cudnn_rnn_step::step_grads (cudnn_rnn's Python), whose result holds every input's.
    static variable_list differentiable(AutogradContext *ctx, const Tensor &x, const Tensor &h0,
                                        const Tensor &c0, int64_t mode,
                                        const std::vector<Tensor> &params, const Tensor &dh1,
                                        const Tensor &dc1) {
        static auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("cudnn_rnn_step::step_grads", "")
                             .typed<std::vector<Tensor>(
                                 const Tensor &, const Tensor &, const std::optional<Tensor> &,
                                 int64_t, at::TensorList, const Tensor &,
                                 const std::optional<Tensor> &)>();
        std::optional<Tensor> c0_opt = c0.defined() ? std::optional<Tensor>(c0) : std::nullopt;
        std::optional<Tensor> dc1_opt = dc1.defined() ? std::optional<Tensor>(dc1) : std::nullopt;
        std::vector<Tensor> found = op.call(x, h0, c0_opt, mode, params, dh1, dc1_opt);
        // found: dx, dh0, dc0 (an LSTM's), then the parameters'; kept where asked for.
        const bool lstm = c0.defined();
        size_t edge = 0, k = 0;
        variable_list g;
        auto take = [&](bool present) {
            if (!present) {
                g.emplace_back();
                return;
            }
            Tensor t = found[k++];
            g.push_back(ctx->needs_input_grad(edge++) ? t : Tensor());
        };
        take(true);   // x
        take(true);   // h0
        take(lstm);   // c0
        g.emplace_back();  // the mode
        for (size_t i = 0; i < params.size(); ++i) take(true);
        return g;
    }
};

// The step; an empty list where an operand does not fit (record), for the caller to take
// another path.
std::vector<Tensor> step(const Tensor &x, const Tensor &h0, const std::optional<Tensor> &c0,
                         int64_t mode, at::TensorList params) {
    Tensor zeros;
    cr_step_args a;
    if (!record(mode, x, h0, c0, params, zeros, a)) return {};
    bool grad = x.requires_grad() || h0.requires_grad() ||
                (c0.has_value() && c0->defined() && c0->requires_grad());
    for (const Tensor &p : params) grad = grad || p.requires_grad();
    if (!(grad && at::GradMode::is_enabled()))  // (no node to make)
        return results(forward_step(a, x.options(), false));
    return Step::apply(x, h0, c0, mode, params);
}

// The engine ABI this node was compiled with (step.h): a node left from a build of other sources
// is not loaded (nn/_step_node.py compares it with the package's).
int64_t abi() { return CR_ABI_VERSION; }

void bind(int64_t forward, int64_t backward) {
    engine_forward.store(reinterpret_cast<step_fn>(forward));
    engine_backward.store(reinterpret_cast<step_fn>(backward));
}

}  // namespace

TORCH_LIBRARY(cudnn_rnn_step, m) {
    m.def("abi() -> int");
    m.def("bind(int forward, int backward) -> ()");
    m.def("step(Tensor x, Tensor h0, Tensor? c0, int mode, Tensor[] params) -> Tensor[]");
    m.def(
        "step_grads(Tensor x, Tensor h0, Tensor? c0, int mode, Tensor[] params, Tensor dh1, "
        "Tensor? dc1) -> Tensor[]");
    m.impl("abi", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(abi));
    m.impl("bind", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(bind));
    m.impl("step", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(step));
}
