/*
 * gpu_harness.h - what every case of tests/gpu_kern.c shares: the data
 * generators, the device helpers and the two comparisons.  Included once,
 * by gpu_kern.c, ahead of the case files (tests/gpu_kern/<kernel>.h).
 *
 * Every output buffer is poisoned with NaN (0xff bytes) before a launch, so
 * an element a kernel forgot to write fails its check.  A failure line names
 * the case (op, type, shape, seed) that `build/tests/gpu_kern OP[:CASE]`
 * reruns alone (t.h).
 */
#ifndef X4_GPU_HARNESS_H
#define X4_GPU_HARNESS_H

#include "t.h"
#include "x4_int.h"
#include "x4_kern.h"
#include "cuda_check.h"
#include "trunk_int.h"

#include <math.h>
#include <cuda_runtime_api.h>

static cudaStream_t st;
static x4_err err;

/* ---- data ---- */

/* rng_seed(s) starts two streams, each drawing exactly what a case's seed
 * has always drawn (a seed in a failure line or in a log names the same
 * data): xorshift64 behind urand, frand, fvec, bvec and hvec, and splitmix64
 * behind rnd, unif, fill_weights and fill_x.  A case draws from one. */
static uint64_t rng_xs, rng_sm, rng_case_seed;

static void rng_seed(uint64_t s)
{
	rng_case_seed = s;
	rng_xs = s * 0x9e3779b97f4a7c15ull + 1;
	rng_sm = s;
}

static void *hmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		printf("FAIL host malloc of %zu bytes\n", n);
		exit(1);
	}
	return p;
}

/* xorshift64: a uniform double in [0, 1) */
static double urand(void)
{
	rng_xs ^= rng_xs << 13;
	rng_xs ^= rng_xs >> 7;
	rng_xs ^= rng_xs << 17;
	return (double)(rng_xs >> 11) * 0x1.0p-53;
}

static float frand(float lo, float hi) { return lo + (hi - lo) * (float)urand(); }

static float *fvec(size_t n, float lo, float hi)
{
	float *p = hmalloc(n * sizeof *p);
	for (size_t i = 0; i < n; i++)
		p[i] = frand(lo, hi);
	return p;
}

/* BF16 values in +-a, never zero (and inside fp16's normal range, docs/numerics.md 1.9). */
static uint16_t *bvec(size_t n, float a)
{
	uint16_t *p = hmalloc(n * sizeof *p);
	for (size_t i = 0; i < n; i++) {
		float v = frand(0.05f * a, a) * (urand() < 0.5 ? -1.f : 1.f);
		p[i] = x4_f32_to_bf16(v);
	}
	return p;
}

static uint16_t *hvec(size_t n, float a)
{
	uint16_t *p = hmalloc(n * sizeof *p);
	for (size_t i = 0; i < n; i++)
		p[i] = x4_f32_to_f16(frand(-a, a));
	return p;
}

/* splitmix64 */
static uint64_t rnd(void)
{
	uint64_t z = (rng_sm += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}
static float unif(float a, float b) { return a + (b - a) * (float)((rnd() >> 40) * 0x1p-24); }

/* Random valid blocks: any code bytes, scales kept so |w| is about 0.01-0.1
 * (IQ4_NL d may be negative, as the reference quantizer makes it). */
static void fill_weights(int type, uint8_t *w, size_t rows, int k)
{
	size_t nb = rows * (size_t)(k / x4_type_block_elems(type));
	if (type == X4_T_BF16) {
		uint16_t *h = (uint16_t *)w;
		for (size_t i = 0; i < nb; i++) {
			float v = unif(0.005f, 0.1f);
			h[i] = x4_f32_to_bf16(rnd() & 1 ? v : -v);
		}
		return;
	}
	int bb = x4_type_block_bytes(type);
	for (size_t b = 0; b < nb; b++) {
		uint8_t *p = w + b * bb;
		for (int i = 0; i < bb; i += 8) {
			uint64_t r = rnd();
			memcpy(p + i, &r, (size_t)X4_MIN(8, bb - i));
		}
		bool lead = type == X4_T_IQ4_NL || type == X4_T_Q8_0; /* the scale leads the block */
		float d = lead ? unif(0.2e-3f, 1e-3f) : unif(0.5e-4f, 2e-4f);
		uint16_t h = x4_f32_to_f16(rnd() & 1 ? d : -d);
		int at = lead ? 0 : 208;
		p[at] = (uint8_t)h;
		p[at + 1] = (uint8_t)(h >> 8);
	}
}

/* values of either sign, |x| in [0.05, 1] */
static void fill_x(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float v = unif(0.05f, 1.f);
		x[i] = rnd() & 1 ? v : -v;
	}
}

/* ---- device: every failure ends the run with a FAIL line ---- */

static void die_cuda(const char *what)
{
	printf("FAIL cuda: %s: %s\n", what, err.msg);
	exit(1);
}

static void *dalloc(size_t n)
{
	void *d;
	if (x4_dev_alloc(&d, n, "test buffer", &err))
		die_cuda("alloc");
	return d;
}

/* Every byte 0xff: NaN as fp32 and fp16, -1 as int. */
static void poison(void *d, size_t n)
{
	if (x4_cuda_check(cudaMemsetAsync(d, 0xff, n, st), "poison", &err))
		die_cuda("poison");
}

static void *dpoison(size_t n)
{
	void *d = dalloc(n);
	poison(d, n);
	return d;
}

static void *dput(const void *h, size_t n)
{
	void *d = dalloc(n);
	if (x4_dev_upload(d, h, n, "upload", &err))
		die_cuda("upload");
	return d;
}

