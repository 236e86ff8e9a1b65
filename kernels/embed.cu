/*
 * embed.cu - the embedding lookup into the four fp32 streams (docs/forward.md 4):
 * every stream starts as the same widened BF16 row.  The ids are read on
 * the device, so a sampled id feeds the next decode step with no read-back.
 */
#include "core_dev.cuh"

namespace {

__global__ void embed_kernel(const uint16_t *__restrict__ emb, int n_vocab, int D, int n_hc,
			     const int32_t *__restrict__ ids, float *__restrict__ H)
{
	const int tok = blockIdx.y;
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= D)
		return;
	const int32_t id = ids[tok];
	/* an id the host should have refused: a loud NaN row, never a stray read */
	float v = id >= 0 && id < n_vocab ? x4c::bf16(emb[(size_t)id * D + i]) : __int_as_float(0x7fc00000);
	float *h = H + (size_t)tok * n_hc * D;
	for (int s = 0; s < n_hc; s++)
		h[(size_t)s * D + i] = v;
}

} /* namespace */

extern "C" int x4k_embed(const uint16_t *emb, int n_vocab, int D, int n_hc, const int32_t *ids,
			 int n_tok, float *H, cudaStream_t s, x4_err *e)
{
	if (n_vocab < 1 || D < 1 || n_hc < 1 || n_tok < 0 || n_tok > 65535)
		return x4_err_set(e, X4_EINVAL, "x4k_embed: bad shape (vocab %d, D %d, %d streams, "
				  "%d tokens)", n_vocab, D, n_hc, n_tok);
	if (n_tok == 0)
		return 0;
	if (!emb || !ids || !H)
		return x4_err_set(e, X4_EINVAL, "x4k_embed: NULL buffer");
	embed_kernel<<<dim3((D + 255) / 256, n_tok), 256, 0, s>>>(emb, n_vocab, D, n_hc, ids, H);
	return x4_cuda_launched("x4k_embed: launch", e);
}
