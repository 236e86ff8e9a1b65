/*
 * embed.h - kernels/embed.cu (x4k_embed) against x4r_embed (lib/ref/ref_misc.c).
 */

static void embed_case(int n_vocab, int D, int n_hc, int n_tok, uint64_t sd)
{
	char shape[128];
	snprintf(shape, sizeof shape, "vocab %d D %d n_hc %d tokens %d", n_vocab, D, n_hc, n_tok);
	rng_seed(sd);
	uint16_t *emb = bvec((size_t)n_vocab * D, 1.f);
	int32_t *ids = hmalloc(sizeof *ids * (size_t)n_tok);
	for (int t = 0; t < n_tok; t++)
		ids[t] = (int32_t)(urand() * n_vocab);
	ids[n_tok - 1] = n_vocab - 1;
	size_t nh = (size_t)n_tok * n_hc * D;
	float *ref = hmalloc(nh * sizeof *ref), *got = hmalloc(nh * sizeof *got);
	x4r_embed(emb, n_vocab, D, n_hc, ids, n_tok, ref);
	void *demb = dput(emb, (size_t)n_vocab * D * 2), *dids = dput(ids, sizeof *ids * n_tok);
	float *dH = dpoison(nh * sizeof(float));
	int rc = x4k_embed(demb, n_vocab, D, n_hc, dids, n_tok, dH, st, &err);
	dget(got, dH, nh * sizeof *got);
	T_OK(rc == 0, "embed launch", "%s: %s", shape, err.msg);
	/* exact: a BF16 value widens to fp32 without rounding */
	check("embed", shape, got, ref, NULL, nh, 0, 0, ELEM);
	/* an id outside the vocabulary: a NaN row, no stray read */
	ids[0] = n_vocab;
	x4_dev_upload(dids, ids, sizeof *ids, "ids", &err);
	x4k_embed(demb, n_vocab, D, n_hc, dids, 1, dH, st, &err);
	dget(got, dH, sizeof(float) * (size_t)n_hc * D);
	bool nan_row = true;
	for (int i = 0; i < n_hc * D; i++)
		nan_row = nan_row && isnan(got[i]);
	T_OK(nan_row, "embed bad id", "%s: id %d did not give a NaN row", shape, n_vocab);
	x4_dev_free(demb);
	x4_dev_free(dids);
	x4_dev_free(dH);
	free(emb);
	free(ids);
	free(ref);
	free(got);
}

static void test_embed(void)
{
	embed_case(37, 96, 4, 5, 11);
	embed_case(4096, full.n_embd, full.n_hc, 7, 12);
}
