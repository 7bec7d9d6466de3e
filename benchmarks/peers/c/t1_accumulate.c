/* T1, the accumulate loop `for i in 1..n: x += one`, loss = x, with a hand-written adjoint.
 * The physical-limit reference of benchmarks/peers.py, compiled with gcc -O2 at run time.
 * Each entry point repeats its work `reps` times, so one ctypes call times many runs.
 * The empty asm statements keep one real add per iteration (gcc may not fold the loop into
 * x + n*one, which would not be the same computation). */

static inline void keep(double *v) { __asm__ volatile("" : "+x"(*v)); }

double t1_forward(long n, double x, double one, long reps) {
    double xx = 0.0;
    for (long r = 0; r < reps; r++) {
        xx = x;
        for (long i = 0; i < n; i++) {
            xx += one;
            keep(&xx);
        }
    }
    return xx;
}

/* Gradient of loss = x_n wrt (x_0, one): forward sweep for the loss, then the reverse sweep
 * of `x += one` (adjoint: g_one += g_x; g_x unchanged). */
double t1_grad(long n, double x, double one, double *gx, double *gone, long reps) {
    double loss = 0.0;
    for (long r = 0; r < reps; r++) {
        double xx = x;
        for (long i = 0; i < n; i++) {
            xx += one;
            keep(&xx);
        }
        loss = xx;
        double g_x = 1.0, g_one = 0.0;
        for (long i = 0; i < n; i++) {
            g_one += g_x;
            keep(&g_one);
        }
        *gx = g_x;
        *gone = g_one;
    }
    return loss;
}
