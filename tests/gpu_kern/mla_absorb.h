/*
 * mla_absorb.h - kernels/mla_absorb.cu (x4k_mla_absorb_q, x4k_mla_absorb_q_rope,
 * x4k_mla_expand_v: the per-head products around the absorbed attention)
 * against x4r_mla_absorb_q and x4r_mla_expand_v (lib/ref/ref_attn.c), on
 * both of their cores: chunks of 16 tokens and more take the tensor-core
 * tile (x4k_gemm_mma_set(1), sm_80 and later), the rest and every chunk
 * with x4k_gemm_mma_set(0) the FMA kernels.
 */

static void absorb_case(int n_tok, int n_head, int kv_lora, int d_nope, int d_rope, int d_v,
			uint64_t sd)
{
	char shape[160];
	snprintf(shape, sizeof shape, "tokens %d heads %d kv_lora %d nope %d rope %d v %d", n_tok,
		 n_head, kv_lora, d_nope, d_rope, d_v);
	rng_seed(sd);
	int dqk = d_nope + d_rope, cw = kv_lora + d_rope;
	size_t nq = (size_t)n_tok * n_head * dqk, nqt = (size_t)n_tok * n_head * cw;
	size_t nob = (size_t)n_tok * n_head * kv_lora, no = (size_t)n_tok * n_head * d_v;
	float *q = fvec(nq, -2, 2), *ob = fvec(nob, -1, 1);
	uint16_t *wkb = bvec((size_t)n_head * kv_lora * d_nope, 0.1f);
	uint16_t *wvb = bvec((size_t)n_head * d_v * kv_lora, 0.1f);
	float *rqt = hmalloc(nqt * 4), *gqt = hmalloc(nqt * 4), *ro = hmalloc(no * 4), *go = hmalloc(no * 4);
	x4r_mla_absorb_q(n_tok, n_head, kv_lora, d_nope, d_rope, wkb, q, rqt);
	x4r_mla_expand_v(n_tok, n_head, kv_lora, d_v, wvb, ob, ro);
	float *dq = dput(q, nq * 4), *dob = dput(ob, nob * 4);
	void *dkb = dput(wkb, (size_t)n_head * kv_lora * d_nope * 2);
	void *dvb = dput(wvb, (size_t)n_head * d_v * kv_lora * 2);
	float *dqt = dpoison(nqt * 4), *dout = dpoison(no * 4);
	int rc = x4k_mla_absorb_q(n_tok, n_head, kv_lora, d_nope, d_rope, dkb, dq, dqt, st, &err);
	T_OK(rc == 0, "absorb_q launch", "%s: %s", shape, err.msg);
	rc = x4k_mla_expand_v(n_tok, n_head, kv_lora, d_v, dvb, dob, dout, st, &err);
	T_OK(rc == 0, "expand_v launch", "%s: %s", shape, err.msg);
	dget(gqt, dqt, nqt * 4);
	dget(go, dout, no * 4);
	float *g = hmalloc(nob * 4), *r = hmalloc(nob * 4);
	bool tail = true;
	for (size_t th = 0; th < (size_t)n_tok * n_head; th++) {
		memcpy(g + th * kv_lora, gqt + th * cw, (size_t)kv_lora * 4);
		memcpy(r + th * kv_lora, rqt + th * cw, (size_t)kv_lora * 4);
		for (int j = kv_lora; j < cw; j++)
			tail = tail && isnan(gqt[th * cw + j]);
	}
	/* fp32 sums of BF16 x fp32 products (the BF16 weights are exact in
	 * fp32), normwise 1e-5: k <= 512 terms */
	check("absorb_q", shape, g, r, NULL, nob, 1e-5, 0, NORMWISE);
	T_OK(tail, "absorb_q leaves the rope part", "%s", shape);
	check("expand_v", shape, go, ro, NULL, no, 1e-5, 0, NORMWISE);
	{ /* absorb and the q rope in one launch: the bits of absorb_q then rope */
		float *om = omega_of(d_rope), *dom = dput(om, sizeof(float) * (size_t)(d_rope / 2));
		int *dpos = dint(1000 + n_tok);
		float *dqt2 = dpoison(nqt * 4), *g1 = hmalloc(nqt * 4), *g2 = hmalloc(nqt * 4);
		poison(dqt, nqt * 4);
		rc = x4k_mla_absorb_q(n_tok, n_head, kv_lora, d_nope, d_rope, dkb, dq, dqt, st, &err);
		if (!rc)
			rc = x4k_rope(n_tok, n_head, d_rope, dq + d_nope, (long)n_head * dqk, dqk,
				      dqt + kv_lora, (long)n_head * cw, cw, dom, dpos, st, &err);
		int rc2 = x4k_mla_absorb_q_rope(n_tok, n_head, kv_lora, d_nope, d_rope, dkb, dq, dqt2, dom,
						dpos, st, &err);
		dget(g1, dqt, nqt * 4);
		dget(g2, dqt2, nqt * 4);
		T_OK(rc == 0 && rc2 == 0 && !memcmp(g1, g2, nqt * 4), "absorb_q_rope = absorb_q, rope",
		     "%s: %s", shape, rc || rc2 ? err.msg : "other bits");
		check_written("absorb_q_rope writes all of qt", shape, g2, nqt);
		x4_dev_free(dom);
		x4_dev_free(dpos);
		x4_dev_free(dqt2);
		free(om);
		free(g1);
		free(g2);
	}
	x4_dev_free(dq);
	x4_dev_free(dob);
	x4_dev_free(dkb);
	x4_dev_free(dvb);
	x4_dev_free(dqt);
	x4_dev_free(dout);
	free(q);
	free(ob);
	free(wkb);
	free(wvb);
	free(rqt);
	free(gqt);
	free(ro);
	free(go);
	free(g);
	free(r);
}

static void test_absorb(void)
{
	const int was = x4k_gemm_mma_get();
	absorb_case(3, 3, 40, 10, 8, 6, 81);
	absorb_case(3, 3, 64, 16, 8, 6, 84); /* the 16-byte path: 2 and 8 lanes a row, 6 rows */
	absorb_case(1, full.n_head, full.kv_lora, full.d_nope, full.d_rope, full.d_v, 82);
	absorb_case(15, full.n_head, full.kv_lora, full.d_nope, full.d_rope, full.d_v, 85);
	/* the tensor-core tile: its smallest chunk, partial row and token tiles
	 * (160 and 40 rows, 77 tokens), the model's shapes up to the largest
	 * chunk (X4_MEM_MAX_CHUNK) */
	absorb_case(16, full.n_head, full.kv_lora, full.d_nope, full.d_rope, full.d_v, 86);
	absorb_case(77, 3, 160, 32, 8, 40, 87);
	absorb_case(64, full.n_head, full.kv_lora, full.d_nope, full.d_rope, full.d_v, 83);
	absorb_case(X4_MEM_MAX_CHUNK, full.n_head, full.kv_lora, full.d_nope, full.d_rope, full.d_v, 88);
	x4k_gemm_mma_set(0); /* the FMA kernels at chunks the tile would take */
	absorb_case(77, 3, 160, 32, 8, 40, 89);
	absorb_case(64, full.n_head, full.kv_lora, full.d_nope, full.d_rope, full.d_v, 90);
	x4k_gemm_mma_set(was);
}
