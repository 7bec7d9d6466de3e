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
