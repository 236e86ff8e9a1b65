/*
 * gpu_kern_quant.c - parity of the quantized products and the MoE kernels
 * (kernels/gemv_quant.cu, gemm_quant.cu, swiglu.cu, moe_router.cu,
 * moe_experts.cu) against their plain-C references (lib/ref/), at tiny odd
 * sizes (tails), the model's sizes and the largest ones; then '# ' timing
 * lines at the model's sizes.  Needs a GPU: run by `make test-gpu`.
 *
 * Tolerance, one rule for every fp32 path: |gpu - ref| <= TOL * mag, where
 * ref is the double-precision reference and mag the sum of |terms| behind
 * the output (x4r_* compute it; for the MoE it also carries the gate and up
 * errors through SwiGLU).  fp32 accumulation of K terms is off by at most
 * K * 2^-24 * mag in the worst case and, for terms of random sign, by about
 * 2^-24 * mag times a small constant (partial sums grow like sqrt(K) while
 * mag grows like K).  TOL = 1e-5 is ~170 ulps of mag: loose for random data
 * yet four orders below what a wrong block, scale or nibble gives (errors of
 * order 1 relative to mag).  The weights are dequantized with the same fp32
 * products on both sides, so they add nothing.
 *
 * Every output is poisoned with NaN first; a NaN left is an unwritten
 * element.  A failure line names op, type, rows, cols, tokens and seed.
 */
#include "t.h"
#include "x4_int.h"
#include "x4_kern.h"
#include "cuda_check.h"

#include <math.h>
#include <cuda_runtime_api.h>

#define TOL 1e-5

static x4_err err;
static cudaStream_t st;

/* ---- data ---- */

static uint64_t rng_s;
static uint64_t rnd(void)
{
	uint64_t z = (rng_s += 0x9E3779B97F4A7C15ull);
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

static void fill_x(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float v = unif(0.05f, 1.f);
		x[i] = rnd() & 1 ? v : -v;
	}
}

static void *dalloc(size_t n)
{
	void *p = NULL;
	if (x4_dev_alloc(&p, n, "test buffer", &err)) {
		printf("FAIL alloc: %s\n", err.msg);
		exit(1);
	}
	return p;
}
static void *dup_dev(const void *h, size_t n)
{
	void *p = dalloc(n);
	if (x4_dev_upload(p, h, n, "test upload", &err)) {
		printf("FAIL upload: %s\n", err.msg);
		exit(1);
	}
	return p;
}
static void down(void *h, const void *d, size_t n)
{
	if (x4_dev_download(h, d, n, "test download", &err) ||
	    x4_cuda_check(cudaStreamSynchronize(st), "test sync", &err)) {
		printf("FAIL download: %s\n", err.msg);
		exit(1);
	}
}
static void poison(void *d, size_t n) { cudaMemsetAsync(d, 0xff, n, st); }
static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		printf("FAIL host malloc of %zu bytes\n", n);
		exit(1);
	}
	return p;
}

/* Compare n outputs; name and case go on the PASS/FAIL lines. */
static void compare(const char *name, const char *cas, const float *got, const float *ref,
		    const float *mag, size_t n)
{
	size_t nan = 0, bad = 0, first = (size_t)-1;
	double worst = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(got[i])) {
			nan++;
			continue;
		}
		double d = fabs((double)got[i] - (double)ref[i]), m = (double)mag[i] + 1e-30;
		if (d / m > worst)
			worst = d / m;
		if (d > TOL * m) {
			if (!bad++)
				first = i;
		}
	}
	char nm[160];
	snprintf(nm, sizeof nm, "%s written", name);
	T_OK(nan == 0, nm, "%s: %zu of %zu outputs still NaN (never written)", cas, nan, n);
	snprintf(nm, sizeof nm, "%s parity", name);
	if (bad)
		T_OK(0, nm, "%s: %zu of %zu beyond %g*mag; first [%zu] gpu %.9g ref %.9g mag %.4g; worst %.3g",
		     cas, bad, n, TOL, first, got[first], ref[first], mag[first], worst);
	else
		T_OK(1, nm, "%s", cas);
	printf("#   %s: worst |gpu-ref|/mag %.3g\n", cas, worst);
}

/* ---- gemv and gemm ---- */

struct pcase {
	int type, n, k, t;
};

static void run_product(const char *label, struct pcase c, uint64_t seed, int check_tok)
{
	const char *op = c.t == 1 ? "gemv" : "gemm";
	char cas[200], name[64];
	snprintf(cas, sizeof cas, "op %s type %s rows %d cols %d tokens %d seed %llu", op,
		 x4_type_name(c.type), c.n, c.k, c.t, (unsigned long long)seed);
	if (!t_want(op, cas))
		return;
	rng_s = seed;
	size_t wb = x4_type_bytes(c.type, (uint64_t)c.n * c.k);
	uint8_t *w = xmalloc(wb);
	fill_weights(c.type, w, (size_t)c.n, c.k);
	float *x = xmalloc((size_t)c.t * c.k * 4);
	fill_x(x, (size_t)c.t * c.k);
	void *dw = dup_dev(w, wb);
	float *dx = dup_dev(x, (size_t)c.t * c.k * 4);
	float *dy = dalloc((size_t)c.t * c.n * 4);
	poison(dy, (size_t)c.t * c.n * 4);
	int rc = c.t == 1 ? x4k_gemv(c.type, dw, c.n, c.k, dx, dy, st, &err)
			  : x4k_gemm(c.type, dw, c.n, c.k, c.t, dx, dy, st, &err);
	snprintf(name, sizeof name, "%s %s %s", op, x4_type_name(c.type), label);
	if (!rc)
		rc = x4_cuda_check(cudaStreamSynchronize(st), "kernel", &err);
	if (rc) {
		T_OK(0, name, "%s: %s", cas, err.msg);
		goto out;
	}
	float *y = xmalloc((size_t)c.t * c.n * 4);
	down(y, dy, (size_t)c.t * c.n * 4);
	if (c.t == 1) { /* a fixed reduction order: the same bits on a second run */
		float *y2 = xmalloc((size_t)c.n * 4);
		poison(dy, (size_t)c.n * 4);
		int rc2 = x4k_gemv(c.type, dw, c.n, c.k, dx, dy, st, &err);
		if (!rc2)
			down(y2, dy, (size_t)c.n * 4);
		char nm[96];
		snprintf(nm, sizeof nm, "%s bit-identical rerun", name);
		T_OK(!rc2 && !memcmp(y, y2, (size_t)c.n * 4), nm, "%s: %s", cas,
		     rc2 ? err.msg : "outputs differ");
		free(y2);
	}
	/* The reference on every token, or on check_tok of them (the first, the
	 * last, both sides of the 64-token tile edge, and some between) when
	 * the double loops would take too long; NaN is checked everywhere. */
	int nt = check_tok && check_tok < c.t ? check_tok : c.t;
	int *tok = xmalloc((size_t)nt * sizeof *tok);
	for (int i = 0; i < nt; i++)
		tok[i] = nt == c.t ? i : (int)((long long)i * (c.t - 1) / (nt - 1));
	if (nt != c.t && nt >= 4 && c.t > 65) {
		tok[1] = 63;
		tok[2] = 64;
	}
	float *xs = xmalloc((size_t)nt * c.k * 4), *ref = xmalloc((size_t)nt * c.n * 4);
	float *mag = xmalloc((size_t)nt * c.n * 4), *got = xmalloc((size_t)nt * c.n * 4);
	for (int i = 0; i < nt; i++) {
		memcpy(xs + (size_t)i * c.k, x + (size_t)tok[i] * c.k, (size_t)c.k * 4);
		memcpy(got + (size_t)i * c.n, y + (size_t)tok[i] * c.n, (size_t)c.n * 4);
	}
	size_t nanall = 0;
	for (size_t i = 0; i < (size_t)c.t * c.n; i++)
		nanall += isnan(y[i]) != 0;
	if (x4r_gemm(c.type, w, c.n, c.k, nt, xs, ref, mag, &err)) {
		T_OK(0, name, "%s: reference: %s", cas, err.msg);
	} else {
		if (nt != c.t) {
			char nm[96];
			snprintf(nm, sizeof nm, "%s all written", name);
			T_OK(nanall == 0, nm, "%s: %zu outputs never written", cas, nanall);
		}
		compare(name, cas, got, ref, mag, (size_t)nt * c.n);
	}
	free(tok), free(xs), free(ref), free(mag), free(got), free(y);
out:
	x4_dev_free(dw), x4_dev_free(dx), x4_dev_free(dy);
	free(w), free(x);
}

