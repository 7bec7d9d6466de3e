/* Arithmetic kernels of the rvm interpreter on raw 64-bit cell words.
 *
 * Every function here mirrors one function of isa/arith.py (the specification) bit for bit:
 * same rounding (round half to even of the exact 128-bit value), same evaluation order of
 * floating-point expressions (the build uses -ffp-contract=off, so no fused multiply-add), the
 * same libm calls Python's math module makes, and the same classification of failures into
 * division by zero / domain / range.  tests/test_core_ops.py checks the agreement.
 *
 * Kernels that can fail return an AK_* code and write their result through a pointer only on
 * success, so the interpreter can trap before it changes any cell.
 */
#ifndef RVM_ARITH_H
#define RVM_ARITH_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef int64_t rvm_i64;
typedef uint64_t rvm_u64;
typedef __int128 rvm_i128;
typedef unsigned __int128 rvm_u128;

enum { AK_OK = 0, AK_DIV0 = 1, AK_DOMAIN = 2, AK_RANGE = 3 };

/* branch hint for the interpreter's operand decoding (globals and locals are the common case) */
#define RVM_LIKELY(x) __builtin_expect(!!(x), 1)

/* number types TY_*, comparison codes RC_* and function ids RF_*, RF2_*: generated from isa/ */
#include "_abi.h"

#define RVM_INT64_MIN ((rvm_i64)0x8000000000000000ULL)
#define RVM_LNS_ZERO RVM_INT64_MIN
#define RVM_LNS_LOG_MAX ((rvm_i64)0x3FFFFFFFFFFFFFFFLL)
#define RVM_TWO63 9223372036854775808.0
#define RVM_PI 3.141592653589793115997963468544185161590576171875 /* == math.pi */

/* ---- words and floats: cells hold floats by bit pattern ------------------------------- */

static inline double rvm_w2f(rvm_i64 w) { double d; memcpy(&d, &w, sizeof d); return d; }
static inline rvm_i64 rvm_f2w(double d) { rvm_i64 w; memcpy(&w, &d, sizeof w); return w; }

/* ---- rounding ---------------------------------------------------------------------------- */

/* n / 2**F rounded half to even (arith.rne_shift), wrapped to 64 bits; |n| < 2**126. */
static inline rvm_i64 rvm_rne_shift(rvm_i128 n, int F)
{
    if (F == 0)
        return (rvm_i64)(rvm_u64)n;
    int neg = n < 0;
    rvm_u128 m = neg ? -(rvm_u128)n : (rvm_u128)n;
    rvm_u128 q = m >> F, r = m & ((((rvm_u128)1) << F) - 1), half = ((rvm_u128)1) << (F - 1);
    if (r > half || (r == half && (q & 1)))
        q++;
    return (rvm_i64)(rvm_u64)(neg ? -q : q);
}

/* arith.real_to_int: round half to even to an int64; range trap if not finite or too big. */
static inline int rvm_real_to_int(double x, rvm_i64 *out)
{
    if (!isfinite(x))
        return AK_RANGE;
    double r = nearbyint(x);
    if (!(r >= -RVM_TWO63 && r < RVM_TWO63))
        return AK_RANGE;
    *out = (rvm_i64)r;
    return AK_OK;
}

/* ---- fixed point ------------------------------------------------------------------------- */

static inline double rvm_fixed_to_real(rvm_i64 w, int F) { return ldexp((double)w, -F); }

static inline int rvm_fixed_from_real(double x, int F, rvm_i64 *out)
{
    return rvm_real_to_int(ldexp(x, F), out);
}

/* (a*b) >> F rounded half to even, wrapped: the product term of fixed `y += a*b`. */
static inline rvm_i64 rvm_fixed_mul(rvm_i64 a, rvm_i64 b, int F)
{
    return rvm_rne_shift((rvm_i128)a * (rvm_i128)b, F);
}

