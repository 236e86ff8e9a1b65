/*
 * gpu_kern_core.c - parity of the attention, RoPE, hyper-connection, norm,
 * embedding, head and sampling kernels (x4_kern.h section 2) against their
 * plain-C references (lib/ref/), at a tiny odd size, the model's size and
 * the largest size, then each kernel timed at the model's size ('# ' lines).
 *
 * Every output buffer is poisoned with NaN (0xff bytes) before a launch, so
 * an element a kernel forgot to write fails its check.  Tolerances sit next
 * to each check with the dtype that justifies them (docs/numerics.md 4: fp32
 * 1e-5, fp16 4e-3, bf16 4e-2).  A failure names op, shape and seed.
 */
#include "t.h"
#include "x4_kern.h"
#include "cuda_check.h"
#include "trunk_int.h"

#include <math.h>

static cudaStream_t st;
static x4_err err;
static uint64_t rs; /* the data generator's state */
static uint64_t seed_of_case;

/* ---- data ---- */

static void seed(uint64_t s)
{
	seed_of_case = s;
	rs = s * 0x9e3779b97f4a7c15ull + 1;
}

static double urand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (double)(rs >> 11) * 0x1.0p-53;
}

static float frand(float lo, float hi) { return lo + (hi - lo) * (float)urand(); }

static float *fvec(size_t n, float lo, float hi)
{
	float *p = malloc(n * sizeof *p);
	if (!p)
		abort();
	for (size_t i = 0; i < n; i++)
		p[i] = frand(lo, hi);
	return p;
}

/* BF16 values in +-a, never zero (and inside fp16's normal range, docs/numerics.md 1.9). */
static uint16_t *bvec(size_t n, float a)
{
	uint16_t *p = malloc(n * sizeof *p);
	if (!p)
		abort();
	for (size_t i = 0; i < n; i++) {
		float v = frand(0.05f * a, a) * (urand() < 0.5 ? -1.f : 1.f);
		p[i] = x4_f32_to_bf16(v);
	}
	return p;
}

static uint16_t *hvec(size_t n, float a)
{
	uint16_t *p = malloc(n * sizeof *p);
	if (!p)
		abort();
	for (size_t i = 0; i < n; i++)
		p[i] = x4_f32_to_f16(frand(-a, a));
	return p;
}

static void *hmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		abort();
	return p;
}

/* ---- device ---- */

static void die_cuda(const char *what)
{
	printf("FAIL cuda: %s: %s\n", what, err.msg);
	exit(1);
}

static void *dput(const void *h, size_t n)
{
	void *d;
	if (x4_dev_alloc(&d, n, "test buffer", &err) || x4_dev_upload(d, h, n, "upload", &err))
		die_cuda("upload");
	return d;
}

/* A device buffer of n bytes, every byte 0xff: NaN as fp32 and fp16, -1 as int. */
static void *dpoison(size_t n)
{
	void *d;
	if (x4_dev_alloc(&d, n, "test output", &err) ||
	    x4_cuda_check(cudaMemset(d, 0xff, n), "poison", &err))
		die_cuda("poison");
	return d;
}

static void repoison(void *d, size_t n)
{
	if (x4_cuda_check(cudaMemset(d, 0xff, n), "poison", &err))
		die_cuda("repoison");
}

static void dget(void *h, const void *d, size_t n)
{
	if (x4_cuda_check(cudaStreamSynchronize(st), "synchronise", &err) ||
	    x4_dev_download(h, d, n, "download", &err))
		die_cuda("download");
}

static int *dint(int v) { return dput(&v, sizeof v); }

/* ---- checks ---- */

/* |g - r| <= rtol * scale_i + atol, scale_i = mag ? mag[i] : |r[i]|, or the
 * largest |r| when normwise.  A NaN (an unwritten element) fails. */
enum { ELEM, NORMWISE };
static double last_ratio;

static int check(const char *name, const char *shape, const float *g, const float *r,
		 const float *mag, size_t n, double rtol, double atol, int mode)
{
	if (!t_want(NULL, shape)) /* another case of the filter's op */
		return 1;
	double rmax = 0;
	if (mode == NORMWISE)
		for (size_t i = 0; i < n; i++)
			rmax = fabs(r[i]) > rmax ? fabs(r[i]) : rmax;
	size_t bad = 0, first = 0;
	double worst = 0;
	for (size_t i = 0; i < n; i++) {
		double sc = mode == NORMWISE ? rmax : mag ? mag[i] : fabs(r[i]);
		double d = fabs((double)g[i] - (double)r[i]), lim = rtol * sc + atol;
		if (!(d <= lim)) {
			if (!bad)
				first = i;
			bad++;
		}
		double q = sc > 0 ? d / sc : d;
		if (q > worst || isnan(q))
			worst = q;
	}
	last_ratio = worst;
	T_OK(bad == 0, name, "%s seed %llu: %zu of %zu beyond rtol %g atol %g; first [%zu] got %.9g "
	     "want %.9g (scale %.3g); worst err/scale %.3g", shape,
	     (unsigned long long)seed_of_case, bad, n, rtol, atol, first, bad ? g[first] : 0.f,
	     bad ? r[first] : 0.f, bad ? (mode == NORMWISE ? 0 : mag ? mag[first] : fabs(r[first])) : 0,
	     worst);
	if (bad == 0)
		printf("#   %s %s: worst err/scale %.3g (limit %g)\n", name, shape, worst, rtol);
	return bad == 0;
}

