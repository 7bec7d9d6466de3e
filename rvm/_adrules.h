/* The differentiation rules, one inline function per rule kind of isa/derivatives.py (KINDS:
   update, neg, swap, rot, move, scope, scale).  The interpreter (rvm/_ad.pxi: ad_rule, ad_inline,
   ad_rot), the loop kernels (rvm/_kernels.pxi: run_reduce's register path) and the native
   code (rvm/native/codegen.py: rule()) all call these, so their derivatives agree bit for
   bit.  Hand-written: the rules follow from isa/derivatives.py.

   The arguments are the duals themselves (tangent t, adjoint a, adjoint-tangent at: the
   derivative of the adjoint along the tangent, for Hessians), by pointer, so that a caller
   passes array cells or locals alike.  A caller whose mode has no tangent passes tan_on = 0
   (the pointers are then not read), and one without adjoints adj_on = 0.  Functions that can
   make a derivative non-finite return how many results are not finite (the interpreter
   counts them; the native code does not). */
#ifndef RVM_ADRULES_H
#define RVM_ADRULES_H
#include <math.h>
#include "_dual.h"

#define RVM_AD static inline __attribute__((always_inline))

/* update y += s*f(x) whose partial is 1 (add, cvt): the one rule of both modes,
   dst -= s*src.  Adjoint sweep: rvm_ad_one(s, ybar, &xbar).  Tangent: rvm_ad_one(-s, x', &y'),
   which is y' += s*x' (the same number: a - (-b) == a + b). */
RVM_AD void rvm_ad_one(double s, double src, double* dst)
{
    *dst -= s * src;
}

/* the same where src != 0 (ad_inline's tangent in the sweep), branch-free: dst - 0.0 else */
RVM_AD void rvm_ad_one_nz(double s, double src, double* dst)
{
    *dst -= (src != 0.0 ? s * src : 0.0);
}

/* update y += s*a*b in the adjoint sweep without tangents (va, vb: the sources' values):
   abar -= s*b*ybar, bbar -= s*a*ybar. */
RVM_AD int rvm_ad_mul(double s, double va, double vb, double yb, double* aa, double* ab)
{
    if (yb == 0.0)
        return 0;
    *aa -= s * vb * yb;
    int bad = !isfinite(*aa);
    *ab -= s * va * yb;
    return bad + !isfinite(*ab);
}

/* the adjoint step of rvm_ad_mul and rvm_ad_update, xbar -= s*d*ybar where ybar != 0,
   branch-free for the batch lanes (rvm/native/lanes.py: one call per lane in a loop the
   compiler vectorizes): a skipped step subtracts 0.0, which changes no number */
RVM_AD void rvm_ad_sub_nz(double s, double d, double yb, double* xb)
{
    *xb -= (yb != 0.0 ? s * d * yb : 0.0);
}

/* The arithmetic of the update rule's parts, on plain doubles: rvm_ad_update below (the
   interpreter's, the native scalar modes') and the native lanes (rvm/native/tangent.py: one
   call per lane in a loop the compiler vectorizes) both compute with these, so a lane's
   numbers are the scalar mode's.  They are branch-free where the rule skips a term: a
   skipped add is an add of -0.0 and a skipped subtraction one of 0.0, which change no
   number (a -0.0 stays -0.0, a NaN stays NaN). */

/* the tangent's sum_k d_k x_k' over the n (1 or 2) sources, each term where x_k' != 0 */
RVM_AD double rvm_tan_sum(int n, double d0, double d1, double t0, double t1)
{
    double v = (n > 0 && t0 != 0.0 ? 0.0 + d0 * t0 : 0.0);
    return v + (n > 1 && t1 != 0.0 ? d1 * t1 : -0.0);
}

/* y' + s*v where v != 0 (else y' itself) */
RVM_AD double rvm_tan_add(double s, double v, double ty)
{
    return ty + (v != 0.0 ? s * v : -0.0);
}

