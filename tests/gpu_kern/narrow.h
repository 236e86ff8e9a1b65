/*
 * narrow.h - kernels/narrow.cu (x4k_narrow: fp32 rounded in place to bf16 or
 * fp16 precision) against x4r_narrow (lib/ref/ref_misc.c).
 */

/* x4k_narrow against x4r_narrow: bit-identical (both round to nearest
 * even), on values spread over many binades plus the awkward ones. */
static void narrow_case(int64_t n, int dtype, uint64_t sd)
{
	char shape[96];
	snprintf(shape, sizeof shape, "n %lld dtype %s seed %llu", (long long)n,
		 dtype == X4K_NARROW_F16 ? "f16" : "bf16", (unsigned long long)sd);
	rng_seed(sd);
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

/* a tiny odd size, the model's x-hat for a 512-token chunk, and 2^24 */
static void test_narrow(void)
{
	for (int dt = X4K_NARROW_BF16; dt <= X4K_NARROW_F16; dt++) {
		narrow_case(7, dt, 11);
		narrow_case(512 * 3584, dt, 12);
		narrow_case((int64_t)1 << 24, dt, 13);
	}
}
