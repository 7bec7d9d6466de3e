/* T5, the Petersen graph embedding loss (NiLang paper, section IV E), with a hand-written
 * adjoint.  x: nv vertices x k coordinates, row-major (x[v*k + r]).  Pairs (a[i], b[i]):
 * the first n1 are the edges, the other n2 the non-edges.  With D = distances of a set,
 * m = mean(D), v = sample variance of D (computed as (mean(D^2) - m^2) n/(n-1)):
 *     loss = v1 + v2   (as programs/petersen.rasm: no exp(relu(m1 - m2 + 0.1)) term).
 * Entry points repeat `reps` times. */
#include <math.h>

#define MAXP 64

static double loss_of(int k, int n1, int n2, const int *a, const int *b, const double *x,
                      double *d2, double *dd, double *m1o, double *m2o) {
    double sd[2] = {0, 0}, sq[2] = {0, 0};
    for (int i = 0; i < n1 + n2; i++) {
        double s = 0.0;
        for (int r = 0; r < k; r++) {
            double t = x[a[i] * k + r] - x[b[i] * k + r];
            s += t * t;
        }
        d2[i] = s;
        dd[i] = sqrt(s);
        int set = i >= n1;
        sd[set] += dd[i];
        sq[set] += s;
    }
    double m1 = sd[0] / n1, m2 = sd[1] / n2;
    double v1 = (sq[0] / n1 - m1 * m1) * n1 / (n1 - 1.0);
    double v2 = (sq[1] / n2 - m2 * m2) * n2 / (n2 - 1.0);
    *m1o = m1;
    *m2o = m2;
    return v1 + v2;
}

double t5_forward(int k, int n1, int n2, const int *a, const int *b, const double *x,
                  long reps) {
    double d2[MAXP], dd[MAXP], m1, m2, l = 0.0;
    for (long r = 0; r < reps; r++) {
        l = loss_of(k, n1, n2, a, b, x, d2, dd, &m1, &m2);
        __asm__ volatile("" : "+x"(l) : : "memory");
    }
    return l;
}

double t5_grad(int k, int nv, int n1, int n2, const int *a, const int *b, const double *x,
               double *gx, long reps) {
    double d2[MAXP], dd[MAXP], m1, m2, l = 0.0;
    for (long rep = 0; rep < reps; rep++) {
        l = loss_of(k, n1, n2, a, b, x, d2, dd, &m1, &m2);
        double gm[2] = {-2.0 * m1 * n1 / (n1 - 1.0), -2.0 * m2 * n2 / (n2 - 1.0)};
        double gq[2] = {1.0 / (n1 - 1.0), 1.0 / (n2 - 1.0)};     /* d v / d (D_i^2) */
        double nn[2] = {(double)n1, (double)n2};
        for (int i = 0; i < nv * k; i++) gx[i] = 0.0;
        for (int i = 0; i < n1 + n2; i++) {
            int set = i >= n1;
            double gd2 = gq[set] + gm[set] / nn[set] * 0.5 / dd[i];
            for (int r = 0; r < k; r++) {
                double t = 2.0 * gd2 * (x[a[i] * k + r] - x[b[i] * k + r]);
                gx[a[i] * k + r] += t;
                gx[b[i] * k + r] -= t;
            }
        }
        __asm__ volatile("" : : "r"(gx) : "memory");
    }
    return l;
}

/* T5's full Hessian, closed form.  Per set S (n pairs, u_i = x_a - x_b, d_i = |u_i|,
 * P = sum d_i):  v_S = sum d_i^2 / (n-1) - P^2 / (n (n-1)), so
 *   H_S = sum_i [ (2/(n-1)) I - (2P/(n(n-1))) (I/d_i - u_i u_i^T / d_i^3) ] on the blocks
 *         (a,a), (b,b) (minus on (a,b), (b,a))  -  (2/(n(n-1))) gP gP^T,
 * with gP = dP/dx.  H is (nv k) x (nv k), row-major. */
double t5_hessian(int k, int nv, int n1, int n2, const int *a, const int *b, const double *x,
                  double *H, long reps) {
    int n = nv * k;
    double gp[256], l = 0.0;
    for (long rep = 0; rep < reps; rep++) {
        for (int i = 0; i < n * n; i++) H[i] = 0.0;
        for (int set = 0; set < 2; set++) {
            int lo = set ? n1 : 0, hi = set ? n1 + n2 : n1;
            double nn = hi - lo, P = 0.0;
            for (int i = 0; i < n; i++) gp[i] = 0.0;
            for (int i = lo; i < hi; i++) {
                double s = 0.0;
                for (int r = 0; r < k; r++) {
                    double t = x[a[i] * k + r] - x[b[i] * k + r];
                    s += t * t;
                }
                double d = sqrt(s);
                P += d;
                for (int r = 0; r < k; r++) {
                    double t = (x[a[i] * k + r] - x[b[i] * k + r]) / d;
                    gp[a[i] * k + r] += t;
                    gp[b[i] * k + r] -= t;
                }
            }
            double cq = 2.0 / (nn - 1.0), cp = 2.0 * P / (nn * (nn - 1.0));
            for (int i = lo; i < hi; i++) {
                double u[16], s = 0.0;
                for (int r = 0; r < k; r++) {
                    u[r] = x[a[i] * k + r] - x[b[i] * k + r];
                    s += u[r] * u[r];
                }
                double d = sqrt(s), d3 = d * s;
                for (int r = 0; r < k; r++)
                    for (int q = 0; q < k; q++) {
                        double m = (r == q ? cq - cp / d : 0.0) + cp * u[r] * u[q] / d3;
                        H[(a[i] * k + r) * n + a[i] * k + q] += m;
                        H[(b[i] * k + r) * n + b[i] * k + q] += m;
                        H[(a[i] * k + r) * n + b[i] * k + q] -= m;
                        H[(b[i] * k + r) * n + a[i] * k + q] -= m;
                    }
            }
            double co = 2.0 / (nn * (nn - 1.0));
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) H[i * n + j] -= co * gp[i] * gp[j];
        }
        __asm__ volatile("" : : "r"(H) : "memory");
        l = H[0];
    }
    return l;
}

/* T6: t5_grad at each of `npts` points (X and G are npts x (nv k), row-major), one after the
 * other on one thread. */
void t6_grad_points(int k, int nv, int n1, int n2, const int *a, const int *b,
                    const double *X, double *G, long npts, long reps) {
    int n = nv * k;
    for (long rep = 0; rep < reps; rep++)
        for (long p = 0; p < npts; p++)
            t5_grad(k, nv, n1, n2, a, b, X + p * n, G + p * n, 1);
}