/* (a << F) / b rounded half to even, wrapped. */
static inline int rvm_fixed_div(rvm_i64 a, rvm_i64 b, int F, rvm_i64 *out)
{
    if (b == 0)
        return AK_DIV0;
    rvm_i128 n = (rvm_i128)a * (((rvm_i128)1) << F);
    int neg = (n < 0) != (b < 0);
    rvm_u128 m = n < 0 ? -(rvm_u128)n : (rvm_u128)n;
    rvm_u128 d = b < 0 ? (rvm_u128)(-(rvm_i128)b) : (rvm_u128)b;
    rvm_u128 q = m / d, r = m - q * d;
    if (2 * r > d || (2 * r == d && (q & 1)))
        q++;
    *out = (rvm_i64)(rvm_u64)(neg ? -q : q);
    return AK_OK;
}

/* floor division, wrapped (INT64_MIN / -1 == INT64_MIN) */
static inline int rvm_int_div(rvm_i64 a, rvm_i64 b, rvm_i64 *out)
{
    if (b == 0)
        return AK_DIV0;
    if (b == -1) {
        *out = (rvm_i64)(0 - (rvm_u64)a);
        return AK_OK;
    }
    rvm_i64 q = a / b, r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        q--;
    *out = q;
    return AK_OK;
}

/* arith.int_fn2: the int functions of y += f(a, b), exact on the words (min and max also
 * serve fixed cells: their order is the words' order) */
static inline int rvm_int_fn2(int fn, rvm_i64 a, rvm_i64 b, rvm_i64 *out)
{
    rvm_i64 r;
    switch (fn) {
    case RF2_MIN: *out = b < a ? b : a; return AK_OK;
    case RF2_MAX: *out = b > a ? b : a; return AK_OK;
    case RF2_MOD:                       /* floor modulus: the sign of b */
        if (b == 0)
            return AK_DIV0;
        if (b == -1) {                  /* INT64_MIN % -1 would trap in C */
            *out = 0;
            return AK_OK;
        }
        r = a % b;
        if (r != 0 && ((r < 0) != (b < 0)))
            r += b;
        *out = r;
        return AK_OK;
    case RF2_SHL:
        if (b < 0)
            return AK_DOMAIN;
        *out = b >= 64 ? 0 : (rvm_i64)((rvm_u64)a << b);
        return AK_OK;
    case RF2_SHR:                       /* arithmetic: floor(a / 2**b) */
        if (b < 0)
            return AK_DOMAIN;
        *out = a >> (b > 63 ? 63 : b);
        return AK_OK;
    case RF2_BITAND: *out = a & b; return AK_OK;
    case RF2_BITOR: *out = a | b; return AK_OK;
    case RF2_BITXOR: *out = a ^ b; return AK_OK;
    default:
        return AK_DOMAIN;
    }
}

/* floor of the square root of a >= 0 */
static inline rvm_i64 rvm_isqrt(rvm_i64 a)
{
    rvm_u64 u = (rvm_u64)a, r = (rvm_u64)sqrt((double)a);
    while (r * r > u)
        r--;
    while ((r + 1) * (r + 1) <= u)
        r++;
    return (rvm_i64)r;
}

/* ---- log numbers: word = (L << 1) | sign, INT64_MIN is zero ------------------------------ */

static inline int rvm_lns_make(rvm_i64 L, rvm_i64 sign, rvm_i64 *out)
{
    if (L < -RVM_LNS_LOG_MAX || L > RVM_LNS_LOG_MAX)
        return AK_RANGE;
    *out = (rvm_i64)(((rvm_u64)L << 1) | (rvm_u64)sign);
    return AK_OK;
}

static inline int rvm_lns_from_real(double x, int F, rvm_i64 *out)
{
    rvm_i64 L;
    int err;
    if (x == 0.0) {
        *out = RVM_LNS_ZERO;
        return AK_OK;
    }
    if (!isfinite(x))
        return AK_RANGE;
    if ((err = rvm_real_to_int(ldexp(log2(fabs(x)), F), &L)))
        return err;
    return rvm_lns_make(L, x < 0 ? 1 : 0, out);
}

static inline double rvm_lns_to_real(rvm_i64 w, int F)
{
    if (w == RVM_LNS_ZERO)
        return 0.0;
    double m = exp2(ldexp((double)(w >> 1), -F));   /* overflows to inf like arith.py */
    return (w & 1) ? -m : m;
}

