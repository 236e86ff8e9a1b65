/*
 * kv_store.h - kernels/kv_store.cu (x4k_kv_store, x4k_kv_store_norm: the cache
 * row) against x4r_kv_store and x4r_rmsnorm (lib/ref/).
 */

static void f16_to_f32v(const uint16_t *h, float *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		f[i] = x4_f16_to_f32(h[i]);
}

static void kv_case(int n_tok, int kv_lora, int d_rope, int pos, int max_ctx, uint64_t sd)
{
	char shape[128];
	snprintf(shape, sizeof shape, "tokens %d kv_lora %d rope %d pos %d max_ctx %d", n_tok,
		 kv_lora, d_rope, pos, max_ctx);
	rng_seed(sd);
	int cw = kv_lora + d_rope;
	float *kva = fvec((size_t)n_tok * cw, -3, 3), *g = fvec((size_t)kv_lora, 0.5f, 1.5f);
	float *om = omega_of(d_rope);
	size_t rows = (size_t)max_ctx + 2, nc = rows * cw; /* two guard rows past max_ctx */
	uint16_t *ref = hmalloc(nc * 2), *got = hmalloc(nc * 2);
	memset(ref, 0xff, nc * 2);
	x4r_kv_store(n_tok, kv_lora, d_rope, kva, g, 1e-6f, om, pos, ref, max_ctx);
	float *dkva = dput(kva, (size_t)n_tok * cw * 4), *dg = dput(g, (size_t)kv_lora * 4);
	float *dom = dput(om, (size_t)d_rope * 2);
	int *dpos = dint(pos);
	uint16_t *dc = dpoison(nc * 2);
	int rc = x4k_kv_store(n_tok, kv_lora, d_rope, dkva, dg, 1e-6f, dom, dpos, dc, max_ctx, st,
			      &err);
	T_OK(rc == 0, "kv_store launch", "%s: %s", shape, err.msg);
	dget(got, dc, nc * 2);
	int r0 = pos, r1 = pos + n_tok < max_ctx ? pos + n_tok : max_ctx;
	size_t nw = (size_t)(r1 - r0) * cw;
	float *gf = hmalloc(nw * 4), *rf = hmalloc(nw * 4);
	f16_to_f32v(got + (size_t)r0 * cw, gf, nw);
	f16_to_f32v(ref + (size_t)r0 * cw, rf, nw);
	/* fp16 storage: one rounding of 2^-11 relative, the fp32 arithmetic
	 * before it can move a value across a rounding boundary: 1 fp16 ulp;
	 * 4e-3 (docs/numerics.md 4) */
	check("kv_store", shape, gf, rf, NULL, nw, 4e-3, 1e-7, ELEM);
	bool guard = true;
	for (size_t i = 0; i < nc; i++)
		if (i < (size_t)r0 * cw || i >= (size_t)r1 * cw)
			guard = guard && got[i] == 0xffff;
	T_OK(guard, "kv_store writes only its rows", "%s", shape);
	{ /* with the query's norm in the same launch: the same cache bits, and q
	   * normed in place (fp32, 1e-5 relative, as norm_case) */
		const int nq = kv_lora + 37;
		float *q = fvec((size_t)n_tok * nq, -3, 3), *qg = fvec((size_t)nq, 0.5f, 1.5f);
		float *rq = hmalloc((size_t)n_tok * nq * 4), *gq = hmalloc((size_t)n_tok * nq * 4);
		x4r_rmsnorm(n_tok, nq, q, nq, qg, 1e-6f, rq, nq);
		float *dq = dput(q, (size_t)n_tok * nq * 4), *dqg = dput(qg, (size_t)nq * 4);
		uint16_t *dc2 = dpoison(nc * 2), *got2 = hmalloc(nc * 2);
		int rc2 = x4k_kv_store_norm(n_tok, kv_lora, d_rope, dkva, dg, 1e-6f, dom, dpos, dc2, max_ctx,
					    nq, dq, dqg, st, &err);
		dget(got2, dc2, nc * 2);
		dget(gq, dq, (size_t)n_tok * nq * 4);
		T_OK(rc2 == 0 && !memcmp(got, got2, nc * 2), "kv_store_norm cache = kv_store",
		     "%s: %s", shape, rc2 ? err.msg : "other bits");
		check("kv_store_norm q", shape, gq, rq, NULL, (size_t)n_tok * nq, 1e-5, 1e-30, ELEM);
		x4_dev_free(dq);
		x4_dev_free(dqg);
		x4_dev_free(dc2);
		free(q);
		free(qg);
		free(rq);
		free(gq);
		free(got2);
	}
	x4_dev_free(dkva);
	x4_dev_free(dg);
	x4_dev_free(dom);
	x4_dev_free(dpos);
	x4_dev_free(dc);
	free(kva);
	free(g);
	free(om);
	free(ref);
	free(got);
	free(gf);
	free(rf);
}

static void test_kv_store(void)
{
	kv_case(3, 40, 8, 5, 7, 71); /* the third row is past max_ctx */
	kv_case(1, full.kv_lora, full.d_rope, 4095, 4096, 72);
	kv_case(64, full.kv_lora, full.d_rope, 100, 4096, 73);
	kv_case(2, 2100, 600, 0, 8, 74); /* two rounds of loads; rope pairs past the block */
}
