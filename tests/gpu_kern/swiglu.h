/*
 * swiglu.h - kernels/swiglu.cu (x4k_swiglu) against x4r_swiglu
 * (lib/ref/ref_gemv.c), by the mag-relative rule (gpu_harness.h).
 */

static void test_swiglu(void)
{
	const int n = 1000003;
	rng_seed(7);
	float *g = hmalloc((size_t)n * 4), *u = hmalloc((size_t)n * 4), *h = hmalloc((size_t)n * 4);
	float *ref = hmalloc((size_t)n * 4), *mag = hmalloc((size_t)n * 4);
	for (int i = 0; i < n; i++) {
		g[i] = unif(-30.f, 30.f);
		u[i] = unif(-300.f, 300.f); /* products far past fp16's 65504 */
	}
	float *dg = dput(g, (size_t)n * 4), *du = dput(u, (size_t)n * 4), *dh = dalloc((size_t)n * 4);
	poison(dh, (size_t)n * 4);
	int rc = x4k_swiglu(n, dg, du, dh, st, &err);
	if (rc) {
		T_OK(0, "swiglu", "op swiglu n %d seed 7: %s", n, err.msg);
	} else {
		dget(h, dh, (size_t)n * 4);
		x4r_swiglu(n, g, u, ref);
		/* expf's 2 ulps, three roundings and the reference's own: 8 ulps of |h| */
		for (int i = 0; i < n; i++)
			mag[i] = fabsf(ref[i]) * (float)(8 * 0x1p-24 / TOL) + 1e-30f;
		compare("swiglu", "op swiglu type F32 n 1000003 seed 7", h, ref, mag, (size_t)n);
	}
	x4_dev_free(dg), x4_dev_free(du), x4_dev_free(dh);
	free(g), free(u), free(h), free(ref), free(mag);
}