/* y * a (sign = +1) or y / a (sign = -1), exact on the logs */
static inline int rvm_lns_mul(rvm_i64 y, rvm_i64 a, int sign, rvm_i64 *out)
{
    if (a == RVM_LNS_ZERO)
        return AK_DOMAIN;
    if (y == RVM_LNS_ZERO) {
        *out = y;
        return AK_OK;
    }
    rvm_i64 La = a >> 1;
    return rvm_lns_make((y >> 1) + (sign > 0 ? La : -La), (y ^ a) & 1, out);
}

/* a signed integer with the order of the lns value */
static inline rvm_i64 rvm_lns_key(rvm_i64 w)
{
    if (w == RVM_LNS_ZERO)
        return 0;
    rvm_i64 k = ((rvm_i64)1 << 62) + (w >> 1);
    return (w & 1) ? -k : k;
}

/* ---- functions: values as Python's math module computes them ----------------------------- */

/* CPython's math.atan2 (m_atan2): C99 special values handled explicitly. */
static inline double rvm_py_atan2(double y, double x)
{
    if (isnan(x) || isnan(y))
        return NAN;
    if (isinf(y)) {
        if (isinf(x))
            return copysign(copysign(1., x) == 1. ? 0.25 * RVM_PI : 0.75 * RVM_PI, y);
        return copysign(0.5 * RVM_PI, y);
    }
    if (isinf(x) || y == 0.)
        return copysign(copysign(1., x) == 1. ? 0. : RVM_PI, y);
    return atan2(y, x);
}

/* CPython's math.hypot for two coordinates (vector_norm: scaled, compensated, corrected);
 * glibc's hypot differs from it in the last bit now and then. */
static inline double rvm_py_hypot(double a, double b)
{
    const double T27 = 134217729.0;   /* 2**27 + 1: Veltkamp split */
    double vec[2] = {fabs(a), fabs(b)};
    double max = 0.0;
    double x, t, hi, lo, h, scale, oldcsum, csum = 1.0, frac1 = 0.0, frac2 = 0.0, frac3 = 0.0;
    int max_e, i, found_nan = 0;
    for (i = 0; i < 2; i++) {   /* a NaN never becomes max, so hypot(inf, nan) is inf */
        found_nan |= isnan(vec[i]);
        if (vec[i] > max)
            max = vec[i];
    }
    if (isinf(max))
        return max;
    if (found_nan)
        return NAN;
    if (max == 0.0)
        return max;
    frexp(max, &max_e);
    if (max_e >= -1023) {
        scale = ldexp(1.0, -max_e);
        for (i = 0; i < 2; i++) {
            x = vec[i] * scale;
            t = x * T27;
            hi = t - (t - x);
            lo = x - hi;
            x = hi * hi;
            oldcsum = csum;
            csum += x;
            frac1 += (oldcsum - csum) + x;
            x = 2.0 * hi * lo;
            oldcsum = csum;
            csum += x;
            frac2 += (oldcsum - csum) + x;
            frac3 += lo * lo;
        }
        h = sqrt(csum - 1.0 + (frac1 + frac2 + frac3));
        x = h;
        t = x * T27;
        hi = t - (t - x);
        lo = x - hi;
        x = -hi * hi;
        oldcsum = csum;
        csum += x;
        frac1 += (oldcsum - csum) + x;
        x = -2.0 * hi * lo;
        oldcsum = csum;
        csum += x;
        frac2 += (oldcsum - csum) + x;
        x = -lo * lo;
        oldcsum = csum;
        csum += x;
        frac3 += (oldcsum - csum) + x;
        x = csum - 1.0 + (frac1 + frac2 + frac3);
        return (h + x / (2.0 * h)) / scale;
    }
    for (i = 0; i < 2; i++) {   /* subnormal max: divide by it instead of scaling */
        x = vec[i] / max;
        x = x * x;
        oldcsum = csum;
        csum += x;
        frac1 += (oldcsum - csum) + x;
    }
    return max * sqrt(csum - 1.0 + frac1);
}

/* CPython's math.pow: IEEE specials handled explicitly, finite**finite by libm; returns the
 * failure kind Python's exception maps to in arith._call. */
