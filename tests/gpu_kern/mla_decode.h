/*
 * mla_decode.h - the cases of kernels/mla_decode.cu (x4k_mla_decode and the
 * tensor-core x4k_mla_decode_mma; the test is mla_attn.h's).  A cache of each size is made from its seed, so a
 * cache shared with mla_prefill.h's cases holds the same rows.
 */

/* The tensor-core decode (`--attn mma`) at the model's shape, on the same
 * caches (the same seeds) as the fp32 cases, against the same reference and
 * rule, and a second call's bits; sm_80 and later (SKIP below). */
static void test_mla_decode_mma(void)
{
	/* refused shapes come back X4_EINVAL before anything is launched, on any device */
	{
		int *dpos = dint(0);
		float *dob = dpoison(3 * 40 * 4);
		size_t wsb = x4k_mla_decode_workspace_bytes(3, 40, 7);
		void *ws = dpoison(wsb);
		float *dq = dpoison(3 * 48 * 4);
		uint16_t *dc = dpoison(7 * 48 * 2);
		int rc = x4k_mla_decode_mma(3, 40, 8, dq, dc, 7, dpos, full.kq_scale, dob, ws, wsb, st,
					    &err);
		T_OK(rc == X4_EINVAL && strstr(err.msg, "heads a multiple of 16, kv_lora 512, rope 64"),
		     "mla decode mma refuses a shape", "3 heads, kv_lora 40, rope 8: rc %d, %s", rc,
		     err.msg);
		x4_dev_free(dpos);
		x4_dev_free(dob);
		x4_dev_free(ws);
		x4_dev_free(dq);
		x4_dev_free(dc);
	}
	int dev = 0, major = 0, minor = 0;
	cudaGetDevice(&dev);
	cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
	cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
	if (major < 8) {
		printf("SKIP mla decode mma: the tensor-core attention needs sm_80 or newer; this "
		       "device is sm_%d%d\n", major, minor);
		struct attn_data a;
		attn_make(&a, full.n_head, full.kv_lora, full.d_rope, 32, 110);
		float *dq = dpoison((size_t)a.n_head * a.cw * 4), *dob = dpoison((size_t)a.n_head * a.kv_lora * 4);
		int *dpos = dint(0);
		size_t wsb = x4k_mla_decode_workspace_bytes(a.n_head, a.kv_lora, a.max_ctx);
		void *ws = dpoison(wsb);
		int rc = x4k_mla_decode_mma(a.n_head, a.kv_lora, a.d_rope, dq, a.dcache, a.max_ctx, dpos,
					    full.kq_scale, dob, ws, wsb, st, &err);
		T_OK(rc == X4_EINVAL && strstr(err.msg, "needs sm_80 or newer"),
		     "mla decode mma refuses the device", "rc %d, %s", rc, err.msg);
		x4_dev_free(dq);
		x4_dev_free(dob);
		x4_dev_free(dpos);
		x4_dev_free(ws);
		attn_free(&a);
		return;
	}
	struct attn_data a;
	attn_make(&a, full.n_head, full.kv_lora, full.d_rope, 32, 110); /* one split: ob written directly */
	attn_case_k(&a, 0, 28, 111, true);
	attn_free(&a);
	attn_make(&a, full.n_head, full.kv_lora, full.d_rope, 4096, 95);
	attn_case_k(&a, 0, 0, 96, true);    /* one row */
	attn_case_k(&a, 0, 28, 112, true);  /* context 29: a part tile */
	attn_case_k(&a, 0, 511, 97, true);  /* context 512 */
	attn_case_k(&a, 0, 4095, 98, true); /* context 4096 */
	attn_free(&a);
	attn_make(&a, full.n_head, full.kv_lora, full.d_rope, 32768, 102);
	attn_case_k(&a, 0, 999, 113, true);   /* context 1000: a short span in the large grid */
	attn_case_k(&a, 0, 32766, 114, true); /* context 32767, one short of the cache */
	attn_case_k(&a, 0, 32767, 104, true); /* the whole cache */
	attn_free(&a);
}

static void test_mla_decode(void)
{
	struct attn_data a;
	attn_make(&a, 3, 40, 8, 7, 91); /* tiny: context 5 */
	attn_case(&a, 0, 4, 92);
	attn_free(&a);
	attn_make(&a, 3, 40, 8, 100, 105); /* tiny odd, split: 71 rows in 3 splits, the last of 7 */
	attn_case(&a, 0, 70, 106);
	attn_case(&a, 0, 99, 107);  /* every row: 4 splits, the last of 4 rows */
	attn_free(&a);
	attn_make(&a, full.n_head, full.kv_lora, full.d_rope, 4096, 95);
	attn_case(&a, 0, 0, 96);    /* one row */
	attn_case(&a, 0, 511, 97);  /* context 512 */
	attn_case(&a, 0, 4095, 98); /* context 4096 */
	attn_free(&a);
	attn_make(&a, full.n_head, full.kv_lora, full.d_rope, 32768, 102);
	attn_case(&a, 0, 1000, 103);  /* the same grid, a short span */
	attn_case(&a, 0, 32767, 104); /* the largest: context 32768 */
	attn_free(&a);
	test_mla_decode_mma();
}
