/*
 * mla_decode.cu - decode attention over the fp16 latent cache, split across
 * the SMs (flash-decoding; the core is mla_attn.cuh), and the kernel that
 * combines the splits' partial max, sum and accumulators; and the tensor-core
 * variant of the same contract (mla_mma.cuh, x4k_mla_decode_mma).  The grid is fixed
 * by max_ctx; the context length comes from *pos on the device, so one graph
 * serves every step.
 */
#include "mla_attn.cuh"
#include "mla_mma.cuh"

using namespace x4c;

namespace {

bool aligned(const void *p, size_t n) { return ((uintptr_t)p % n) == 0; }

/* Does the current device give a block the shared memory of rounds of 64
 * (mla_mma.cuh: 173 KB; an sm_80 card allows 167, sm_86 and sm_89 101)?
 * Where not, the decode takes rounds of 32 (88 KB) at every context. */
bool round64_fits()
{
	static std::atomic<int> known[64]; /* a device's answer: 0 not read yet, 1 yes, 2 no */
	int dev = 0, optin = 0;
	if (cudaGetDevice(&dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return false;
	}
	if (dev >= 0 && dev < 64 && known[dev].load())
		return known[dev].load() == 1;
	if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return false;
	}
	const bool fits = (size_t)optin >= mla_mma::smem_bytes<2, 2>();
	if (dev >= 0 && dev < 64)
		known[dev].store(fits ? 1 : 2);
	return fits;
}

} /* namespace */

extern "C" int x4k_mla_decode(int n_head, int kv_lora, int d_rope, const float *qt,
			      const uint16_t *cache, int max_ctx, const int *pos, float kq_scale,
			      float *ob, void *ws, size_t ws_bytes, cudaStream_t s, x4_err *e)
{
	int cw = kv_lora + d_rope;
	if (n_head < 1 || n_head > 65535 * MLA_HG || kv_lora < 2 || kv_lora > 2 * MLA_THREADS ||
	    kv_lora % 2 || d_rope < 0 || d_rope % 2 || cw > 1024 || max_ctx < 1)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_decode: bad shape (%d heads, kv_lora %d "
				  "(even, <= 512), rope %d (even), row <= 1024, max_ctx %d)",
				  n_head, kv_lora, d_rope, max_ctx);
	if (!qt || !cache || !pos || !ob || !ws)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_decode: NULL buffer");
	if (!aligned(qt, 8) || !aligned(cache, 4) || !aligned(ob, 8) || !aligned(ws, 8))
		return x4_err_set(e, X4_EINVAL, "x4k_mla_decode: misaligned buffer");
	size_t need = x4k_mla_decode_workspace_bytes(n_head, kv_lora, max_ctx);
	if (ws_bytes < need)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_decode: workspace of %zu bytes, %zu needed",
				  ws_bytes, need);
	const int nsplit = mla_nsplit(max_ctx);
	mla_params a = mla_decode_params(qt, cache, pos, ob, ws, n_head, kv_lora, cw, max_ctx,
					  kq_scale, nsplit);
	dim3 grid(nsplit, (n_head + MLA_HG - 1) / MLA_HG, 1);
	X4C_MLA_CPI_SWITCH(cw, CPI, x4p::launch(mla_attn_kernel<CPI>, grid, dim3(MLA_THREADS), mla_smem_bytes(cw), s, a));
	int rc = x4_cuda_launched("x4k_mla_decode: attention", e);
	if (rc || nsplit == 1)
		return rc;
	return mla_combine_launch(a, nsplit, s, "x4k_mla_decode: combine", e);
}

extern "C" int x4k_mla_decode_mma(int n_head, int kv_lora, int d_rope, const float *qt,
				  const uint16_t *cache, int max_ctx, const int *pos, float kq_scale,
				  float *ob, void *ws, size_t ws_bytes, cudaStream_t s, x4_err *e)
{
	if (max_ctx < mla_mma::ROUND64_CTX || !round64_fits())
		return mla_mma::mla_mma_decode<2, 1>(n_head, kv_lora, d_rope, qt, cache, max_ctx, pos, kq_scale,
						     ob, ws, ws_bytes, s, e);
	return mla_mma::mla_mma_decode<2, 2>(n_head, kv_lora, d_rope, qt, cache, max_ctx, pos, kq_scale, ob,
					     ws, ws_bytes, s, e);
}
