/*
 * head.h - kernels/head.cu (x4k_head: the streams' mean and the output norm)
 * against x4r_head (lib/ref/ref_misc.c).
 */

static void head_case(int n_tok, int n_hc, int D, uint64_t sd)
{
	char shape[128];
	snprintf(shape, sizeof shape, "tokens %d n_hc %d D %d", n_tok, n_hc, D);
	rng_seed(sd);
	size_t nh = (size_t)n_tok * n_hc * D, ny = (size_t)n_tok * D;
	float *H = fvec(nh, -40, 40), *g = fvec((size_t)D, 0.5f, 1.5f);
	float *ref = hmalloc(ny * 4), *got = hmalloc(ny * 4);
	x4r_head(n_tok, n_hc, D, H, g, 1e-6f, ref);
	float *dH = dput(H, nh * 4), *dg = dput(g, (size_t)D * 4), *dy = dpoison(ny * 4);
	int rc = x4k_head(n_tok, n_hc, D, dH, dg, 1e-6f, dy, st, &err);
	dget(got, dy, ny * 4);
	T_OK(rc == 0, "head launch", "%s: %s", shape, err.msg);
	/* fp32, normwise: the stream mean can cancel, so an element's error is
	 * measured against the row's largest value; 1e-5 */
	for (int t = 0; t < n_tok; t++)
		check("head", shape, got + (size_t)t * D, ref + (size_t)t * D, NULL, (size_t)D, 1e-5,
		      0, NORMWISE);
	x4_dev_free(dH);
	x4_dev_free(dg);
	x4_dev_free(dy);
	free(H);
	free(g);
	free(ref);
	free(got);
}

static void test_head(void)
{
	head_case(3, 4, 95, 31);
	head_case(2, 1, 95, 34);
	head_case(1, 2, 257, 35);
	head_case(2, 3, 4097, 36); /* a second round of a thread's columns */
	head_case(1, full.n_hc, full.n_embd, 32);
	head_case(16, full.n_hc, full.n_embd, 33);
	head_case(1, 4, 12288, 37); /* the largest D */
}
