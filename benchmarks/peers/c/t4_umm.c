/* T4, unitary matrix multiplication by Givens rotations, loss = sum(x), with a hand-written
 * adjoint.  Rotation r acts on the pair (k[r], l[r]) with angle theta[r]:
 *     (x_k, x_l) <- (c x_k - s x_l,  s x_k + c x_l),   c = cos theta, s = sin theta.
 * The reverse sweep uncomputes x with the inverse rotation (no tape, like rvm) and reuses the
 * cos/sin of the forward sweep.  Entry points repeat `reps` times. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void keep(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

double t4_forward(int n, long m, const int *k, const int *l, const double *theta,
                  const double *x0, double *x, long reps) {
    double loss = 0.0;
    for (long r = 0; r < reps; r++) {
        memcpy(x, x0, n * sizeof(double));
        keep(x);
        for (long i = 0; i < m; i++) {
            double c = cos(theta[i]), s = sin(theta[i]);
            double a = x[k[i]], b = x[l[i]];
            x[k[i]] = c * a - s * b;
            x[l[i]] = s * a + c * b;
        }
        loss = 0.0;
        for (int i = 0; i < n; i++) loss += x[i];
        keep(x);
    }
    return loss;
}

/* gx, gtheta: gradients of sum(x_out) wrt x0 and theta.  cs: 2m doubles of scratch. */
double t4_grad(int n, long m, const int *k, const int *l, const double *theta,
               const double *x0, double *x, double *gx, double *gtheta, double *cs, long reps) {
    double loss = 0.0;
    for (long r = 0; r < reps; r++) {
        memcpy(x, x0, n * sizeof(double));
        keep(x);
        for (long i = 0; i < m; i++) {
            double c = cos(theta[i]), s = sin(theta[i]);
            cs[2 * i] = c;
            cs[2 * i + 1] = s;
            double a = x[k[i]], b = x[l[i]];
            x[k[i]] = c * a - s * b;
            x[l[i]] = s * a + c * b;
        }
        loss = 0.0;
        for (int i = 0; i < n; i++) {
            loss += x[i];
            gx[i] = 1.0;
        }
        for (long i = m - 1; i >= 0; i--) {
            double c = cs[2 * i], s = cs[2 * i + 1];
            double a = x[k[i]], b = x[l[i]];          /* outputs of rotation i */
            double ga = gx[k[i]], gb = gx[l[i]];
            gtheta[i] = gb * a - ga * b;
            gx[k[i]] = c * ga + s * gb;
            gx[l[i]] = -s * ga + c * gb;
            x[k[i]] = c * a + s * b;                   /* uncompute: the inverse rotation */
            x[l[i]] = -s * a + c * b;
        }
        keep(gx);
        keep(gtheta);
    }
    return loss;
}