/* the adjoint-tangent rule's condition for source k: some term is not zero */
RVM_AD int rvm_adjt_on(double dkt, double ab, double abt)
{
    return abt != 0.0 || (ab != 0.0 && dkt != 0.0);
}

/* x_k bar' - s * (d_k * ybar' + d_k' * ybar), each product where its factor is not zero,
   when rvm_adjt_on (else x_k bar' itself) */
RVM_AD double rvm_adjt_sub(double s, double dk, double dkt, double ab, double abt, double atk)
{
    return atk - (rvm_adjt_on(dkt, ab, abt)
                  ? s * ((abt != 0.0 ? dk * abt : 0.0) + (ab != 0.0 ? dkt * ab : 0.0)) : 0.0);
}

/* update y += s*f(x0, x1) with the n partials dd (rvm_partials: value d_k, tangent part d_k'):
   tangent y' += s * sum_k d_k x_k'; adjoint sweep x_k bar -= s * d_k * ybar and, with the
   tangent, x_k bar' -= s * (d_k * ybar' + d_k' * ybar).  x0 and x1 may be one cell. */
RVM_AD int rvm_ad_update(double s, int n, const rvm_dual* dd, int tan_on, int adj_on,
                         double* ty, double* t0, double* t1, double* ay, double* a0, double* a1,
                         double* aty, double* at0, double* at1)
{
    double* ax[2] = {a0, a1};
    double* atx[2] = {at0, at1};
    int bad = 0, k;
    if (tan_on) {
        double v = rvm_tan_sum(n, dd[0].v, n > 1 ? dd[1].v : 0.0, *t0, n > 1 ? *t1 : 0.0);
        if (v != 0.0) {
            *ty = rvm_tan_add(s, v, *ty);
            bad += !isfinite(*ty);
        }
    }
    if (adj_on) {
        double ab = *ay, abt = tan_on ? *aty : 0.0;
        for (k = 0; k < n; k++) {
            if (ab != 0.0) {
                *ax[k] -= s * dd[k].v * ab;
                bad += !isfinite(*ax[k]);
            }
            if (tan_on && rvm_adjt_on(dd[k].t, ab, abt)) {
                *atx[k] = rvm_adjt_sub(s, dd[k].v, dd[k].t, ab, abt, *atx[k]);
                bad += !isfinite(*atx[k]);
            }
        }
    }
    return bad;
}

/* scale: an lns update y *= g with g = a^e (mul, div, and y *= lns(x) from a fixed, float or
   int x), e the executed sign; the duals are those of the represented real values.  av is
   the source's value (the factor's base), yv the value of y now (after the step); da: the
   source is differentiable (else ta, aa, ata are not read: the factor is a constant).
   Tangent (either direction): y' = g y' + e yv a'/av.  Adjoint sweep: the executed step is
   the inverse of the forward y_new = y_old h, h = a^-e, y_old = yv: abar += ybar c with
   c = dy_new/da = -e yv h/av, then ybar = h ybar; with tangents, the derivatives of both
   along the tangent (yv' = the tangent of y now, the tangent rule having run first). */
RVM_AD int rvm_ad_scale(double e, double av, int da, double yv, int tan_on, int adj_on,
                        double* ty, double* ta, double* ay, double* aa, double* aty,
                        double* ata)
{
    int bad = 0;
    double g = e > 0 ? av : 1.0 / av, h = e > 0 ? 1.0 / av : av;
    double tav = (tan_on && da) ? *ta : 0.0;
    if (tan_on) {
        *ty = g * *ty + (tav != 0.0 ? e * yv * tav / av : 0.0);
        bad += !isfinite(*ty);
    }
    if (adj_on) {
        double yb = *ay, ybt = tan_on ? *aty : 0.0;
        if (da) {
            double c = -e * yv * h / av;
            if (yb != 0.0) {
                *aa += yb * c;
                bad += !isfinite(*aa);
            }
            if (tan_on && (ybt != 0.0 || yb != 0.0)) {
                double ct = -e * h / av * (*ty - (e + 1.0) * yv * tav / av);
                *ata += ybt * c + yb * ct;
                bad += !isfinite(*ata);
            }
        }
        *ay = h * yb;
        if (tan_on)
            *aty = h * (ybt - e * yb * tav / av);
    }
    return bad;
}

