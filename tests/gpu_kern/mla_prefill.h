/*
 * mla_prefill.h - the cases of kernels/mla_prefill.cu (x4k_mla_prefill and
 * the tensor-core x4k_mla_prefill_mma; the test is mla_attn.h's), on the
 * caches of mla_decode.h's seeds where the sizes are the same.
 */

/* The tensor-core prefill's rows are each computed from their own query
 * and the cache alone, whatever block and chunk they fall in
 * (kernels/mla_prefill_mma.cuh): tokens pos+off .. pos+off+nb-1 as a chunk
 * of their own give the bits they have inside the chunk of na at pos. */
static void attn_chunking(struct attn_data *a, int na, int pos, int off, int nb, uint64_t sd)
{
	char shape[160];
	snprintf(shape, sizeof shape, "prefill mma chunking heads %d max_ctx %d pos %d tokens %d: "
		 "tokens %d..%d alone", a->n_head, a->max_ctx, pos, na, pos + off, pos + off + nb - 1);
	if (!t_want(NULL, shape))
		return;
	rng_seed(sd);
	const size_t row = (size_t)a->n_head * a->cw, orow = (size_t)a->n_head * a->kv_lora;
	float *qt = fvec((size_t)na * row, -0.5f, 0.5f);
	float *dq = dput(qt, (size_t)na * row * 4);
	float *dob = dpoison((size_t)na * orow * 4), *dob2 = dpoison((size_t)nb * orow * 4);
	int *dpa = dint(pos), *dpb = dint(pos + off);
	float *ga = hmalloc((size_t)na * orow * 4), *gb = hmalloc((size_t)nb * orow * 4);
	int ra = x4k_mla_prefill_mma(na, a->n_head, a->kv_lora, a->d_rope, dq, a->dcache, a->max_ctx,
				     dpa, full.kq_scale, dob, st, &err);
	int rb = ra ? ra : x4k_mla_prefill_mma(nb, a->n_head, a->kv_lora, a->d_rope, dq + (size_t)off * row,
					       a->dcache, a->max_ctx, dpb, full.kq_scale, dob2, st, &err);
	dget(ga, dob, (size_t)na * orow * 4);
	dget(gb, dob2, (size_t)nb * orow * 4);
	size_t diff = 0;
	for (size_t i = 0; i < (size_t)nb * orow; i++)
		diff += memcmp(&gb[i], &ga[(size_t)off * orow + i], 4) != 0;
	T_OK(ra == 0 && rb == 0 && diff == 0, "mla prefill mma chunking", "%s: rc %d/%d (%s), %zu of "
	     "%zu values differ", shape, ra, rb, ra || rb ? err.msg : "", diff, (size_t)nb * orow);
	x4_dev_free(dq);
	x4_dev_free(dob);
	x4_dev_free(dob2);
	x4_dev_free(dpa);
	x4_dev_free(dpb);
	free(qt);
	free(ga);
	free(gb);
}

/* The tensor-core prefill (`--attn mma` for a chunk of more than one token)
 * against the same reference and rule as the fp32 one, a second call's
 * bits, and the bits of a chunk's tokens on their own: chunks of 1, 7, 64
 * and 500 tokens, from position 0, mid-cache and up to the end of the
 * cache (and past it: clamped), at 32 heads (a block a token), 16 (a block
 * two tokens; 7 tokens are 3.5 blocks) and 48 (blocks across tokens);
 * sm_80 and later (SKIP below, after the refusals). */
