/*
 * mla_decode.h - the cases of kernels/mla_decode.cu (x4k_mla_decode; the
 * test is mla_attn.h's).  A cache of each size is made from its seed, so a
 * cache shared with mla_prefill.h's cases holds the same rows.
 */

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
}