/* neg (y = -y): every dual of the cell changes sign */
RVM_AD void rvm_ad_neg(double* d)
{
    *d = -*d;
}

/* swap (x, y = y, x): the duals are exchanged */
RVM_AD void rvm_ad_swap(double* x, double* y)
{
    double u = *x; *x = *y; *y = u;
}

/* move: push moves a cell's dual onto the stack slot and leaves the constant zero; pop moves
   the slot's dual to the cell (whose own dual, of a zero, is dropped) and clears the slot */
RVM_AD void rvm_ad_push(double* cell, double* slot)
{
    *slot = *cell; *cell = 0.0;
}

RVM_AD void rvm_ad_pop(double* slot, double* cell)
{
    *cell = *slot; *slot = 0.0;
}

/* scope (alloc, free): the cell is a constant zero, so are its duals */
RVM_AD void rvm_ad_scope(double* d)
{
    *d = 0.0;
}

/* rot: the tangent of an executed rotation by phi = s*theta (cs = cos(theta),
   sn = s*sin(theta)) of the cells with values xa, ya now, tangents *tx, *ty before, and the
   angle's tangent tth: t_after = R(phi) t_before + s theta' J v_after, J (x, y) = (-y, x).
   The adjoint is rvm_rot_adjoint below; rvm_rot_adjoint_tangent its tangent part. */
RVM_AD int rvm_rot_tangent(double s, double cs, double sn, double xa, double ya, double tth,
                           double* tx, double* ty)
{
    double txb = *tx, tyb = *ty;
    *tx = cs * txb - sn * tyb - s * tth * ya;
    *ty = sn * txb + cs * tyb + s * tth * xa;
    return !isfinite(*tx + *ty);
}

/* The adjoint of an executed rotation (x, y) <- R(phi)(x, y), phi = s*theta, in the adjoint
   sweep: forward ran v' = R(-phi) v, where v = (xa, ya) are the values now and v' the values
   before; cs = cos(theta), sn = s*sin(theta).  On entry *ax, *ay are the adjoints of the
   rotated cells and *ath that of the angle cell (three distinct cells); on return
   vbar = R(phi) v'bar and thetabar += (dv'/dtheta) . v'bar.  xp, yp (the values before) and
   ax0, ay0 (the adjoints on entry) are returned for the tangent-over-adjoint rule. */
static inline void rvm_rot_adjoint(double s, double cs, double sn, double xa, double ya,
                                   double* ax, double* ay, double* ath,
                                   double* xp, double* yp, double* ax0, double* ay0)
{
    double x0 = cs * xa + sn * ya, y0 = -sn * xa + cs * ya;
    double a = *ax, b = *ay;
    *ath -= s * (-y0 * a + x0 * b);
    *ax = cs * a - sn * b;
    *ay = sn * a + cs * b;
    *xp = x0; *yp = y0; *ax0 = a; *ay0 = b;
}

/* ... and with tangents, the adjoint-tangents: txb, tyb, tth are the tangents before the
   rotation ran forward, xp, yp, ax0, ay0 what rvm_rot_adjoint returned, nax, nay the new
   adjoints. */
RVM_AD int rvm_rot_adjoint_tangent(double s, double cs, double sn, double txb, double tyb,
                                   double tth, double xp, double yp, double ax0, double ay0,
                                   double nax, double nay, double* atx, double* aty,
                                   double* atth)
{
    double a = *atx, b = *aty;
    *atx = cs * a - sn * b - s * tth * nay;
    *aty = sn * a + cs * b + s * tth * nax;
    *atth -= s * (-tyb * ax0 + txb * ay0 - yp * a + xp * b);
    return !isfinite(*atx + *aty + *atth);
}

#undef RVM_AD

#endif