/* x4k_gemv2: two matrices sharing x in one launch.  Each output against
 * the reference (the rule of run_product), and bit for bit against
 * x4k_gemv on the same matrix: a row's sum runs in the same order. */
static void run_gemv2(int type, int n1, int n2, int k, uint64_t seed)
{
	char cas[200];
	snprintf(cas, sizeof cas, "op gemv2 type %s rows %d + %d cols %d seed %llu", x4_type_name(type),
		 n1, n2, k, (unsigned long long)seed);
	if (!t_want("gemv2", cas))
		return;
	rng_s = seed;
	size_t b1 = x4_type_bytes(type, (uint64_t)n1 * k), b2 = x4_type_bytes(type, (uint64_t)n2 * k);
	uint8_t *w1 = xmalloc(b1), *w2 = xmalloc(b2);
	fill_weights(type, w1, (size_t)n1, k);
	fill_weights(type, w2, (size_t)n2, k);
	float *x = xmalloc((size_t)k * 4);
	fill_x(x, (size_t)k);
	void *dw1 = dup_dev(w1, b1), *dw2 = dup_dev(w2, b2);
	float *dx = dup_dev(x, (size_t)k * 4);
	float *dy1 = dalloc((size_t)n1 * 4), *dy2 = dalloc((size_t)n2 * 4);
	float *dz1 = dalloc((size_t)n1 * 4), *dz2 = dalloc((size_t)n2 * 4);
	poison(dy1, (size_t)n1 * 4);
	poison(dy2, (size_t)n2 * 4);
	int rc = x4k_gemv2(type, dw1, n1, dy1, dw2, n2, dy2, k, dx, st, &err);
	if (!rc)
		rc = x4k_gemv(type, dw1, n1, k, dx, dz1, st, &err);
	if (!rc)
		rc = x4k_gemv(type, dw2, n2, k, dx, dz2, st, &err);
	if (!rc)
		rc = x4_cuda_check(cudaStreamSynchronize(st), "kernel", &err);
	if (rc) {
		T_OK(0, "gemv2", "%s: %s", cas, err.msg);
	} else {
		float *y1 = xmalloc((size_t)n1 * 4), *y2 = xmalloc((size_t)n2 * 4);
		float *z1 = xmalloc((size_t)n1 * 4), *z2 = xmalloc((size_t)n2 * 4);
		float *r1 = xmalloc((size_t)n1 * 4), *r2 = xmalloc((size_t)n2 * 4);
		float *m1 = xmalloc((size_t)n1 * 4), *m2 = xmalloc((size_t)n2 * 4);
		down(y1, dy1, (size_t)n1 * 4);
		down(y2, dy2, (size_t)n2 * 4);
		down(z1, dz1, (size_t)n1 * 4);
		down(z2, dz2, (size_t)n2 * 4);
		if (x4r_gemv(type, w1, n1, k, x, r1, m1, &err) || x4r_gemv(type, w2, n2, k, x, r2, m2, &err)) {
			T_OK(0, "gemv2", "%s: reference: %s", cas, err.msg);
		} else {
			char name[64];
			snprintf(name, sizeof name, "gemv2 %s first", x4_type_name(type));
			compare(name, cas, y1, r1, m1, (size_t)n1);
			snprintf(name, sizeof name, "gemv2 %s second", x4_type_name(type));
			compare(name, cas, y2, r2, m2, (size_t)n2);
			T_OK(!memcmp(y1, z1, (size_t)n1 * 4) && !memcmp(y2, z2, (size_t)n2 * 4),
			     "gemv2 = two gemv, bit for bit", "%s", cas);
		}
		free(y1), free(y2), free(z1), free(z2), free(r1), free(r2), free(m1), free(m2);
	}
	x4_dev_free(dw1), x4_dev_free(dw2), x4_dev_free(dx), x4_dev_free(dy1), x4_dev_free(dy2);
	x4_dev_free(dz1), x4_dev_free(dz2);
	free(w1), free(w2), free(x);
}

/* x4k_gemv_swiglu: h = silu(W_gate x) * (W_up x).  The same bits when run
 * twice (its sums have a fixed order: a row's groups in group order; for
 * IQ4_NL that order is the register core's, not the plain gemv's staged
 * chunks, so it is not bit for bit the two x4k_gemv), and against the
 * reference: the gate's and up's errors
 * (TOL * their mag) carried through silu (|silu'| <= 1.1) and the product,
 * plus the product's own rounding (8 ulps of |h|, as test_swiglu). */
