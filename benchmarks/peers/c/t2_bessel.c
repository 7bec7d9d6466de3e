/* T2, Bessel J_nu(z) by the series, with a hand-written adjoint (first derivative in z) and
 * a hand-derived second derivative.  The recurrence is the one of programs/besselj.rasm:
 *   h = z/2;  a_0 = h^nu / nu!;  a_k = -a_{k-1} h^2 / (k (k+nu));  J = sum_{k=0..K} a_k.
 * Entry points repeat `reps` times so one ctypes call times many evaluations. */
#include <math.h>

#define KMAX 256

static double fact(int n) { double f = 1.0; for (int i = 2; i <= n; i++) f *= i; return f; }

static double forward(double z, int nu, int K, double *a) {
    double h = 0.5 * z, h2 = h * h;
    a[0] = pow(h, nu) / fact(nu);
    double s = a[0];
    for (int k = 1; k <= K; k++) {
        a[k] = -a[k - 1] * h2 / (k * (double)(k + nu));
        s += a[k];
    }
    return s;
}

double t2_forward(double z, int nu, int K, long reps) {
    double a[KMAX + 1], s = 0.0;
    for (long r = 0; r < reps; r++) {
        s = forward(z, nu, K, a);
        __asm__ volatile("" : "+x"(s) : : "memory");
    }
    return s;
}

/* dJ/dz: forward keeping the terms, then the reverse sweep of the recurrence. */
double t2_grad(double z, int nu, int K, long reps) {
    double a[KMAX + 1], gz = 0.0;
    for (long r = 0; r < reps; r++) {
        __asm__ volatile("" : "+x"(z) : : "memory");
        double h = 0.5 * z, h2 = h * h;
        forward(z, nu, K, a);
        double gs = 1.0, ga = 0.0, gh2 = 0.0;
        for (int k = K; k >= 1; k--) {
            ga += gs;                                 /* s += a_k */
            double c = -1.0 / (k * (double)(k + nu)); /* a_k = c a_{k-1} h2 */
            gh2 += ga * c * a[k - 1];
            ga = ga * c * h2;
        }
        ga += gs;
        double gh = ga * (nu > 0 ? nu * pow(h, nu - 1) / fact(nu) : 0.0) + gh2 * 2.0 * h;
        gz = 0.5 * gh;
    }
    return gz;
}

/* d2J/dz2: a_k is c_k z^(2k+nu), so a_k'' = a_k (2k+nu)(2k+nu-1) / z^2. */
double t2_grad2(double z, int nu, int K, long reps) {
    double a[KMAX + 1], d2 = 0.0;
    for (long r = 0; r < reps; r++) {
        __asm__ volatile("" : "+x"(z) : : "memory");
        forward(z, nu, K, a);
        double s = 0.0;
        for (int k = 0; k <= K; k++) {
            double p = 2.0 * k + nu;
            s += a[k] * p * (p - 1.0);
        }
        d2 = s / (z * z);
    }
    return d2;
}