static inline int rvm_py_pow(double x, double y, double *out)
{
    double r;
    if (!isfinite(x) || !isfinite(y)) {
        if (isnan(x))
            r = y == 0. ? 1. : x;
        else if (isnan(y))
            r = x == 1. ? 1. : y;
        else if (isinf(x)) {
            int odd_y = isfinite(y) && fmod(fabs(y), 2.0) == 1.0;
            if (y > 0.)
                r = odd_y ? x : fabs(x);
            else if (y == 0.)
                r = 1.;
            else
                r = odd_y ? copysign(0., x) : 0.;
        } else {   /* y infinite */
            if (fabs(x) == 1.0)
                r = 1.;
            else if (y > 0. && fabs(x) > 1.0)
                r = y;
            else if (y < 0. && fabs(x) < 1.0)
                r = -y;
            else
                r = 0.;
        }
    } else {
        r = pow(x, y);
        if (isnan(r))
            return AK_DOMAIN;
        if (isinf(r))
            return x == 0. ? AK_DOMAIN : AK_RANGE;   /* 0**negative is a singularity */
    }
    *out = r;
    return AK_OK;
}

/* arith._call's final check: a value that is not finite cannot be added reversibly */
static inline int rvm_finite_or_trap(double r, double *out)
{
    if (!isfinite(r))
        return isnan(r) ? AK_DOMAIN : AK_RANGE;
    *out = r;
    return AK_OK;
}

/* f(x) for a unary function, with Python's errors: a NaN from a non-NaN argument is a domain
 * error; an infinity from a finite argument is an overflow (range) for exp and a singularity
 * (domain) for the others (math_1's can_overflow flag). */
static inline int rvm_fn1_real(int fn, double x, double *out)
{
    double r;
    int can_overflow = 0;
    switch (fn) {
    case RF_SQRT: r = sqrt(x); break;
    case RF_EXP: r = exp(x); can_overflow = 1; break;
    case RF_LOG: r = log(x); break;
    case RF_SIN: r = sin(x); break;
    case RF_COS: r = cos(x); break;
    case RF_TAN: r = tan(x); break;
    case RF_ATAN: r = atan(x); break;
    case RF_TANH: r = tanh(x); break;
    case RF_ABS:
        return rvm_finite_or_trap(fabs(x), out);
    case RF_SIGMOID: {
        double mx = -x, e = exp(mx);
        if (isinf(e) && isfinite(mx))
            return AK_RANGE;
        return rvm_finite_or_trap(1.0 / (1.0 + e), out);
    }
    default:
        return AK_DOMAIN;
    }
    if (isnan(r) && !isnan(x))
        return AK_DOMAIN;
    if (isinf(r) && isfinite(x))
        return can_overflow ? AK_RANGE : AK_DOMAIN;
    return rvm_finite_or_trap(r, out);
}

static inline int rvm_fn2_real(int fn, double a, double b, double *out)
{
    double r;
    int err;
    switch (fn) {
    case RF2_POW:
        if ((err = rvm_py_pow(a, b, &r)))
            return err;
        break;
    case RF2_ATAN2: r = rvm_py_atan2(a, b); break;
    case RF2_HYPOT: r = rvm_py_hypot(a, b); break;
    case RF2_MIN: r = b < a ? b : a; break;
    case RF2_MAX: r = b > a ? b : a; break;
    default:
        return AK_DOMAIN;
    }
    return rvm_finite_or_trap(r, out);
}

/* arith.fn1_value: the word that `y += f(x)` adds for a cell of type t */
static inline int rvm_fn1_value(int fn, int t, rvm_i64 x, int F, rvm_i64 *out)
{
    double r;
    int err;
    if (t == TY_INT) {
        if (fn == RF_ABS) {
            *out = x < 0 ? (rvm_i64)(0 - (rvm_u64)x) : x;
            return AK_OK;
        }
        if (fn == RF_SQRT) {
            if (x < 0)
                return AK_DOMAIN;
            *out = rvm_isqrt(x);
            return AK_OK;
        }
        if (fn == RF_WRAP32) {
            *out = (rvm_i64)(int32_t)(uint32_t)(rvm_u64)x;
            return AK_OK;
        }
        return AK_DOMAIN;
    }
    if (t == TY_FIXED) {
        if ((err = rvm_fn1_real(fn, rvm_fixed_to_real(x, F), &r)))
            return err;
        return rvm_fixed_from_real(r, F, out);
    }
    if ((err = rvm_fn1_real(fn, rvm_w2f(x), &r)))
        return err;
    *out = rvm_f2w(r);
    return AK_OK;
}

