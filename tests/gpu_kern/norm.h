/*
 * norm.h - kernels/norm.cu (x4k_rmsnorm) against x4r_rmsnorm (lib/ref/ref_misc.c).
 */

static void norm_case(int n_tok, int n, int ld, bool gain, uint64_t sd)
{
	char shape[128];
	snprintf(shape, sizeof shape, "rows %d n %d ld %d gain %d", n_tok, n, ld, gain);
	rng_seed(sd);
	float *x = fvec((size_t)n_tok * ld, -3, 3), *g = fvec((size_t)n, 0.5f, 1.5f);
	size_t ny = (size_t)n_tok * ld;
	float *ref = hmalloc(ny * 4), *got = hmalloc(ny * 4);
	for (size_t i = 0; i < ny; i++)
		ref[i] = NAN;
	x4r_rmsnorm(n_tok, n, x, ld, gain ? g : NULL, 1e-6f, ref, ld);
	float *dx = dput(x, ny * 4), *dg = dput(g, (size_t)n * 4), *dy = dpoison(ny * 4);
	int rc = x4k_rmsnorm(n_tok, n, dx, ld, gain ? dg : NULL, 1e-6f, dy, ld, st, &err);
	dget(got, dy, ny * 4);
	T_OK(rc == 0, "rmsnorm launch", "%s: %s", shape, err.msg);
	/* compare the n columns of each row (the ld padding stays unwritten) */
	float *gc = hmalloc((size_t)n_tok * n * 4), *rc_ = hmalloc((size_t)n_tok * n * 4);
	for (int t = 0; t < n_tok; t++)
		for (int i = 0; i < n; i++) {
			gc[(size_t)t * n + i] = got[(size_t)t * ld + i];
			rc_[(size_t)t * n + i] = ref[(size_t)t * ld + i];
		}
	/* fp32: a sum of squares and three roundings per element: 1e-5 relative */
	check("rmsnorm", shape, gc, rc_, NULL, (size_t)n_tok * n, 1e-5, 1e-30, ELEM);
	bool pad = true;
	for (int t = 0; t < n_tok; t++)
		for (int i = n; i < ld; i++)
			pad = pad && isnan(got[(size_t)t * ld + i]);
	T_OK(pad, "rmsnorm stays in its row", "%s: wrote past n", shape);
	{ /* a fixed reduction order: the same bits again */
		float *again = hmalloc(ny * 4);
		poison(dy, ny * 4);
		int rc2 = x4k_rmsnorm(n_tok, n, dx, ld, gain ? dg : NULL, 1e-6f, dy, ld, st, &err);
		dget(again, dy, ny * 4);
		T_OK(rc2 == 0 && !memcmp(again, got, ny * 4), "rmsnorm twice",
		     "%s: a second call gave other bits", shape);
		free(again);
	}
	x4_dev_free(dx);
	x4_dev_free(dg);
	x4_dev_free(dy);
	free(x);
	free(g);
	free(ref);
	free(got);
	free(gc);
	free(rc_);
}

/* y = x: every value is read before any is written. */
static void norm_inplace_case(int n_tok, int n, uint64_t sd)
{
	char shape[128];
	snprintf(shape, sizeof shape, "rows %d n %d in place", n_tok, n);
	rng_seed(sd);
	size_t ny = (size_t)n_tok * n;
	float *x = fvec(ny, -3, 3), *g = fvec((size_t)n, 0.5f, 1.5f);
	float *ref = hmalloc(ny * 4), *got = hmalloc(ny * 4);
	x4r_rmsnorm(n_tok, n, x, n, g, 1e-6f, ref, n);
	float *dx = dput(x, ny * 4), *dg = dput(g, (size_t)n * 4);
	int rc = x4k_rmsnorm(n_tok, n, dx, n, dg, 1e-6f, dx, n, st, &err);
	dget(got, dx, ny * 4);
	T_OK(rc == 0, "rmsnorm in place launch", "%s: %s", shape, err.msg);
	/* fp32, as norm_case: 1e-5 relative */
	check("rmsnorm in place", shape, got, ref, NULL, ny, 1e-5, 1e-30, ELEM);
	x4_dev_free(dx);
	x4_dev_free(dg);
	free(x);
	free(g);
	free(ref);
	free(got);
}

static void test_rmsnorm(void)
{
	norm_case(5, 97, 100, true, 21);
	norm_case(3, 96, 96, false, 22);
	norm_case(1, full.n_embd, full.n_embd, true, 23);
	norm_case(64, full.n_embd, full.n_embd, true, 24);
	norm_case(8, full.q_lora, full.q_lora, true, 25);
	norm_case(2, 16384, 16384, true, 26); /* the widest row held in registers */
	norm_case(3, 5001, 5003, true, 27);   /* scalar loads, two a thread */
	norm_case(2, 16388, 16388, true, 28); /* past the registers: the plain loop */
	norm_inplace_case(1, full.q_lora, 29); /* y = x, as the trunk's c_q norm */
	norm_inplace_case(3, 97, 30);
}
