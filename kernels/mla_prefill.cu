/*
 * mla_prefill.cu - prefill attention for a chunk of query tokens in the
 * absorbed form (the core is mla_attn.cuh): a block a token and 8 heads
 * walks the cache rows [0, *pos + t] (causal; the chunk's rows are stored
 * first), fp32 softmax, no split; each token re-reads the rows it shares
 * with its neighbours (from L2).  And the tensor-core variant of the same
 * contract (mla_prefill_mma.cuh, x4k_mla_prefill_mma), whose blocks share
 * each staged tile of rows among 32 (token, head) rows.
 */
#include "mla_attn.cuh"
#include "mla_prefill_mma.cuh"

using namespace x4c;

extern "C" int x4k_mla_prefill(int n_tok, int n_head, int kv_lora, int d_rope, const float *qt,
			       const uint16_t *cache, int max_ctx, const int *pos, float kq_scale,
			       float *ob, cudaStream_t s, x4_err *e)
{
	int cw = kv_lora + d_rope;
	if (n_tok < 0 || n_tok > 65535 || n_head < 1 || n_head > 65535 * MLA_HG || kv_lora < 2 ||
	    kv_lora > 2 * MLA_THREADS || kv_lora % 2 || d_rope < 0 || d_rope % 2 || cw > 1024 ||
	    max_ctx < 1)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_prefill: bad shape (%d tokens (<= 65535), "
				  "%d heads, kv_lora %d (even, <= 512), rope %d (even), row <= 1024, "
				  "max_ctx %d)", n_tok, n_head, kv_lora, d_rope, max_ctx);
	if (n_tok == 0)
		return 0;
	if (!qt || !cache || !pos || !ob)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_prefill: NULL buffer");
	if (((uintptr_t)qt % 8) || ((uintptr_t)cache % 4) || ((uintptr_t)ob % 8))
		return x4_err_set(e, X4_EINVAL, "x4k_mla_prefill: misaligned buffer");
	const mla_params a =
		mla_prefill_params(qt, cache, pos, ob, n_head, kv_lora, cw, max_ctx, kq_scale);
	dim3 grid(1, (n_head + MLA_HG - 1) / MLA_HG, n_tok);
	X4C_MLA_CPI_SWITCH(cw, CPI, mla_attn_kernel<CPI><<<grid, MLA_THREADS, mla_smem_bytes(cw), s>>>(a));
	return x4_cuda_launched("x4k_mla_prefill: attention", e);
}

extern "C" int x4k_mla_prefill_mma(int n_tok, int n_head, int kv_lora, int d_rope, const float *qt,
				   const uint16_t *cache, int max_ctx, const int *pos, float kq_scale,
				   float *ob, cudaStream_t s, x4_err *e)
{
	return mla_mma::mla_prefill_mma<2>(n_tok, n_head, kv_lora, d_rope, qt, cache, max_ctx, pos,
					   kq_scale, ob, s, e);
}