static inline int rvm_fn2_value(int fn, int t, rvm_i64 a, rvm_i64 b, int F, rvm_i64 *out)
{
    double r;
    int err;
    if (t == TY_INT || (t == TY_FIXED && (fn == RF2_MIN || fn == RF2_MAX)))
        return rvm_int_fn2(fn, a, b, out);
    if (t == TY_FIXED) {
        if ((err = rvm_fn2_real(fn, rvm_fixed_to_real(a, F), rvm_fixed_to_real(b, F), &r)))
            return err;
        return rvm_fixed_from_real(r, F, out);
    }
    if ((err = rvm_fn2_real(fn, rvm_w2f(a), rvm_w2f(b), &r)))
        return err;
    *out = rvm_f2w(r);
    return AK_OK;
}

/* ---- float updates ------------------------------------------------------------------------ */

/* y + sign*d on floats (x - d is x + (-d) in IEEE); a result that is not finite traps */
static inline int rvm_float_add_d(double y, double d, int sign, double *out)
{
    double r = sign > 0 ? y + d : y - d;
    if (!isfinite(r))
        return AK_RANGE;
    *out = r;
    return AK_OK;
}

/* the same on a cell's word */
static inline int rvm_float_add(rvm_i64 y, double d, int sign, rvm_i64 *out)
{
    double r;
    int err = rvm_float_add_d(rvm_w2f(y), d, sign, &r);
    if (err == AK_OK)
        *out = rvm_f2w(r);
    return err;
}

/* y + sign*(a + b) (dif = 0) or y + sign*(a - b) (dif = 1) on float words: the inner sum is
 * rounded once and must be finite (arith.execute's addsum/adddif) */
static inline int rvm_float_sum(rvm_i64 y, rvm_i64 a, rvm_i64 b, int dif, int sign,
                                rvm_i64 *out)
{
    double inner = dif ? rvm_w2f(a) - rvm_w2f(b) : rvm_w2f(a) + rvm_w2f(b);
    if (!isfinite(inner))
        return AK_RANGE;
    return rvm_float_add(y, inner, sign, out);
}

/* ---- conversions -------------------------------------------------------------------------- */

static inline double rvm_to_real(int t, rvm_i64 w, int F)
{
    switch (t) {
    case TY_INT: return (double)w;
    case TY_FIXED: return rvm_fixed_to_real(w, F);
    case TY_LNS: return rvm_lns_to_real(w, F);
    default: return rvm_w2f(w);
    }
}

/* arith.convert: the word `y += dst(x)` adds (for lns: the factor `y *= lns(x)` multiplies by) */
static inline int rvm_convert(int dst, int src, rvm_i64 x, int F, rvm_i64 *out)
{
    double v;
    if (dst == TY_FIXED && src == TY_INT) {
        *out = (rvm_i64)((rvm_u64)x << F);
        return AK_OK;
    }
    if (dst == TY_INT && src == TY_FIXED) {
        *out = rvm_rne_shift((rvm_i128)x, F);
        return AK_OK;
    }
    v = rvm_to_real(src, x, F);
    switch (dst) {
    case TY_INT: return rvm_real_to_int(v, out);
    case TY_FIXED: return rvm_fixed_from_real(v, F, out);
    case TY_FLOAT:
        if (!isfinite(v))
            return AK_RANGE;
        *out = rvm_f2w(v);
        return AK_OK;
    default:
        if (v == 0.0)
            return AK_DOMAIN;
        return rvm_lns_from_real(v, F, out);
    }
}

/* ---- rotations ---------------------------------------------------------------------------- */

/* arith.rot_fixed: reduce the angle by k*pi (odd k negates both cells), then three lifting
 * shears x -= t*y; y += s*x; x -= t*y with t = tan(phi/2), s = sin(phi); the inverse runs the
 * shears backward, then undoes the flip. */
