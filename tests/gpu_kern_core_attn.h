/*
 * gpu_kern_core_attn.h - the attention and sampling cases of
 * tests/gpu_kern_core.c (included once, by that file only: it uses its
 * helpers).
 */

/* ---------------- attention ---------------- */

struct attn_data {
	int n_head, kv_lora, d_rope, cw, max_ctx;
	uint16_t *cache; /* [max_ctx][cw] fp16 */
	uint16_t *dcache;
};

static void attn_make(struct attn_data *a, int n_head, int kv_lora, int d_rope, int max_ctx,
		      uint64_t sd)
{
	seed(sd);
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

/* n_tok query tokens at pos..pos+n_tok-1 (decode when n_tok is 0: one token
 * through x4k_mla_decode); a few rows made to dominate some heads, so the
 * running max moves between splits. */
static void attn_case(struct attn_data *a, int n_tok, int pos, uint64_t sd, bool time)
{
	bool decode = n_tok == 0;
	int nt = decode ? 1 : n_tok, cw = a->cw;
	char shape[160];
	snprintf(shape, sizeof shape, "%s heads %d kv_lora %d rope %d max_ctx %d pos %d tokens %d",
		 decode ? "decode" : "prefill", a->n_head, a->kv_lora, a->d_rope, a->max_ctx, pos, nt);
	seed(sd);
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
	int rc = decode ? x4k_mla_decode(a->n_head, a->kv_lora, a->d_rope, dqt, a->dcache, a->max_ctx,
					 dpos, full.kq_scale, dob, ws, wsb, st, &err)
			: x4k_mla_prefill(nt, a->n_head, a->kv_lora, a->d_rope, dqt, a->dcache,
					  a->max_ctx, dpos, full.kq_scale, dob, st, &err);
	T_OK(rc == 0, "attention launch", "%s: %s", shape, err.msg);
	dget(got, dob, no * 4);
	/* fp32 over fp16 rows (the reference reads the same fp16 values): the
	 * error is fp32 rounding in the 576-term scores and in sums over up
	 * to 32768 rows in two levels (a span, then the splits), measured
	 * against sum_tau P |row|: 1e-5 (docs/numerics.md 4) times 3 for the two levels
	 * and the scores' growth with |score| (largest here ~10) */
	char sh2[200];
	snprintf(sh2, sizeof sh2, "%s (max |score| %.1f)", shape, smax);
	check(decode ? "mla decode" : "mla prefill", sh2, got, ref, mag, no, 3e-5, 1e-30, ELEM);
	if (decode) { /* the splits combine in a fixed order: the same bits again */
		float *again = hmalloc(no * 4);
		repoison(dob, no * 4);
		rc = x4k_mla_decode(a->n_head, a->kv_lora, a->d_rope, dqt, a->dcache, a->max_ctx, dpos,
				    full.kq_scale, dob, ws, wsb, st, &err);
		dget(again, dob, no * 4);
		T_OK(rc == 0 && !memcmp(again, got, no * 4), "mla decode twice",
		     "%s: a second call gave other bits", shape);
		free(again);
	}
	if (time && decode) {
		char label[96];
		snprintf(label, sizeof label, "mla decode (32 heads, context %d)", len);
		TIME(label, x4k_mla_decode(a->n_head, a->kv_lora, a->d_rope, dqt, a->dcache,
					   a->max_ctx, dpos, full.kq_scale, dob, ws, wsb, st, &err));
	} else if (time) {
		char label[96];
		snprintf(label, sizeof label, "mla prefill (%d tokens, context %d)", nt, len);
		TIME(label, x4k_mla_prefill(nt, a->n_head, a->kv_lora, a->d_rope, dqt, a->dcache,
					    a->max_ctx, dpos, full.kq_scale, dob, st, &err));
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

static void test_attention(void)
{
	struct attn_data a;
	attn_make(&a, 3, 40, 8, 7, 91); /* tiny: context 5 */
	attn_case(&a, 0, 4, 92, false);
	attn_case(&a, 3, 2, 93, false);  /* prefill rows 2..4 */
	attn_case(&a, 3, 5, 94, false);  /* the last token past max_ctx: clamped */
	attn_free(&a);
	attn_make(&a, 3, 40, 8, 100, 105); /* tiny odd, split: 71 rows in 3 splits, the last of 7 */
	attn_case(&a, 0, 70, 106, false);
	attn_case(&a, 0, 99, 107, false);  /* every row: 4 splits, the last of 4 rows */
	attn_free(&a);
	attn_make(&a, full.n_head, full.kv_lora, full.d_rope, 4096, 95);
	attn_case(&a, 0, 0, 96, false);     /* one row */
	attn_case(&a, 0, 511, 97, true);    /* context 512 */
	attn_case(&a, 0, 4095, 98, true);   /* context 4096 */
	attn_case(&a, 16, 496, 99, false);  /* prefill to 512 */
	attn_case(&a, 8, 4088, 100, false); /* prefill to 4096 */
	attn_case(&a, 64, 4032, 101, true);
	attn_free(&a);
	attn_make(&a, full.n_head, full.kv_lora, full.d_rope, 32768, 102);
	attn_case(&a, 0, 1000, 103, false); /* the same grid, a short span */
	attn_case(&a, 0, 32767, 104, true); /* the largest: context 32768 */
	attn_free(&a);
}

/* ---------------- sampling ---------------- */

static void argmax_case(int n, const float *l, int32_t want, const char *what, bool time)
{
	float *dl = dput(l, (size_t)n * 4);
	int32_t *dout = dpoison(4), got = -7;
	size_t wsb = x4k_sample_workspace_bytes(n);
	void *ws = dpoison(wsb);
	int rc = x4k_argmax(n, dl, dout, ws, wsb, st, &err);
	dget(&got, dout, 4);
	T_OK(rc == 0 && got == want, "argmax", "%s, n %d: got %d want %d (%s)", what, n, got, want,
	     rc ? err.msg : "");
	if (time)
		TIME("argmax (131072 logits)", x4k_argmax(n, dl, dout, ws, wsb, st, &err));
	x4_dev_free(dl);
	x4_dev_free(dout);
	x4_dev_free(ws);
}

static void sample_case(int n, float temp, int top_k, float top_p, uint64_t sd, bool time)
{
	char shape[128];
	snprintf(shape, sizeof shape, "n %d T %g top-k %d top-p %g seed %llu", n, temp, top_k, top_p,
		 (unsigned long long)sd);
	seed(sd);
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
	if (time) {
		char label[96];
		snprintf(label, sizeof label, "sample (%d logits, top-k %d, top-p %g)", n, top_k, top_p);
		TIME(label, x4k_sample(n, dl, temp, top_k, top_p, sd, dctr, dout, ws, wsb, st, &err));
	}
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
	argmax_case(7, tiny, 1, "ties go to the lowest id, NaN skipped", false);
	const float nan3[3] = { NAN, NAN, NAN };
	argmax_case(3, nan3, 0, "every value NaN", false);
	const float ninf[3] = { NAN, -INFINITY, -INFINITY };
	argmax_case(3, ninf, 1, "-inf is a value", false);
	int n = full.n_vocab;
	seed(111);
	float *l = fvec((size_t)n, -20, 20);
	for (int i = 0; i < n; i += 997)
		l[i] = NAN;
	l[1234] = l[77777] = 25.f;
	argmax_case(n, l, 1234, "planted tie at 1234 and 77777", true);
	l[1234] = 24.f;
	argmax_case(n, l, 77777, "planted max at 77777", false);
	free(l);
	sample_case(5, 1.0f, 0, 1.0f, 121, false);
	sample_case(n, 0.8f, 0, 0.9f, 122, true);
	sample_case(n, 0.7f, 40, 0.95f, 123, true);
	sample_case(n, 1.3f, 0, 1.0f, 124, false);
	sample_case(n, 1.0f, 200000, 0.5f, 125, false); /* top-k past the vocabulary: all */
}