static void run_gemv_swiglu(int type, int n, int k, uint64_t seed)
{
	char cas[200];
	snprintf(cas, sizeof cas, "op gemv_swiglu type %s rows %d cols %d seed %llu", x4_type_name(type),
		 n, k, (unsigned long long)seed);
	if (!t_want("gemv_swiglu", cas))
		return;
	rng_s = seed;
	size_t wb = x4_type_bytes(type, (uint64_t)n * k);
	uint8_t *wg = xmalloc(wb), *wu = xmalloc(wb);
	fill_weights(type, wg, (size_t)n, k);
	fill_weights(type, wu, (size_t)n, k);
	float *x = xmalloc((size_t)k * 4);
	fill_x(x, (size_t)k);
	void *dwg = dup_dev(wg, wb), *dwu = dup_dev(wu, wb);
	float *dx = dup_dev(x, (size_t)k * 4);
	float *dg = dalloc((size_t)n * 4), *du = dalloc((size_t)n * 4), *dh = dalloc((size_t)n * 4);
	float *dh2 = dalloc((size_t)n * 4);
	poison(dh, (size_t)n * 4);
	poison(dh2, (size_t)n * 4);
	int rc = x4k_gemv_swiglu(type, dwg, dwu, n, k, dx, dg, du, dh, st, &err);
	if (!rc)
		rc = x4k_gemv_swiglu(type, dwg, dwu, n, k, dx, dg, du, dh2, st, &err);
	if (!rc)
		rc = x4_cuda_check(cudaStreamSynchronize(st), "kernel", &err);
	if (rc) {
		T_OK(0, "gemv_swiglu", "%s: %s", cas, err.msg);
	} else {
		float *h = xmalloc((size_t)n * 4), *h2 = xmalloc((size_t)n * 4);
		float *rg = xmalloc((size_t)n * 4), *ru = xmalloc((size_t)n * 4);
		float *mg = xmalloc((size_t)n * 4), *mu = xmalloc((size_t)n * 4);
		float *rh = xmalloc((size_t)n * 4), *mh = xmalloc((size_t)n * 4);
		down(h, dh, (size_t)n * 4);
		down(h2, dh2, (size_t)n * 4);
		T_OK(!memcmp(h, h2, (size_t)n * 4), "gemv_swiglu: the same bits twice", "%s", cas);
		if (x4r_gemv(type, wg, n, k, x, rg, mg, &err) || x4r_gemv(type, wu, n, k, x, ru, mu, &err)) {
			T_OK(0, "gemv_swiglu", "%s: reference: %s", cas, err.msg);
		} else {
			for (int i = 0; i < n; i++) {
				double g = rg[i], sg = g / (1.0 + exp(-g));
				rh[i] = (float)(sg * ru[i]);
				mh[i] = (float)(1.1 * mg[i] * fabs(ru[i]) + fabs(sg) * mu[i] +
						fabs(sg * ru[i]) * (8 * 0x1p-24 / TOL));
			}
			char name[64];
			snprintf(name, sizeof name, "gemv_swiglu %s", x4_type_name(type));
			compare(name, cas, h, rh, mh, (size_t)n);
		}
		free(h), free(h2), free(rg), free(ru), free(mg), free(mu), free(rh), free(mh);
	}
	x4_dev_free(dwg), x4_dev_free(dwu), x4_dev_free(dx), x4_dev_free(dg), x4_dev_free(du);
	x4_dev_free(dh), x4_dev_free(dh2);
	free(wg), free(wu), free(x);
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* Median of 20 timed runs after 3 warm-ups; run(i) uses weight copy i % nc. */
typedef int (*run_fn)(void *ctx, int i);
static float time_median(run_fn run, void *ctx)
{
	cudaEvent_t a[20], b[20];
	float ms[20];
	for (int i = 0; i < 3; i++)
		run(ctx, i);
	for (int i = 0; i < 20; i++) {
		cudaEventCreate(&a[i]);
		cudaEventCreate(&b[i]);
		cudaEventRecord(a[i], st);
		run(ctx, 3 + i);
		cudaEventRecord(b[i], st);
	}
	cudaStreamSynchronize(st);
	for (int i = 0; i < 20; i++) {
		cudaEventElapsedTime(&ms[i], a[i], b[i]);
		cudaEventDestroy(a[i]);
		cudaEventDestroy(b[i]);
	}
	qsort(ms, 20, sizeof ms[0], cmp_float);
	return (ms[9] + ms[10]) / 2;
}

/* Copies of a weight so that the rotation never finds it in the 60 MB L2. */
static int copies_for(size_t bytes)
{
	size_t c = (256u << 20) / (bytes ? bytes : 1) + 1;
	return (int)X4_MIN(X4_MAX(c, 2), 64);
}

struct tprod {
	struct pcase c;
	uint8_t *w; /* nc copies, wb bytes apart */
	size_t wb;
	int nc;
	float *x, *y;
};
static int tprod_run(void *ctx, int i)
{
	struct tprod *p = ctx;
	const uint8_t *w = p->w + (size_t)(i % p->nc) * p->wb;
	return p->c.t == 1 ? x4k_gemv(p->c.type, w, p->c.n, p->c.k, p->x, p->y, st, &err)
			   : x4k_gemm(p->c.type, w, p->c.n, p->c.k, p->c.t, p->x, p->y, st, &err);
}

static void time_product(struct pcase c)
{
	struct tprod p = { .c = c };
	p.wb = x4_type_bytes(c.type, (uint64_t)c.n * c.k);
	p.nc = c.t == 1 ? copies_for(p.wb) : 2;
	uint8_t *w = xmalloc(p.wb);
	rng_s = 99;
	fill_weights(c.type, w, (size_t)c.n, c.k);
	p.w = dalloc(p.wb * p.nc);
	for (int i = 0; i < p.nc; i++)
		cudaMemcpy(p.w + (size_t)i * p.wb, w, p.wb, cudaMemcpyHostToDevice);
	p.x = dalloc((size_t)c.t * c.k * 4);
	p.y = dalloc((size_t)c.t * c.n * 4);
	cudaMemsetAsync(p.x, 0, (size_t)c.t * c.k * 4, st);
	float ms = time_median(tprod_run, &p);
	if (c.t == 1)
		printf("# time gemv %-6s %6d x %-5d %8.2f us  %7.0f GB/s (weights, %d copies rotated)\n",
		       x4_type_name(c.type), c.n, c.k, ms * 1e3, p.wb / (ms * 1e6), p.nc);
	else
		printf("# time gemm %-6s %6d x %-5d tokens %d %8.2f us  %6.2f TFLOP/s\n",
		       x4_type_name(c.type), c.n, c.k, c.t, ms * 1e3,
		       2.0 * c.n * c.k * c.t / (ms * 1e9));
	x4_dev_free(p.w), x4_dev_free(p.x), x4_dev_free(p.y);
	free(w);
}

static void test_swiglu(void)
{
	const int n = 1000003;
	rng_s = 7;
	float *g = xmalloc((size_t)n * 4), *u = xmalloc((size_t)n * 4), *h = xmalloc((size_t)n * 4);
	float *ref = xmalloc((size_t)n * 4), *mag = xmalloc((size_t)n * 4);
	for (int i = 0; i < n; i++) {
		g[i] = unif(-30.f, 30.f);
		u[i] = unif(-300.f, 300.f); /* products far past fp16's 65504 */
	}
	float *dg = dup_dev(g, (size_t)n * 4), *du = dup_dev(u, (size_t)n * 4), *dh = dalloc((size_t)n * 4);
	poison(dh, (size_t)n * 4);
	int rc = x4k_swiglu(n, dg, du, dh, st, &err);
	if (rc) {
		T_OK(0, "swiglu", "op swiglu n %d seed 7: %s", n, err.msg);
	} else {
		down(h, dh, (size_t)n * 4);
		x4r_swiglu(n, g, u, ref);
		/* expf's 2 ulps, three roundings and the reference's own: 8 ulps of |h| */
		for (int i = 0; i < n; i++)
			mag[i] = fabsf(ref[i]) * (float)(8 * 0x1p-24 / TOL) + 1e-30f;
		compare("swiglu", "op swiglu type F32 n 1000003 seed 7", h, ref, mag, (size_t)n);
	}
	x4_dev_free(dg), x4_dev_free(du), x4_dev_free(dh);
	free(g), free(u), free(h), free(ref), free(mag);
}

/* ---- MoE ---- */

/* Expert weights: gate, up [n_expert][f][d], down [n_expert][d][f]. */
struct moe_w {
	int type, d, f, n_expert;
	size_t gb, db; /* bytes of gate (= up) and of down */
	uint8_t *g, *u, *dn;
	void *dg, *du, *ddn;
};

static void moe_w_make(struct moe_w *m, int type, int d, int f, int n_expert, uint64_t seed)
{
	m->type = type, m->d = d, m->f = f, m->n_expert = n_expert;
	m->gb = x4_type_bytes(type, (uint64_t)n_expert * f * d);
	m->db = m->gb;
	m->g = xmalloc(m->gb), m->u = xmalloc(m->gb), m->dn = xmalloc(m->db);
	rng_s = seed;
	fill_weights(type, m->g, (size_t)n_expert * f, d);
	fill_weights(type, m->u, (size_t)n_expert * f, d);
	fill_weights(type, m->dn, (size_t)n_expert * d, f);
	m->dg = dup_dev(m->g, m->gb), m->du = dup_dev(m->u, m->gb), m->ddn = dup_dev(m->dn, m->db);
}

static void moe_w_free(struct moe_w *m)
{
	free(m->g), free(m->u), free(m->dn);
	x4_dev_free(m->dg), x4_dev_free(m->du), x4_dev_free(m->ddn);
}

/* k distinct experts a token; with skew >= 0 every token also takes that one. */
static void random_routes(int n_tok, int k, int n_expert, int skew, int32_t *sel, float *wts)
{
	for (int t = 0; t < n_tok; t++) {
		int32_t *s = sel + (size_t)t * k;
		int forced = skew >= 0 ? (int)(rnd() % (uint64_t)k) : -1;
		for (int j = 0; j < k; j++) {
			int ex, dup;
			do {
				ex = j == forced ? skew : (int)(rnd() % (uint64_t)n_expert);
				dup = 0;
				for (int i = 0; i < j; i++)
					dup |= s[i] == ex;
				if (j != forced && skew >= 0 && ex == skew)
					dup = 1;
			} while (dup);
			s[j] = ex;
			wts[(size_t)t * k + j] = unif(0.1f, 0.6f);
		}
	}
}

/* The table's invariants, from the device copy, against sel on the host. */
static void check_table(const char *cas, const x4k_moe_routes *r, const int32_t *sel)
{
	int n = r->n_tok * r->k, E = r->n_expert, nt = 0, ok = 1;
	int32_t *cnt = xmalloc((size_t)E * 4), *off = xmalloc((size_t)(E + 1) * 4);
	int32_t *route = xmalloc((size_t)n * 4 + 4), *te = xmalloc((size_t)r->max_tiles * 4 + 4);
	int32_t *ts = xmalloc((size_t)r->max_tiles * 4 + 4), *seen = calloc((size_t)n + 1, 4);
	down(cnt, r->counts, (size_t)E * 4);
	down(off, r->offsets, (size_t)(E + 1) * 4);
	down(route, r->route, (size_t)n * 4);
	down(&nt, r->n_tiles, 4);
	down(te, r->tile_expert, (size_t)r->max_tiles * 4);
	down(ts, r->tile_start, (size_t)r->max_tiles * 4);
	char why[200] = "";
	int want_tiles = 0;
	for (int ex = 0, at = 0; ex < E && ok; ex++) {
		int c = 0;
		for (int i = 0; i < n; i++)
			c += sel[i] == ex;
		if (cnt[ex] != c || off[ex] != at) {
			snprintf(why, sizeof why, "expert %d: count %d offset %d, want %d and %d", ex, cnt[ex],
				 off[ex], c, at);
			ok = 0;
		}
		for (int j = 0; ok && j < c; j += r->tile, want_tiles++)
			if (want_tiles >= nt || te[want_tiles] != ex || ts[want_tiles] != at + j) {
				snprintf(why, sizeof why, "tile %d: not expert %d from %d", want_tiles, ex, at + j);
				ok = 0;
			}
		for (int i = at; ok && i < at + c; i++) {
			int id = route[i];
			if (id < 0 || id >= n || sel[id] != ex || seen[id]++ || (i > at && route[i - 1] >= id)) {
				snprintf(why, sizeof why, "route[%d] = %d in expert %d's group", i, id, ex);
				ok = 0;
			}
		}
		at += c;
	}
	if (ok && (off[E] != n || nt != want_tiles || nt > r->max_tiles)) {
		snprintf(why, sizeof why, "total %d of %d, %d tiles, want %d (max %d)", off[E], n, nt,
			 want_tiles, r->max_tiles);
		ok = 0;
	}
	T_OK(ok, "moe route table", "%s: %s", cas, why);
	free(cnt), free(off), free(route), free(te), free(ts), free(seen);
}

struct moe_run {
	x4k_moe_routes r;
	void *rws, *ews;
	size_t ews_bytes;
	float *dx, *dshared, *dy;
};

static int moe_forward(struct moe_run *m, const struct moe_w *w, bool table)
{
	size_t nr = (size_t)m->r.n_tok * m->r.k;
	poison(m->ews, m->ews_bytes);
	poison(m->dy, (size_t)m->r.n_tok * w->d * 4);
	const float *out;
	if (table && x4k_moe_route_table(&m->r, st, &err))
		return -1;
	if (x4k_moe_experts(&m->r, w->type, m->dx, w->d, w->f, w->dg, w->du, w->ddn, m->ews,
			    m->ews_bytes, &out, st, &err) ||
	    x4k_moe_reduce(&m->r, out, m->dshared, w->d, m->dy, st, &err))
		return -1;
	(void)nr;
	return x4_cuda_check(cudaStreamSynchronize(st), "moe kernels", &err);
}

/* Routed experts for random routes against the reference, then the same
 * bits twice, for a permuted route table and for permuted slots. */
static void test_experts(const char *label, const struct moe_w *w, int n_tok, int k, int tile,
			 int skew, uint64_t seed)
{
	int d = w->d, E = w->n_expert;
	size_t nr = (size_t)n_tok * k;
	char cas[200], name[96];
	snprintf(cas, sizeof cas, "op moe_experts type %s d %d f %d experts %d k %d tokens %d tile %d "
		 "seed %llu", x4_type_name(w->type), d, w->f, E, k, n_tok, tile,
		 (unsigned long long)seed);
	snprintf(name, sizeof name, "moe experts %s %s tile %d", x4_type_name(w->type), label, tile);
	if (!t_want("moe_experts", cas))
		return;
	rng_s = seed;
	float *x = xmalloc((size_t)n_tok * d * 4), *sh = xmalloc((size_t)n_tok * d * 4);
	int32_t *sel = xmalloc(nr * 4);
	float *wts = xmalloc(nr * 4);
	fill_x(x, (size_t)n_tok * d);
	fill_x(sh, (size_t)n_tok * d);
	random_routes(n_tok, k, E, skew, sel, wts);
	float *ref = xmalloc((size_t)n_tok * d * 4), *mag = xmalloc((size_t)n_tok * d * 4);
	float *y1 = xmalloc((size_t)n_tok * d * 4), *y2 = xmalloc((size_t)n_tok * d * 4);
	struct moe_run m;
	size_t rb = x4k_moe_routes_bytes(n_tok, k, E, tile);
	m.rws = dalloc(rb);
	m.ews_bytes = x4k_moe_experts_workspace_bytes(n_tok, k, d, w->f);
	m.ews = dalloc(m.ews_bytes);
	m.dx = dup_dev(x, (size_t)n_tok * d * 4);
	m.dshared = dup_dev(sh, (size_t)n_tok * d * 4);
	m.dy = dalloc((size_t)n_tok * d * 4);
	if (x4k_moe_routes_init(&m.r, m.rws, rb, n_tok, k, E, tile, &err) ||
	    x4_dev_upload(m.r.sel, sel, nr * 4, "sel", &err) ||
	    x4_dev_upload(m.r.wts, wts, nr * 4, "wts", &err) || moe_forward(&m, w, true)) {
		T_OK(0, name, "%s: %s", cas, err.msg);
		goto out;
	}
	check_table(cas, &m.r, sel);
	down(y1, m.dy, (size_t)n_tok * d * 4);
	if (x4r_moe_experts(w->type, n_tok, d, w->f, E, k, x, w->g, w->u, w->dn, sel, wts, sh, ref,
			    mag, &err)) {
		T_OK(0, name, "%s: reference: %s", cas, err.msg);
		goto out;
	}
	compare(name, cas, y1, ref, mag, (size_t)n_tok * d);

	/* the same bits on a second run */
	snprintf(name, sizeof name, "moe experts %s %s tile %d bit-identical rerun",
		 x4_type_name(w->type), label, tile);
	int rc = moe_forward(&m, w, true);
	if (!rc)
		down(y2, m.dy, (size_t)n_tok * d * 4);
	T_OK(!rc && !memcmp(y1, y2, (size_t)n_tok * d * 4), name, "%s: %s", cas,
	     rc ? err.msg : "outputs differ");

	/* a permuted route table: each expert's routes shuffled */
	int32_t *route = xmalloc(nr * 4), *off = xmalloc(((size_t)E + 1) * 4);
	down(route, m.r.route, nr * 4);
	down(off, m.r.offsets, ((size_t)E + 1) * 4);
	for (int ex = 0; ex < E; ex++)
		for (int i = off[ex + 1] - 1; i > off[ex]; i--) {
			int j = off[ex] + (int)(rnd() % (uint64_t)(i - off[ex] + 1));
			int32_t tmp = route[i];
			route[i] = route[j];
			route[j] = tmp;
		}
	snprintf(name, sizeof name, "moe experts %s %s tile %d bit-identical permuted table",
		 x4_type_name(w->type), label, tile);
	rc = x4_dev_upload(m.r.route, route, nr * 4, "route", &err);
	if (!rc)
		rc = moe_forward(&m, w, false);
	if (!rc)
		down(y2, m.dy, (size_t)n_tok * d * 4);
	T_OK(!rc && !memcmp(y1, y2, (size_t)n_tok * d * 4), name, "%s: %s", cas,
	     rc ? err.msg : "outputs differ");

	/* permuted slots: each token's slots reversed, with their weights */
	for (int t = 0; t < n_tok; t++)
		for (int j = 0; j < k / 2; j++) {
			size_t a = (size_t)t * k + j, b = (size_t)t * k + k - 1 - j;
			int32_t ts = sel[a];
			float tw = wts[a];
			sel[a] = sel[b], wts[a] = wts[b];
			sel[b] = ts, wts[b] = tw;
		}
	snprintf(name, sizeof name, "moe experts %s tile %d bit-identical permuted slots", label, tile);
	rc = x4_dev_upload(m.r.sel, sel, nr * 4, "sel", &err);
	if (!rc)
		rc = x4_dev_upload(m.r.wts, wts, nr * 4, "wts", &err);
	if (!rc)
		rc = moe_forward(&m, w, true);
	if (!rc)
		down(y2, m.dy, (size_t)n_tok * d * 4);
	T_OK(!rc && !memcmp(y1, y2, (size_t)n_tok * d * 4), name, "%s: %s", cas,
	     rc ? err.msg : "outputs differ");
	free(route), free(off);
out:
	x4_dev_free(m.rws), x4_dev_free(m.ews), x4_dev_free(m.dx), x4_dev_free(m.dshared);
	x4_dev_free(m.dy);
	free(x), free(sh), free(sel), free(wts), free(ref), free(mag), free(y1), free(y2);
}

/* The router against the reference.  A differing pick is accepted only as a
 * near tie: the reference's two scores closer than the fp32 logit error can
 * move them (sigmoid' <= 1/4, times TOL * the logit's mag).  tie: experts
 * 5, 9, 17, 40, 41, 60 get one weight row and bias 1.0, an exact tie for 4
 * places that the lower indices must win, in index order.  tie 2: every
 * bias NaN but experts 3 and 11's, so each token takes those two and then
 * the lowest ids not taken (x4r_topk's NaN rule), exactly as the reference. */
static void test_router(int n_tok, int d, int E, int k, uint64_t seed, int tie)
{
	static const int tied[] = { 5, 9, 17, 40, 41, 60 };
	char cas[200], name[64];
	const int nan_bias = tie == 2;
	if (nan_bias)
		tie = 0;
	snprintf(cas, sizeof cas, "op moe_router type F32 d %d experts %d k %d tokens %d seed %llu%s", d, E,
		 k, n_tok, (unsigned long long)seed, tie ? " exact-tie" : nan_bias ? " nan-bias" : "");
	snprintf(name, sizeof name, "moe router%s", tie ? " exact tie" : nan_bias ? " NaN bias" : "");
	if (!t_want("moe_router", cas))
		return;
	rng_s = seed;
	size_t nr = (size_t)n_tok * k;
	float *x = xmalloc((size_t)n_tok * d * 4), *wr = xmalloc((size_t)E * d * 4), *b = xmalloc((size_t)E * 4);
	fill_x(x, (size_t)n_tok * d);
	for (size_t i = 0; i < (size_t)E * d; i++)
		wr[i] = unif(-0.05f, 0.05f);
	for (int i = 0; i < E; i++)
		b[i] = unif(-0.1f, 0.1f);
	if (tie)
		for (size_t i = 1; i < X4_ARRAY_LEN(tied); i++) {
			memcpy(wr + (size_t)tied[i] * d, wr + (size_t)tied[0] * d, (size_t)d * 4);
			b[tied[i]] = b[tied[0]] = 1.0f;
		}
	if (nan_bias)
		for (int i = 0; i < E; i++)
			b[i] = i == 3 || i == 11 ? 0.5f : NAN;
	int32_t *sel = xmalloc(nr * 4), *rsel = xmalloc(nr * 4);
	float *wts = xmalloc(nr * 4), *rwts = xmalloc(nr * 4);
	float *score = xmalloc((size_t)n_tok * E * 4), *lmag = xmalloc((size_t)n_tok * E * 4);
	float *dx = dup_dev(x, (size_t)n_tok * d * 4), *dwr = dup_dev(wr, (size_t)E * d * 4);
	float *db = dup_dev(b, (size_t)E * 4);
	int tile = x4k_moe_tile(n_tok, k);
	size_t rb = x4k_moe_routes_bytes(n_tok, k, E, tile);
	void *rws = dalloc(rb);
	x4k_moe_routes r;
	int rc = x4k_moe_routes_init(&r, rws, rb, n_tok, k, E, tile, &err);
	if (!rc) {
		poison(r.sel, nr * 4);
		poison(r.wts, nr * 4);
		rc = x4k_moe_router(&r, dx, d, dwr, db, 2.0f, true, st, &err);
	}
	if (!rc)
		rc = x4k_moe_route_table(&r, st, &err);
	if (!rc)
		rc = x4_cuda_check(cudaStreamSynchronize(st), "router", &err);
	if (!rc)
		rc = x4r_moe_router(n_tok, d, E, k, x, wr, b, 2.0f, true, rsel, rwts, score, lmag, &err);
	if (rc) {
		T_OK(0, name, "%s: %s", cas, err.msg);
		goto out;
	}
	down(sel, r.sel, nr * 4);
	down(wts, r.wts, nr * 4);
	int bad = 0, near = 0;
	char why[200] = "";
	for (int t = 0; t < n_tok && !bad; t++) {
		const float *sc = score + (size_t)t * E, *lm = lmag + (size_t)t * E;
		int same = 1;
		double gsum = 0, lmax = 0;
		for (int j = 0; j < k; j++) {
			int a = sel[(size_t)t * k + j], c = rsel[(size_t)t * k + j];
			if (a < 0 || a >= E) {
				snprintf(why, sizeof why, "token %d slot %d: expert %d", t, j, a);
				bad = 1;
				break;
			}
			gsum += sc[c] - b[c];
			lmax = fmax(lmax, fmax(lm[a], lm[c]));
			if (a == c)
				continue;
			same = 0;
			if (tie || fabs((double)sc[a] - sc[c]) > 0.25 * TOL * fmax(lm[a], lm[c]) + 4 * 0x1p-24) {
				snprintf(why, sizeof why, "token %d slot %d: expert %d (score %.9g), ref %d (%.9g)",
					 t, j, a, sc[a], c, sc[c]);
				bad = 1;
			}
		}
		if (!same) {
			near++;
			continue;
		}
		/* w = 2 g / sum g: a logit error TOL*lmag moves g by a quarter of it */
		double wmag = 2.0 * (0.25 * lmax / gsum + 1.0);
		for (int j = 0; j < k && !bad; j++) {
			double dw = fabs((double)wts[(size_t)t * k + j] - rwts[(size_t)t * k + j]);
			if (isnan(wts[(size_t)t * k + j]) || dw > TOL * wmag) {
				snprintf(why, sizeof why, "token %d slot %d: weight %.9g, ref %.9g", t, j,
					 wts[(size_t)t * k + j], rwts[(size_t)t * k + j]);
				bad = 1;
			}
		}
		if (tie && !bad)
			for (int j = 0; j < k && !bad; j++)
				if (sel[(size_t)t * k + j] != tied[j] || wts[(size_t)t * k + j] != wts[(size_t)t * k]) {
					snprintf(why, sizeof why, "token %d slot %d: expert %d weight %.9g; want %d "
						 "and the same weight as slot 0", t, j, sel[(size_t)t * k + j],
						 wts[(size_t)t * k + j], tied[j]);
					bad = 1;
				}
	}
	if (nan_bias && !bad && memcmp(sel, rsel, nr * 4)) {
		snprintf(why, sizeof why, "the picks differ from the reference's (first token: %d %d, "
			 "ref %d %d)", sel[0], sel[k - 1], rsel[0], rsel[k - 1]);
		bad = 1;
	}
	T_OK(!bad, name, "%s: %s", cas, why);
	if (near && !nan_bias)
		printf("#   %s: %d tokens differ from the reference by a near tie only\n", cas, near);
	if (!tie)
		check_table(cas, &r, sel);
	{ /* x4k_moe_router_table: the same sel and wts bits, and a valid table */
		void *rws2 = dalloc(rb);
		x4k_moe_routes r2;
		int32_t *sel2 = xmalloc(nr * 4);
		float *wts2 = xmalloc(nr * 4);
		int rc2 = x4k_moe_routes_init(&r2, rws2, rb, n_tok, k, E, tile, &err);
		if (!rc2) {
			poison(rws2, rb);
			rc2 = x4k_moe_router_table(&r2, dx, d, dwr, db, 2.0f, true, st, &err);
		}
		if (!rc2)
			rc2 = x4_cuda_check(cudaStreamSynchronize(st), "router_table", &err);
		if (!rc2) {
			down(sel2, r2.sel, nr * 4);
			down(wts2, r2.wts, nr * 4);
		}
		char nm[80];
		snprintf(nm, sizeof nm, "moe router_table = router + route_table%s", tie ? " (tie)" : "");
		T_OK(!rc2 && !memcmp(sel, sel2, nr * 4) && !memcmp(wts, wts2, nr * 4), nm, "%s: %s", cas,
		     rc2 ? err.msg : "sel or wts differ");
		if (!rc2)
			check_table(cas, &r2, sel2);
		x4_dev_free(rws2);
		free(sel2), free(wts2);
	}
out:
	x4_dev_free(dx), x4_dev_free(dwr), x4_dev_free(db), x4_dev_free(rws);
	free(x), free(wr), free(b), free(sel), free(rsel), free(wts), free(rwts), free(score), free(lmag);
}

static struct moe_w full_w; /* the model's experts, kept for the timings */

static void test_moe(void)
{
	test_router(1, 3584, 64, 4, 51, 0);
	test_router(37, 3584, 64, 4, 52, 0);
	test_router(512, 3584, 64, 4, 53, 0);
	test_router(3, 3584, 64, 4, 54, 1);
	test_router(4, 3584, 64, 4, 56, 2);
	test_router(5, 96, 7, 3, 55, 0);

	struct moe_w tiny;
	moe_w_make(&tiny, X4_T_IQ4_NL, 96, 160, 6, 61);
	test_experts("tiny", &tiny, 3, 2, 4, -1, 62);
	test_experts("tiny", &tiny, 3, 2, 64, -1, 63);
	test_experts("tiny", &tiny, 70, 3, 64, 2, 64); /* expert 2: 70 routes, two tiles */
	test_experts("tiny", &tiny, 70, 3, 4, 2, 65);
	moe_w_free(&tiny);

	struct moe_w small; /* one token on the register core: 2 and 3 groups a row */
	moe_w_make(&small, X4_T_IQ4_NL, 512, 768, 6, 66);
	test_experts("small decode", &small, 1, 3, 4, -1, 67);
	moe_w_free(&small);

	moe_w_make(&full_w, X4_T_IQ4_NL, 3584, 1024, 64, 71);
	test_experts("model decode", &full_w, 1, 4, 4, -1, 72);
	test_experts("model decode", &full_w, 2, 4, 4, 7, 73); /* a tile of 2 routes */
	test_experts("model prefill", &full_w, 70, 4, 64, 9, 74);
	test_experts("model prefill", &full_w, 70, 4, 4, 9, 75);

	/* the second expert format, Q8_0, through the same kernels */
	struct moe_w q8;
	moe_w_make(&q8, X4_T_Q8_0, 96, 160, 6, 76);
	test_experts("tiny", &q8, 3, 2, 4, -1, 77);
	test_experts("tiny", &q8, 70, 3, 64, 2, 78);
	moe_w_free(&q8);
	moe_w_make(&q8, X4_T_Q8_0, 3584, 1024, 64, 79);
	test_experts("model decode", &q8, 1, 4, 4, -1, 80);
	test_experts("model prefill", &q8, 70, 4, 64, 9, 81);
	moe_w_free(&q8);
}

/* decode: 16 route sets on disjoint experts, so the 396 MB of experts
 * rotate through L2 instead of staying in it */
struct tmoe {
	struct moe_run m[16];
	int n;
};
static int tmoe_run(void *ctx, int i)
{
	struct tmoe *t = ctx;
	struct moe_run *m = &t->m[i % t->n];
	return x4k_moe_experts(&m->r, X4_T_IQ4_NL, m->dx, full_w.d, full_w.f, full_w.dg, full_w.du,
			       full_w.ddn, m->ews, m->ews_bytes, NULL, st, &err);
}
struct trouter {
	x4k_moe_routes *r;
	float *x, *wr, *b;
	int d;
};
static int trouter_run(void *ctx, int i)
{
	struct trouter *t = ctx;
	return x4k_moe_router(t->r, t->x, t->d, t->wr, t->b, 2.0f, true, st, &err) ||
	       x4k_moe_route_table(t->r, st, &err);
}

static void time_moe_shape(int n_tok, int n_set)
{
	const int k = 4, E = full_w.n_expert, d = full_w.d, f = full_w.f;
	size_t nr = (size_t)n_tok * k;
	int tile = x4k_moe_tile(n_tok, k);
	struct tmoe t = { .n = n_set };
	int32_t *sel = xmalloc(nr * 4);
	float *wts = xmalloc(nr * 4), *x = xmalloc((size_t)n_tok * d * 4);
	rng_s = 81;
	fill_x(x, (size_t)n_tok * d);
	float *dx = dup_dev(x, (size_t)n_tok * d * 4);
	for (int s = 0; s < n_set; s++) {
		struct moe_run *m = &t.m[s];
		size_t rb = x4k_moe_routes_bytes(n_tok, k, E, tile);
		m->rws = dalloc(rb);
		m->ews_bytes = x4k_moe_experts_workspace_bytes(n_tok, k, d, f);
		m->ews = dalloc(m->ews_bytes);
		m->dx = dx;
		x4k_moe_routes_init(&m->r, m->rws, rb, n_tok, k, E, tile, &err);
		if (n_tok == 1)
			for (int j = 0; j < k; j++)
				sel[j] = (4 * s + j) % E, wts[j] = 0.5f;
		else
			random_routes(n_tok, k, E, -1, sel, wts);
		x4_dev_upload(m->r.sel, sel, nr * 4, "sel", &err);
		x4_dev_upload(m->r.wts, wts, nr * 4, "wts", &err);
		x4k_moe_route_table(&m->r, st, &err);
	}
	float ms = time_median(tmoe_run, &t);
	double bytes = 3.0 * x4_type_bytes(X4_T_IQ4_NL, (uint64_t)f * d) * (n_tok == 1 ? k : E);
	printf("# time moe experts tokens %d top-%d tile %d: %8.2f us  %7.0f GB/s of expert weights  "
	       "%6.2f TFLOP/s\n", n_tok, k, tile, ms * 1e3, bytes / (ms * 1e6),
	       6.0 * nr * f * d / (ms * 1e9));
	for (int s = 0; s < n_set; s++)
		x4_dev_free(t.m[s].rws), x4_dev_free(t.m[s].ews);
	x4_dev_free(dx);
	free(sel), free(wts), free(x);
}

static void time_moe(void)
{
	time_moe_shape(1, 16);
	time_moe_shape(512, 1);
	/* router + route table, one token and a prefill chunk */
	const int d = 3584, E = 64;
	float *wr = xmalloc((size_t)E * d * 4), *x = xmalloc((size_t)512 * d * 4), b[64] = { 0 };
	rng_s = 91;
	fill_x(wr, (size_t)E * d);
	fill_x(x, (size_t)512 * d);
	struct trouter t = { .d = d };
	t.x = dup_dev(x, (size_t)512 * d * 4), t.wr = dup_dev(wr, (size_t)E * d * 4), t.b = dup_dev(b, 256);
	for (int n = 1; n <= 512; n *= 512) {
		int tile = x4k_moe_tile(n, 4);
		size_t rb = x4k_moe_routes_bytes(n, 4, E, tile);
		void *ws = dalloc(rb);
		x4k_moe_routes r;
		x4k_moe_routes_init(&r, ws, rb, n, 4, E, tile, &err);
		t.r = &r;
		float ms = time_median(trouter_run, &t);
		printf("# time moe router + route table tokens %d: %8.2f us\n", n, ms * 1e3);
		x4_dev_free(ws);
	}
	x4_dev_free(t.x), x4_dev_free(t.wr), x4_dev_free(t.b);
	free(wr), free(x);
	moe_w_free(&full_w);
}

int main(int argc, char **argv)
{
	t_filter(argc, argv);
	if (x4_cuda_check(cudaStreamCreate(&st), "create a stream", &err)) {
		printf("FAIL cuda: %s\n", err.msg);
		return 1;
	}
	struct cudaDeviceProp prop;
	cudaGetDeviceProperties(&prop, 0);
	printf("# device %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
	       prop.l2CacheSize >> 20);
	double t0 = x4_now();

	/* tiny odd sizes: ragged 16-byte lines, a tail chunk, odd BF16 widths,
	 * a row tile and a token tile with tails */
	const struct pcase tiny[] = {
		{ X4_T_IQ4_NL, 7, 96, 1 }, { X4_T_IQ4_NL, 7, 1184, 1 }, { X4_T_IQ4_NL, 70, 96, 3 },
		{ X4_T_IQ4_NL, 70, 1184, 67 }, { X4_T_Q6_K, 7, 256, 1 }, { X4_T_Q6_K, 7, 1280, 1 },
		{ X4_T_Q6_K, 70, 1280, 3 }, { X4_T_Q6_K, 7, 256, 67 }, { X4_T_BF16, 7, 13, 1 },
		{ X4_T_BF16, 7, 1031, 1 }, { X4_T_BF16, 70, 13, 3 }, { X4_T_BF16, 70, 1031, 67 },
		/* the BF16 split-K path (k % 8 == 0): a partial unit, a ragged
		 * last unit over 4 and 8 warps, partial row groups at R 1 and 4 */
		{ X4_T_BF16, 7, 200, 1 }, { X4_T_BF16, 13, 1032, 1 }, { X4_T_BF16, 37, 2312, 1 },
		{ X4_T_BF16, 1000, 776, 1 }, { X4_T_BF16, 2111, 96, 1 }, { X4_T_BF16, 1061, 2048, 1 },
		/* the IQ4_NL register path (k % 256 == 0): one group a row, 3 and
		 * 9 groups with a partial last block of rows, and 128 groups (one
		 * row set a block) at R 2 with a partial pair */
		{ X4_T_IQ4_NL, 7, 256, 1 }, { X4_T_IQ4_NL, 37, 768, 1 }, { X4_T_IQ4_NL, 300, 2304, 1 },
		{ X4_T_IQ4_NL, 531, 32768, 1 },
		/* the Q6_K whole-row path (an even number of blocks a row, k <=
		 * 4096): 2, 6 and 16 blocks, partial blocks of rows */
		{ X4_T_Q6_K, 7, 512, 1 }, { X4_T_Q6_K, 37, 1536, 1 }, { X4_T_Q6_K, 9, 4096, 1 },
	};
	for (size_t i = 0; i < X4_ARRAY_LEN(tiny); i++)
		run_product("tiny", tiny[i], 1000 + i, 0);

	/* the model's sizes (rows x cols = out x in), as gemv and as gemm */
	const struct pcase model[] = {
		{ X4_T_IQ4_NL, 1024, 3584, 1 }, { X4_T_IQ4_NL, 3584, 1024, 1 },
		{ X4_T_IQ4_NL, 9216, 3584, 1 }, { X4_T_IQ4_NL, 3584, 9216, 1 },
		{ X4_T_BF16, 768, 3584, 1 }, { X4_T_BF16, 6144, 768, 1 }, { X4_T_BF16, 576, 3584, 1 },
		{ X4_T_BF16, 3584, 4096, 1 }, { X4_T_BF16, 16384, 128, 1 }, { X4_T_BF16, 4096, 512, 1 },
		{ X4_T_Q6_K, 131072, 3584, 1 },
	};
	for (size_t i = 0; i < X4_ARRAY_LEN(model); i++) {
		run_product("model", model[i], 2000 + i, 0);
		struct pcase g = model[i];
		g.t = g.type == X4_T_Q6_K ? 5 : 67;
		run_product("model", g, 3000 + i, 0);
	}
	/* the largest: a 512-token prefill chunk on the widest matrices,
	 * checked on 8 tokens, NaN-checked on all */
	const struct pcase big[] = {
		{ X4_T_IQ4_NL, 9216, 3584, 512 }, { X4_T_IQ4_NL, 3584, 9216, 512 },
		{ X4_T_BF16, 3584, 4096, 512 }, { X4_T_Q6_K, 131072, 3584, 64 },
		{ X4_T_BF16, 16384, 9216, 1 }, /* the BF16 gemv past the model: 3 load batches a warp */
		{ X4_T_IQ4_NL, 131072, 3584, 1 }, /* the IQ4_NL gemv at the head's shape, R 2 */
	};
	for (size_t i = 0; i < X4_ARRAY_LEN(big); i++)
		run_product("largest", big[i], 4000 + i, 8);

	/* two matrices, one launch: tiny odd (rows straddling the seam inside
	 * a row group), the model's q_a + kv_a, the largest (q_b's and the
	 * output's row counts over 4096 columns); IQ4_NL takes two launches */
	run_gemv2(X4_T_BF16, 7, 5, 200, 5001);
	run_gemv2(X4_T_BF16, 1061, 3, 2048, 5002);
	run_gemv2(X4_T_BF16, 768, 576, 3584, 5003);
	run_gemv2(X4_T_BF16, 6144, 3584, 4096, 5004);
	run_gemv2(X4_T_BF16, 5, 3, 13, 5005); /* odd k: the staged kernel, two launches */
	run_gemv2(X4_T_IQ4_NL, 1024, 1024, 3584, 5006);

	/* gate, up and SwiGLU in one launch: tiny (one and three groups), the
	 * shared expert's and the dense FFN's shapes, and the fallbacks */
	run_gemv_swiglu(X4_T_IQ4_NL, 7, 256, 6001);
	run_gemv_swiglu(X4_T_IQ4_NL, 37, 768, 6002);
	run_gemv_swiglu(X4_T_IQ4_NL, 1024, 3584, 6003);
	run_gemv_swiglu(X4_T_IQ4_NL, 9216, 3584, 6004);
	run_gemv_swiglu(X4_T_IQ4_NL, 7, 96, 6005); /* k % 256: three launches */
	run_gemv_swiglu(X4_T_BF16, 7, 200, 6006);

	if (t_want("swiglu", NULL))
		test_swiglu();
	if (t_want("moe", NULL))
		test_moe();
	printf("# parity took %.1f s\n", x4_now() - t0);
	if (t_op) { /* a rerun of one op: no timings */
		cudaStreamDestroy(st);
		return t_done();
	}

	for (size_t i = 0; i < X4_ARRAY_LEN(model); i++)
		time_product(model[i]);
	const struct pcase tg[] = {
		{ X4_T_IQ4_NL, 9216, 3584, 512 }, { X4_T_IQ4_NL, 1024, 3584, 512 },
		{ X4_T_BF16, 3584, 4096, 512 }, { X4_T_BF16, 6144, 768, 512 },
	};
	for (size_t i = 0; i < X4_ARRAY_LEN(tg); i++)
		time_product(tg[i]);
	time_moe();
	printf("# total %.1f s\n", x4_now() - t0);
	cudaStreamDestroy(st);
	return t_done();
}
