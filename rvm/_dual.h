/* Dual numbers (value, tangent) for the derivative expressions of isa/expr.py.
 *
 * rvm/_deriv.h (generated from isa/derivatives.py) evaluates every instruction's partial
 * derivatives with these operations.  The value part is the partial derivative; the tangent
 * part is its derivative along the current tangent of the sources, which is what the
 * tangent-over-adjoint (Hessian) rules need.  A tangent part whose factor is zero is not
 * evaluated, so a derivative that is infinite where the direction is zero stays harmless.
 */
#ifndef RVM_DUAL_H
#define RVM_DUAL_H
#include <math.h>

typedef struct { double v, t; } rvm_dual;

static inline rvm_dual d_make(double v, double t) { rvm_dual r; r.v = v; r.t = t; return r; }
static inline rvm_dual d_const(double v) { return d_make(v, 0.0); }
/* f(x) with f'(x) = df: the chain rule, skipping df when the tangent is zero */
static inline rvm_dual d_chain(double fx, double df, double t) {
    return d_make(fx, t != 0.0 ? df * t : 0.0);
}
static inline rvm_dual d_add(rvm_dual a, rvm_dual b) { return d_make(a.v + b.v, a.t + b.t); }
static inline rvm_dual d_sub(rvm_dual a, rvm_dual b) { return d_make(a.v - b.v, a.t - b.t); }
static inline rvm_dual d_neg(rvm_dual a) { return d_make(-a.v, -a.t); }
static inline rvm_dual d_mul(rvm_dual a, rvm_dual b) {
    return d_make(a.v * b.v, (a.t != 0.0 ? a.t * b.v : 0.0) + (b.t != 0.0 ? a.v * b.t : 0.0));
}
static inline rvm_dual d_div(rvm_dual a, rvm_dual b) {
    double q = a.v / b.v;
    return d_make(q, (a.t != 0.0 ? a.t / b.v : 0.0) - (b.t != 0.0 ? q * b.t / b.v : 0.0));
}
static inline rvm_dual d_sqrt(rvm_dual x) { double s = sqrt(x.v); return d_chain(s, 0.5 / s, x.t); }
static inline rvm_dual d_exp(rvm_dual x) { double e = exp(x.v); return d_chain(e, e, x.t); }
static inline rvm_dual d_log(rvm_dual x) { return d_chain(log(x.v), 1.0 / x.v, x.t); }
static inline rvm_dual d_sin(rvm_dual x) { return d_chain(sin(x.v), cos(x.v), x.t); }
static inline rvm_dual d_cos(rvm_dual x) { return d_chain(cos(x.v), -sin(x.v), x.t); }
static inline rvm_dual d_tan(rvm_dual x) {
    double c = cos(x.v);
    return d_chain(tan(x.v), 1.0 / (c * c), x.t);
}
static inline rvm_dual d_atan(rvm_dual x) { return d_chain(atan(x.v), 1.0 / (1.0 + x.v * x.v), x.t); }
static inline rvm_dual d_tanh(rvm_dual x) {
    double h = tanh(x.v);
    return d_chain(h, 1.0 - h * h, x.t);
}
static inline double rvm_sigmoid(double x) {
    /* no overflow for large |x| */
    if (x >= 0.0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}
static inline rvm_dual d_sigmoid(rvm_dual x) {
    double s = rvm_sigmoid(x.v);
    return d_chain(s, s * (1.0 - s), x.t);
}
static inline rvm_dual d_sign(rvm_dual x) {       /* derivative 0 (a.e.) */
    return d_const(x.v > 0.0 ? 1.0 : (x.v < 0.0 ? -1.0 : 0.0));
}
static inline rvm_dual d_pow(rvm_dual a, rvm_dual b) {
    double z = pow(a.v, b.v), t = 0.0;
    if (a.t != 0.0) t += (b.v != 0.0 ? b.v * pow(a.v, b.v - 1.0) : 0.0) * a.t;
    if (b.t != 0.0) t += (a.v > 0.0 ? z * log(a.v) : 0.0) * b.t;
    return d_make(z, t);
}
static inline rvm_dual d_hypot(rvm_dual a, rvm_dual b) {
    double h = hypot(a.v, b.v), t = 0.0;
    if (a.t != 0.0) t += a.v / h * a.t;
    if (b.t != 0.0) t += b.v / h * b.t;
    return d_make(h, t);
}
#endif