static void f16_to_f32v(const uint16_t *h, float *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		f[i] = x4_f16_to_f32(h[i]);
}

/* ---- timing ---- */

static cudaEvent_t ev0, ev1;

static int cmpf(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

#define TIME(label, call)                                                              \
	do {                                                                           \
		float ts_[20];                                                         \
		int rc_ = 0;                                                           \
		for (int w_ = 0; w_ < 3; w_++)                                         \
			rc_ |= (call);                                                 \
		for (int i_ = 0; i_ < 20; i_++) {                                      \
			cudaEventRecord(ev0, st);                                      \
			rc_ |= (call);                                                 \
			cudaEventRecord(ev1, st);                                      \
			cudaEventSynchronize(ev1);                                     \
			cudaEventElapsedTime(&ts_[i_], ev0, ev1);                      \
		}                                                                      \
		qsort(ts_, 20, sizeof(float), cmpf);                                   \
		if (rc_)                                                               \
			printf("FAIL time %s: %s\n", label, err.msg);                  \
		else                                                                   \
			printf("# time %-44s %9.2f us (median of 20)\n", label,        \
			       (ts_[9] + ts_[10]) * 500.0);                            \
	} while (0)

static x4_config full; /* the released dimensions (x4_config_preset "full") */

#include "gpu_kern_core_cases.h"
#include "gpu_kern_core_attn.h"

/* A failed CUDA call checked by x4_cuda_check is not left as the runtime's
 * last error, where the next launch check would report it as its own. */
static void test_error_cleared(void)
{
	x4_err e2 = { 0 };
	int rc1 = x4_cuda_check(cudaSetDevice(-1), "select device -1", &e2);
	int rc2 = x4_cuda_launched("nothing launched", &err);
	T_OK(rc1 == X4_ECUDA && rc2 == 0, "cuda_check clears the error",
	     "a bad cudaSetDevice gave %d; the next launch check gave %d (%s)", rc1, rc2,
	     rc2 ? err.msg : "");
}

/* x4k_narrow against x4r_narrow: bit-identical (both round to nearest
 * even), on values spread over many binades plus the awkward ones. */
static void narrow_case(int64_t n, int dtype, uint64_t sd)
{
	char shape[96];
	snprintf(shape, sizeof shape, "n %lld dtype %s seed %llu", (long long)n,
		 dtype == X4K_NARROW_F16 ? "f16" : "bf16", (unsigned long long)sd);
	seed(sd);
	float *x = fvec((size_t)n, -1, 1);
	for (int64_t i = 0; i < n; i++)
		x[i] = ldexpf(x[i], (int)(i % 61) - 30);
	const float odd[] = { 0.0f, -0.0f, 65504.0f, 65520.0f, 1e-8f, -3.0e38f, INFINITY, NAN };
	for (int64_t i = 0; i < n && i < 8; i++)
		x[i] = odd[i];
	float *ref = hmalloc((size_t)n * 4), *got = hmalloc((size_t)n * 4);
	memcpy(ref, x, (size_t)n * 4);
	x4r_narrow(n, ref, dtype);
	float *dx = dput(x, (size_t)n * 4);
	int rc = x4k_narrow(n, dx, dtype, st, &err);
	dget(got, dx, (size_t)n * 4);
	int64_t bad = -1;
	for (int64_t i = 0; i < n && bad < 0; i++)
		if (memcmp(&got[i], &ref[i], 4) && !(isnan(got[i]) && isnan(ref[i])))
			bad = i;
	T_OK(rc == 0 && bad < 0, "narrow = reference, bit for bit", "%s: %s element %lld: %a vs %a",
	     shape, rc ? err.msg : "", (long long)bad, bad >= 0 ? got[bad] : 0.0,
	     bad >= 0 ? ref[bad] : 0.0);
	x4_dev_free(dx);
	free(x);
	free(ref);
	free(got);
}

int main(int argc, char **argv)
{
	t_filter(argc, argv);
	if (x4_cuda_check(cudaStreamCreate(&st), "create a stream", &err) ||
	    x4_cuda_check(cudaEventCreate(&ev0), "create an event", &err) ||
	    x4_cuda_check(cudaEventCreate(&ev1), "create an event", &err))
		die_cuda("setup");
	if (x4_config_preset("full", &full, &err)) {
		printf("FAIL preset: %s\n", err.msg);
		return 1;
	}
	/* each group by the op its FAIL lines name (t.h: OP[:CASE]) */
	if (t_want("error_cleared", NULL))
		test_error_cleared();
	if (t_want("embed", NULL))
		test_embed();
	if (t_want("rmsnorm", NULL) || t_want("head", NULL))
		test_norms();
	if (t_want("hc", NULL))
		test_hc();
	if (t_want("rope", NULL))
		test_rope();
	if (t_want("kv_store", NULL))
		test_kv_store();
	if (t_want("absorb", NULL))
		test_absorb();
	if (t_want("attention", NULL))
		test_attention();
	if (t_want("sample", NULL))
		test_sample();
	/* a tiny odd size, the model's x-hat for a 512-token chunk, and 2^24 */
	for (int dt = X4K_NARROW_BF16; dt <= X4K_NARROW_F16 && t_want("narrow", NULL); dt++) {
		narrow_case(7, dt, 11);
		narrow_case(512 * 3584, dt, 12);
		narrow_case((int64_t)1 << 24, dt, 13);
	}
	return t_done();
}
