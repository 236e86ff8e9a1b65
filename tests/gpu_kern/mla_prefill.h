/*
 * mla_prefill.h - the cases of kernels/mla_prefill.cu (x4k_mla_prefill; the
 * test is mla_attn.h's), on the caches of mla_decode.h's seeds.
 */

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
}