static int *dint(int v) { return dput(&v, sizeof v); }

/* After the stream's work: a kernel's fault is reported here. */
static void dget(void *h, const void *d, size_t n)
{
	if (x4_cuda_check(cudaStreamSynchronize(st), "synchronise", &err) ||
	    x4_dev_download(h, d, n, "download", &err))
		die_cuda("download");
}

/* ---- comparisons ---- */

/* Outputs left NaN: never written, since every output starts poisoned. */
static size_t unwritten(const float *g, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += isnan(g[i]) != 0;
	return k;
}

static void check_written(const char *name, const char *cas, const float *g, size_t n)
{
	size_t k = unwritten(g, n);
	T_OK(k == 0, name, "%s: %zu of %zu outputs still NaN (never written)", cas, k, n);
}

/* What a comparison found: bad of n elements beyond the limit, the first of
 * them and its scale, the worst err/scale, and how many of the bad were NaN
 * (0 where a separate check_written counts them). */
struct cmp {
	size_t n, bad, first, nan;
	double first_scale, worst;
};

/* The PASS or FAIL line of a comparison; on a pass a '#' line with the worst
 * err/scale, the margin left under the limit. */
static void cmp_report(const char *name, const char *cas, const struct cmp *c, const float *got,
		       const float *ref, const char *limit)
{
	if (c->bad) {
		char nan[96] = "";
		if (c->nan)
			snprintf(nan, sizeof nan, "; %zu of them still NaN (never written)", c->nan);
		T_OK(0, name, "%s: %zu of %zu beyond %s; first [%zu] got %.9g want %.9g (scale %.3g); "
		     "worst err/scale %.3g%s", cas, c->bad, c->n, limit, c->first, got[c->first],
		     ref[c->first], c->first_scale, c->worst, nan);
	} else {
		T_OK(1, name, "%s", cas);
		printf("#   %s %s: worst err/scale %.3g (limit %s)\n", name, cas, c->worst, limit);
	}
}

/* The per-check tolerance: |g - r| <= rtol * scale_i + atol, scale_i = mag ?
 * mag[i] : |r[i]|, or the largest |r| when normwise; rtol and atol are
 * written at each check with the dtype that justifies them (docs/numerics.md
 * 4: fp32 1e-5, fp16 4e-3, bf16 4e-2).  A NaN (an unwritten element) fails.
 * shape is the case text; the line adds the last rng_seed. */
enum { ELEM, NORMWISE };

static void check(const char *name, const char *shape, const float *g, const float *r,
		  const float *mag, size_t n, double rtol, double atol, int mode)
{
	if (!t_want(NULL, shape)) /* another case of the filter's op */
		return;
	double rmax = 0;
	if (mode == NORMWISE)
		for (size_t i = 0; i < n; i++)
			rmax = fabs(r[i]) > rmax ? fabs(r[i]) : rmax;
	struct cmp c = { .n = n };
	for (size_t i = 0; i < n; i++) {
		double sc = mode == NORMWISE ? rmax : mag ? mag[i] : fabs(r[i]);
		double d = fabs((double)g[i] - (double)r[i]), lim = rtol * sc + atol;
		if (!(d <= lim)) {
			if (!c.bad)
				c.first = i, c.first_scale = mode == NORMWISE ? 0 : sc;
			c.bad++;
		}
		double q = sc > 0 ? d / sc : d;
		if (q > c.worst || isnan(q))
			c.worst = q;
	}
	if (c.bad)
		c.nan = unwritten(g, n);
	char cas[256], limit[64];
	snprintf(cas, sizeof cas, "%s seed %llu", shape, (unsigned long long)rng_case_seed);
	snprintf(limit, sizeof limit, "rtol %g atol %g", rtol, atol);
	cmp_report(name, cas, &c, g, r, limit);
}

/* The mag-relative rule of the quantized products and the MoE, for every
 * fp32 path: |gpu - ref| <= TOL * mag, where ref is the double-precision
 * reference and mag the sum of |terms| behind the output (x4r_* compute it;
 * for the MoE it also carries the gate and up errors through SwiGLU).  fp32
 * accumulation of K terms is off by at most K * 2^-24 * mag in the worst
 * case and, for terms of random sign, by about 2^-24 * mag times a small
 * constant (partial sums grow like sqrt(K) while mag grows like K).  TOL =
 * 1e-5 is ~170 ulps of mag: loose for random data yet four orders below what
 * a wrong block, scale or nibble gives (errors of order 1 relative to mag).
 * The weights are dequantized with the same fp32 products on both sides, so
 * they add nothing.  Two checks: "NAME written" (no NaN left) and "NAME
 * parity" (the written ones within the rule); cas is the case text. */
#define TOL 1e-5

static void compare(const char *name, const char *cas, const float *got, const float *ref,
		    const float *mag, size_t n)
{
	struct cmp c = { .n = n };
	for (size_t i = 0; i < n; i++) {
		if (isnan(got[i]))
			continue;
		double d = fabs((double)got[i] - (double)ref[i]), m = (double)mag[i] + 1e-30;
		if (d / m > c.worst)
			c.worst = d / m;
		if (d > TOL * m) {
			if (!c.bad++)
				c.first = i, c.first_scale = mag[i];
		}
	}
	char nm[160], limit[32];
	snprintf(nm, sizeof nm, "%s written", name);
	check_written(nm, cas, got, n);
	snprintf(nm, sizeof nm, "%s parity", name);
	snprintf(limit, sizeof limit, "%g*mag", TOL);
	cmp_report(nm, cas, &c, got, ref, limit);
}

#endif
