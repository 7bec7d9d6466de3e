/* Differentiation rules that the interpreter (rvm/_core.pyx) and the native code
   (rvm/native/codegen.py) share: each is written once, here, and both call it, so their
   derivatives agree bit for bit.  Hand-written: the rules follow from isa/derivatives.py. */
#ifndef RVM_ADRULES_H
#define RVM_ADRULES_H

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

#endif