static void test_mla_prefill_mma(void)
{
	/* refused shapes come back X4_EINVAL before anything is launched, on any device */
	{
		int *dpos = dint(0);
		float *dob = dpoison(2 * 3 * 40 * 4), *dq = dpoison(2 * 3 * 48 * 4);
		uint16_t *dc = dpoison(7 * 48 * 2);
		int rc = x4k_mla_prefill_mma(2, 3, 40, 8, dq, dc, 7, dpos, full.kq_scale, dob, st, &err);
		T_OK(rc == X4_EINVAL && strstr(err.msg, "heads a multiple of 16, kv_lora 512, rope 64"),
		     "mla prefill mma refuses a shape", "2 tokens, 3 heads, kv_lora 40, rope 8: rc %d, %s",
		     rc, err.msg);
		rc = x4k_mla_prefill_mma(65536, 32, 512, 64, dq, dc, 7, dpos, full.kq_scale, dob, st, &err);
		T_OK(rc == X4_EINVAL && strstr(err.msg, "up to 65535 tokens"),
		     "mla prefill mma refuses 65536 tokens", "rc %d, %s", rc, err.msg);
		rc = x4k_mla_prefill_mma(0, 32, 512, 64, NULL, NULL, 7, NULL, full.kq_scale, NULL, st, &err);
		T_OK(rc == 0, "mla prefill mma takes 0 tokens", "rc %d, %s", rc, err.msg);
		x4_dev_free(dpos);
		x4_dev_free(dob);
		x4_dev_free(dq);
		x4_dev_free(dc);
	}
	int dev = 0, major = 0, minor = 0;
	cudaGetDevice(&dev);
	cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
	cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
	if (major < 8) {
		printf("SKIP mla prefill mma: the tensor-core attention needs sm_80 or newer; this "
		       "device is sm_%d%d\n", major, minor);
		struct attn_data a;
		attn_make(&a, full.n_head, full.kv_lora, full.d_rope, 32, 110);
		float *dq = dpoison((size_t)2 * a.n_head * a.cw * 4);
		float *dob = dpoison((size_t)2 * a.n_head * a.kv_lora * 4);
		int *dpos = dint(0);
		int rc = x4k_mla_prefill_mma(2, a.n_head, a.kv_lora, a.d_rope, dq, a.dcache, a.max_ctx,
					     dpos, full.kq_scale, dob, st, &err);
		T_OK(rc == X4_EINVAL && strstr(err.msg, "needs sm_80 or newer"),
		     "mla prefill mma refuses the device", "rc %d, %s", rc, err.msg);
		x4_dev_free(dq);
		x4_dev_free(dob);
		x4_dev_free(dpos);
		attn_free(&a);
		return;
	}
	struct attn_data a;
	attn_make(&a, full.n_head, full.kv_lora, full.d_rope, 4096, 95);
	attn_case_k(&a, 1, 0, 120, true);    /* one token, one row */
	attn_case_k(&a, 7, 0, 121, true);    /* contexts 1..7: part tiles */
	attn_case_k(&a, 64, 0, 122, true);   /* contexts to 64 */
	attn_case_k(&a, 500, 0, 123, true);  /* contexts to 500: 16 tiles against 1 */
	attn_case_k(&a, 7, 2045, 124, true); /* mid-cache, across a tile edge (2048) */
	attn_case_k(&a, 500, 1500, 125, true);
	attn_case_k(&a, 64, 4032, 126, true); /* the chunk ends the cache */
	attn_case_k(&a, 1, 4095, 127, true);  /* the last row alone */
	attn_case_k(&a, 7, 4093, 128, true);  /* the last 4 tokens past max_ctx: clamped */
	attn_chunking(&a, 64, 1000, 10, 7, 129);
	attn_chunking(&a, 64, 1000, 63, 1, 130);
	attn_free(&a);
	attn_make(&a, full.n_head, full.kv_lora, full.d_rope, 32768, 102);
	attn_case_k(&a, 7, 32761, 131, true); /* contexts to the whole cache of 32768 */
	attn_free(&a);
	attn_make(&a, 16, full.kv_lora, full.d_rope, 1000, 132); /* a block two tokens */
	attn_case_k(&a, 1, 0, 133, true);    /* half a block */
	attn_case_k(&a, 7, 0, 134, true);    /* 3.5 blocks */
	attn_case_k(&a, 64, 500, 135, true);
	attn_case_k(&a, 500, 500, 136, true); /* the chunk ends the cache */
	attn_case_k(&a, 1, 999, 137, true);
	attn_chunking(&a, 64, 300, 9, 7, 138); /* odd offset: the tokens pair in other blocks */
	attn_free(&a);
	attn_make(&a, 48, full.kv_lora, full.d_rope, 1000, 139); /* blocks across tokens */
	attn_case_k(&a, 1, 0, 140, true);    /* 1.5 blocks */
	attn_case_k(&a, 7, 400, 141, true);  /* 10.5 blocks */
	attn_case_k(&a, 64, 936, 142, true); /* the chunk ends the cache */
	attn_chunking(&a, 64, 100, 5, 7, 143);
	attn_free(&a);
}

static void test_mla_prefill(void)
{
	struct attn_data a;
	attn_make(&a, 3, 40, 8, 7, 91); /* tiny: context 5 */
	attn_case(&a, 3, 2, 93); /* prefill rows 2..4 */
	attn_case(&a, 3, 5, 94); /* the last token past max_ctx: clamped */
	attn_free(&a);
	attn_make(&a, full.n_head, full.kv_lora, full.d_rope, 4096, 95);
	attn_case(&a, 16, 496, 99);  /* prefill to 512 */
	attn_case(&a, 8, 4088, 100); /* prefill to 4096 */
	attn_case(&a, 64, 4032, 101);
	attn_free(&a);
	test_mla_prefill_mma();
}
