/*
 * sample.h - kernels/sample.cu (x4k_argmax, x4k_sample: the next token on the
 * device) against x4r_sample (lib/ref/ref_misc.c) and planted answers.
 */

static void argmax_case(int n, const float *l, int32_t want, const char *what)
{
	float *dl = dput(l, (size_t)n * 4);
	int32_t *dout = dpoison(4), got = -7;
	size_t wsb = x4k_sample_workspace_bytes(n);
	void *ws = dpoison(wsb);
	int rc = x4k_argmax(n, dl, dout, ws, wsb, st, &err);
	dget(&got, dout, 4);
	T_OK(rc == 0 && got == want, "argmax", "%s, n %d: got %d want %d (%s)", what, n, got, want,
	     rc ? err.msg : "");
	x4_dev_free(dl);
	x4_dev_free(dout);
	x4_dev_free(ws);
}

static void sample_case(int n, float temp, int top_k, float top_p, uint64_t sd)
{
	char shape[128];
	snprintf(shape, sizeof shape, "n %d T %g top-k %d top-p %g seed %llu", n, temp, top_k, top_p,
		 (unsigned long long)sd);
	rng_seed(sd);
	float *l = hmalloc((size_t)n * 4);
	for (int i = 0; i < n; i++) /* roughly normal, sd 2.5, a few NaN */
		l[i] = (float)((urand() + urand() + urand() + urand() - 2) * 4.3);
	l[n / 3] = NAN;
	float *dl = dput(l, (size_t)n * 4);
	int32_t *dout = dpoison(4);
	uint64_t zero = 0, *dctr = dput(&zero, 8);
	size_t wsb = x4k_sample_workspace_bytes(n);
	void *ws = dpoison(wsb);
	unsigned char *kept = hmalloc((size_t)n);
	const int draws = 64;
	int same = 0, outside = 0, rc = 0;
	for (int i = 0; i < draws; i++) {
		rc |= x4k_sample(n, dl, temp, top_k, top_p, sd, dctr, dout, ws, wsb, st, &err);
		int32_t g = -1;
		dget(&g, dout, 4);
		int32_t r = x4r_sample(n, l, temp, top_k, top_p, sd, (uint64_t)i, kept);
		same += g == r;
		outside += g < 0 || g >= n || !kept[g];
	}
	uint64_t ctr = 0;
	dget(&ctr, dctr, 8);
	T_OK(rc == 0, "sample launch", "%s: %s", shape, err.msg);
	/* the kept set and the draw are integer arithmetic on 2^-40 fixed-point
	 * weights; only an expf ulp between host and device can move a draw
	 * that lands within ~1e-7 of a boundary: allow 1 in 64 */
	T_OK(same >= draws - 1 && outside == 0, "sample = reference", "%s: %d of %d draws equal, "
	     "%d outside the reference's kept set", shape, same, draws, outside);
	T_OK(ctr == (uint64_t)draws, "sample counter", "%s: counter %llu after %d draws", shape,
	     (unsigned long long)ctr, draws);
	x4_dev_free(dl);
	x4_dev_free(dout);
	x4_dev_free(dctr);
	x4_dev_free(ws);
	free(l);
	free(kept);
}

static void test_sample(void)
{
	const float tiny[7] = { 1, 3, NAN, 3, -INFINITY, 2, 3 };
	argmax_case(7, tiny, 1, "ties go to the lowest id, NaN skipped");
	const float nan3[3] = { NAN, NAN, NAN };
	argmax_case(3, nan3, 0, "every value NaN");
	const float ninf[3] = { NAN, -INFINITY, -INFINITY };
	argmax_case(3, ninf, 1, "-inf is a value");
	int n = full.n_vocab;
	rng_seed(111);
	float *l = fvec((size_t)n, -20, 20);
	for (int i = 0; i < n; i += 997)
		l[i] = NAN;
	l[1234] = l[77777] = 25.f;
	argmax_case(n, l, 1234, "planted tie at 1234 and 77777");
	l[1234] = 24.f;
	argmax_case(n, l, 77777, "planted max at 77777");
	free(l);
	sample_case(5, 1.0f, 0, 1.0f, 121);
	sample_case(n, 0.8f, 0, 0.9f, 122);
	sample_case(n, 0.7f, 40, 0.95f, 123);
	sample_case(n, 1.3f, 0, 1.0f, 124);
	sample_case(n, 1.0f, 200000, 0.5f, 125); /* top-k past the vocabulary: all */
}