static inline int rvm_rot_fixed(rvm_i64 *px, rvm_i64 *py, rvm_i64 theta, int F, int inverse)
{
    double th = rvm_fixed_to_real(theta, F);
    double k = nearbyint(th / RVM_PI);
    double phi = th - k * RVM_PI;
    int flip = (int)(((rvm_i64)k) & 1);
    rvm_i64 t, s, x = *px, y = *py;
    int err;
    if ((err = rvm_fixed_from_real(tan(phi / 2.0), F, &t)))
        return err;
    if ((err = rvm_fixed_from_real(sin(phi), F, &s)))
        return err;
    if (!inverse) {
        if (flip) {
            x = (rvm_i64)(0 - (rvm_u64)x);
            y = (rvm_i64)(0 - (rvm_u64)y);
        }
        x = (rvm_i64)((rvm_u64)x - (rvm_u64)rvm_fixed_mul(t, y, F));
        y = (rvm_i64)((rvm_u64)y + (rvm_u64)rvm_fixed_mul(s, x, F));
        x = (rvm_i64)((rvm_u64)x - (rvm_u64)rvm_fixed_mul(t, y, F));
    } else {
        x = (rvm_i64)((rvm_u64)x + (rvm_u64)rvm_fixed_mul(t, y, F));
        y = (rvm_i64)((rvm_u64)y - (rvm_u64)rvm_fixed_mul(s, x, F));
        x = (rvm_i64)((rvm_u64)x + (rvm_u64)rvm_fixed_mul(t, y, F));
        if (flip) {
            x = (rvm_i64)(0 - (rvm_u64)x);
            y = (rvm_i64)(0 - (rvm_u64)y);
        }
    }
    *px = x;
    *py = y;
    return AK_OK;
}

/* arith.rot_float; cos/sin of an infinite angle is a domain error (math.cos raises there) */
/* cs (may be NULL) receives cos and sin of theta, which the AD rule of the same rotation
 * reuses instead of computing them again. */
static inline int rvm_rot_float(rvm_i64 *px, rvm_i64 *py, rvm_i64 theta, int inverse,
                                double *cs)
{
    double th = rvm_w2f(theta), c = cos(th), s = sin(th);
    if ((isnan(c) || isnan(s)) && !isnan(th))
        return AK_DOMAIN;
    if (cs) {
        cs[0] = c;
        cs[1] = s;
    }
    if (inverse)
        s = -s;
    double xf = rvm_w2f(*px), yf = rvm_w2f(*py);
    double rx = c * xf - s * yf, ry = s * xf + c * yf;
    if (!isfinite(rx) || !isfinite(ry))
        return AK_RANGE;
    *px = rvm_f2w(rx);
    *py = rvm_f2w(ry);
    return AK_OK;
}

/* ---- comparisons -------------------------------------------------------------------------- */

/* The relation of a to b is rel = 0 (<), 1 (==), 2 (>) or 3 (unordered: a float NaN); bit rel
 * of RVM_CMP_MASK[cmp] is the condition's value.  Branch-free: no second dispatch on cmp in the
 * jmp/join hot path. */
static const unsigned char RVM_CMP_MASK[8] = {
    0xF,   /* always */
    0x2,   /* == */
    0xD,   /* != (true when unordered) */
    0x1,   /* <  */
    0x3,   /* <= */
    0x4,   /* >  */
    0x6,   /* >= */
    0x0,
};

/* always inlined: the dispatch loop runs it at every conditional jmp and join, and once
   vm_run had the generated cases gcc stopped inlining it there (a call per check) */
static inline __attribute__((always_inline)) int rvm_compare(rvm_i64 cc, rvm_i64 a, rvm_i64 b)
{
    int t = (int)((cc >> 4) & 3), rel;
    if (t == TY_FLOAT) {
        double x = rvm_w2f(a), y = rvm_w2f(b);
        rel = (x != x || y != y) ? 3 : (x > y) + (x >= y);
    } else {
        if (t == TY_LNS) {
            a = rvm_lns_key(a);
            b = rvm_lns_key(b);
        }
        rel = (a > b) + (a >= b);
    }
    return (RVM_CMP_MASK[cc & 7] >> rel) & 1;
}

#endif /* RVM_ARITH_H */
