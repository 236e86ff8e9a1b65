/*
 * mla_attn.h - the absorbed MLA attention's test, one for both entry points
 * as kernels/mla_attn.cuh is one core for both: x4k_mla_decode
 * (mla_decode.cu; its cases are mla_decode.h's) and x4k_mla_prefill
 * (mla_prefill.cu; mla_prefill.h) against x4r_mla_attn (lib/ref/ref_attn.c);
 * and their tensor-core variants of the same contracts, x4k_mla_decode_mma
 * (mla_mma.cuh; mla_decode.h's "decode mma" cases) and x4k_mla_prefill_mma
 * (mla_prefill_mma.cuh; mla_prefill.h's "prefill mma" cases), against the
 * same reference.
 */

struct attn_data {
	int n_head, kv_lora, d_rope, cw, max_ctx;
	uint16_t *cache; /* [max_ctx][cw] fp16 */
	uint16_t *dcache;
};

static void attn_make(struct attn_data *a, int n_head, int kv_lora, int d_rope, int max_ctx,
		      uint64_t sd)
{
	rng_seed(sd);
	a->n_head = n_head;
	a->kv_lora = kv_lora;
	a->d_rope = d_rope;
	a->cw = kv_lora + d_rope;
	a->max_ctx = max_ctx;
	a->cache = hvec((size_t)max_ctx * a->cw, 1.f);
	a->dcache = dput(a->cache, (size_t)max_ctx * a->cw * 2);
}

static void attn_free(struct attn_data *a)
{
	free(a->cache);
	x4_dev_free(a->dcache);
}

typedef int (*attn_decode_fn)(int, int, int, const float *, const uint16_t *, int, const int *,
			      float, float *, void *, size_t, cudaStream_t, x4_err *);
typedef int (*attn_prefill_fn)(int, int, int, int, const float *, const uint16_t *, int,
			       const int *, float, float *, cudaStream_t, x4_err *);

/* n_tok query tokens at pos..pos+n_tok-1 (decode when n_tok is 0: one token
 * through x4k_mla_decode; a chunk through x4k_mla_prefill; with mma their
 * tensor-core variants); a few rows made to dominate some heads, so the
 * running max moves between splits and between tiles. */
static void attn_case_k(struct attn_data *a, int n_tok, int pos, uint64_t sd, bool mma)
{
	bool decode = n_tok == 0;
	int nt = decode ? 1 : n_tok, cw = a->cw;
	attn_decode_fn dec = mma ? x4k_mla_decode_mma : x4k_mla_decode;
	attn_prefill_fn pre = mma ? x4k_mla_prefill_mma : x4k_mla_prefill;
	const char *kind = decode ? (mma ? "decode mma" : "decode") : (mma ? "prefill mma" : "prefill");
	char what[32], shape[160];
	snprintf(what, sizeof what, "mla %s", kind);
	snprintf(shape, sizeof shape, "%s heads %d kv_lora %d rope %d max_ctx %d pos %d tokens %d",
		 kind, a->n_head, a->kv_lora, a->d_rope, a->max_ctx, pos, nt);
	if (!t_want(NULL, shape)) /* another case of the filter's op */
		return;
	rng_seed(sd);
	size_t nq = (size_t)nt * a->n_head * cw, no = (size_t)nt * a->n_head * a->kv_lora;
	float *qt = fvec(nq, -0.5f, 0.5f);
	int len = pos + nt < a->max_ctx ? pos + nt : a->max_ctx;
	int loud[3] = { 0, len / 2, len - 1 };
	uint16_t saved[3][1024];
	for (int i = 0; i < 3; i++) { /* row = 0.5 sign(q of head i): a score near +10 */
		uint16_t *row = a->cache + (size_t)loud[i] * cw;
		memcpy(saved[i], row, (size_t)cw * 2);
		const float *q = qt + (size_t)(i % a->n_head) * cw;
		for (int c = 0; c < cw; c++)
			row[c] = x4_f32_to_f16(q[c] < 0 ? -0.5f : 0.5f);
		x4_dev_upload(a->dcache + (size_t)loud[i] * cw, row, (size_t)cw * 2, "row", &err);
	}
	float *ref = hmalloc(no * 4), *got = hmalloc(no * 4), *mag = hmalloc(no * 4);
	double smax = 0;
	x4r_mla_attn(nt, a->n_head, a->kv_lora, a->d_rope, qt, a->cache, a->max_ctx, pos,
		     full.kq_scale, ref, mag, &smax);
	float *dqt = dput(qt, nq * 4), *dob = dpoison(no * 4);
	int *dpos = dint(pos);
	size_t wsb = x4k_mla_decode_workspace_bytes(a->n_head, a->kv_lora, a->max_ctx);
	void *ws = dpoison(wsb);
	int rc = decode ? dec(a->n_head, a->kv_lora, a->d_rope, dqt, a->dcache, a->max_ctx, dpos,
			      full.kq_scale, dob, ws, wsb, st, &err)
			: pre(nt, a->n_head, a->kv_lora, a->d_rope, dqt, a->dcache, a->max_ctx, dpos,
			      full.kq_scale, dob, st, &err);
	T_OK(rc == 0, "attention launch", "%s: %s", shape, err.msg);
	dget(got, dob, no * 4);
	/* fp32 over fp16 rows (the reference reads the same fp16 values): the
	 * error is fp32 rounding in the 576-term scores and in sums over up
	 * to 32768 rows in two levels (a span, then the splits), measured
	 * against sum_tau P |row|: 1e-5 (docs/numerics.md 4) times 3 for the two levels
	 * and the scores' growth with |score| (largest here ~10).  The tensor-core
	 * variants are held to the same rule: their products are fp32-accurate
	 * (docs/numerics.md 1.7) */
	char sh2[200];
	snprintf(sh2, sizeof sh2, "%s (max |score| %.1f)", shape, smax);
	check(what, sh2, got, ref, mag, no, 3e-5, 1e-30, ELEM);
	if (decode || mma) { /* every sum in a fixed order: the same bits again */
		float *again = hmalloc(no * 4);
		char twice[48];
		snprintf(twice, sizeof twice, "%s twice", what);
		poison(dob, no * 4);
		rc = decode ? dec(a->n_head, a->kv_lora, a->d_rope, dqt, a->dcache, a->max_ctx, dpos,
				  full.kq_scale, dob, ws, wsb, st, &err)
			    : pre(nt, a->n_head, a->kv_lora, a->d_rope, dqt, a->dcache, a->max_ctx, dpos,
				  full.kq_scale, dob, st, &err);
		dget(again, dob, no * 4);
		T_OK(rc == 0 && !memcmp(again, got, no * 4), twice, "%s: a second call gave other bits",
		     shape);
		free(again);
	}
	for (int i = 2; i >= 0; i--) { /* put the rows back, last first (they may coincide) */
		memcpy(a->cache + (size_t)loud[i] * cw, saved[i], (size_t)cw * 2);
		x4_dev_upload(a->dcache + (size_t)loud[i] * cw, saved[i], (size_t)cw * 2, "row", &err);
	}
	x4_dev_free(dqt);
	x4_dev_free(dob);
	x4_dev_free(dpos);
	x4_dev_free(ws);
	free(qt);
	free(ref);
	free(got);
	free(mag);
}

static void attn_case(struct attn_data *a, int n_tok, int pos, uint64_t sd)
{
	attn_case_k(a, n_tok, pos, sd, false);
}
