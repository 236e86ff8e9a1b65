/*
 * rope.h - kernels/rope.cu (x4k_rope, YaRN) against x4r_rope (lib/ref/ref_attn.c)
 * and the YaRN frequencies' check values.  omega_of serves kv_store.h and
 * mla_absorb.h too.
 */

static float *omega_of(int d_rope)
{
	x4_config c = full;
	c.d_rope = d_rope;
	float *om = hmalloc(sizeof(float) * (size_t)(d_rope / 2));
	x4_yarn_freqs(&c, om);
	return om;
}

/* |g - r| per pair against |a| + |b|: fp32 with cosf/sinf good to 2 ulp at
 * any angle; 1e-5 (docs/numerics.md 4) still fails __sinf, which misses by 1e-1 at 2e5 rad. */
static void rope_check(const char *shape, const float *g, const float *r, const float *in,
		       long n_pairs)
{
	float *mag = hmalloc(sizeof(float) * 2 * n_pairs);
	for (long i = 0; i < n_pairs; i++)
		mag[2 * i] = mag[2 * i + 1] = fabsf(in[2 * i]) + fabsf(in[2 * i + 1]);
	check("rope", shape, g, r, mag, 2 * (size_t)n_pairs, 1e-5, 1e-30, ELEM);
	free(mag);
}

static void rope_case(int n_tok, int n_vec, int d_rope, int pos, uint64_t sd, bool qlayout)
{
	char shape[128];
	snprintf(shape, sizeof shape, "tokens %d vectors %d d_rope %d pos %d%s", n_tok, n_vec,
		 d_rope, pos, qlayout ? " q->qt layout" : "");
	rng_seed(sd);
	/* q layout: vectors at +d_nope of [n_vec][d_nope + d_rope] rows, written
	 * into qt's tail at +kv_lora of [n_vec][kv_lora + d_rope] rows */
	int off_in = qlayout ? full.d_nope : 0, off_out = qlayout ? full.kv_lora : 0;
	int ld_iv = off_in + d_rope, ld_ov = off_out + d_rope;
	long ld_it = (long)n_vec * ld_iv, ld_ot = (long)n_vec * ld_ov;
	size_t nin = (size_t)ld_it * n_tok, nout = (size_t)ld_ot * n_tok;
	float *in = fvec(nin, -2, 2), *ref = hmalloc(nout * 4), *got = hmalloc(nout * 4);
	float *om = omega_of(d_rope);
	x4r_rope(n_tok, n_vec, d_rope, in + off_in, ld_it, ld_iv, ref + off_out, ld_ot, ld_ov, om,
		 pos);
	float *din = dput(in, nin * 4), *dout = dpoison(nout * 4), *dom = dput(om, (size_t)d_rope * 2);
	int *dpos = dint(pos);
	int rc = x4k_rope(n_tok, n_vec, d_rope, din + off_in, ld_it, ld_iv, dout + off_out, ld_ot,
			  ld_ov, dom, dpos, st, &err);
	T_OK(rc == 0, "rope launch", "%s: %s", shape, err.msg);
	dget(got, dout, nout * 4);
	/* gather the rope parts only (the rest of qt is another kernel's) */
	long np = (long)n_tok * n_vec * (d_rope / 2);
	float *g = hmalloc(sizeof(float) * 2 * np), *r = hmalloc(sizeof(float) * 2 * np);
	float *iv = hmalloc(sizeof(float) * 2 * np);
	size_t k = 0;
	for (int t = 0; t < n_tok; t++)
		for (int v = 0; v < n_vec; v++)
			for (int j = 0; j < d_rope; j++, k++) {
				g[k] = got[t * ld_ot + (long)v * ld_ov + off_out + j];
				r[k] = ref[t * ld_ot + (long)v * ld_ov + off_out + j];
				iv[k] = in[t * ld_it + (long)v * ld_iv + off_in + j];
			}
	rope_check(shape, g, r, iv, np);
	if (qlayout) {
		bool untouched = true;
		for (int t = 0; t < n_tok; t++)
			for (int v = 0; v < n_vec; v++)
				for (int j = 0; j < off_out; j++)
					untouched = untouched && isnan(got[t * ld_ot + (long)v * ld_ov + j]);
		T_OK(untouched, "rope writes only its part", "%s", shape);
	}
	x4_dev_free(din);
	x4_dev_free(dout);
	x4_dev_free(dom);
	x4_dev_free(dpos);
	free(in);
	free(ref);
	free(got);
	free(om);
	free(g);
	free(r);
	free(iv);
}

static void test_rope(void)
{
	/* the check values of the YaRN frequencies (docs/forward.md 6.2) */
	float *om = omega_of(64);
	const int idx[] = { 0, 10, 16, 23, 31 };
	const double want[] = { 1, 0.0562341, 0.00545673, 2.08363e-5, 2.08363e-6 };
	bool ok = true;
	for (int i = 0; i < 5; i++)
		ok = ok && fabs(om[idx[i]] - want[i]) <= 1e-5 * want[i];
	T_OK(ok, "yarn omega check values", "omega_10 %g omega_16 %g omega_23 %g omega_31 %g",
	     om[10], om[16], om[23], om[31]);
	free(om);
	rope_case(5, 3, 8, 7, 61, false);
	rope_case(1, full.n_head, full.d_rope, 4095, 62, true);
	rope_case(64, full.n_head, full.d_rope, 200, 63, true);
	/* every position of the trained context, 0 .. 262143 */
	rope_case(full.n_ctx_train, 1, full.d_rope, 0, 64, false);
}
