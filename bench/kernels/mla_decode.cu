/*
 * mla_decode.cu - the kernel lab for the decode attention (x4k_mla_decode:
 * the split attention and its combine) at 32 heads, the fp16 latent cache
 * of 576 a row, contexts 512 and 4096 in a cache of 4096 rows and 512,
 * 4096 and 32768 in a cache of 32768 rows (the grid is sized from the
 * cache, the spans from the context): the
 * splits of 317feb9 (old/mla_317.cuh: at least 128 rows, one dependent load
 * round at a time) against the library's, L2 flushed between repetitions.
 * Bytes: the cache rows attended (the queries, 74 KB, not counted).
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/mla_decode [old|new|all]
 */
#include "lab.h"
#include "x4_kern.h"
#include "old/mla_317.cuh"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the decode attention at contexts 512, 4096, 32768");
	const int n_head = 32, kv_lora = 512, d_rope = 64, cw = kv_lora + d_rope;
	const int max_ctx = 32768;
	const float kq_scale = 0.0721688f; /* 1/sqrt(192) */
	uint16_t *cache = lab_half((size_t)max_ctx * cw, 21, true);
	float *qt = lab_f32((size_t)n_head * cw, 22), *ob = (float *)lab_alloc((size_t)n_head * kv_lora * 4);
	int *pos = lab_int(0);
	size_t wsn = x4k_mla_decode_workspace_bytes(n_head, kv_lora, max_ctx);
	size_t wso = mla_317::workspace_bytes(n_head, kv_lora, max_ctx);
	void *ws_new = lab_alloc(wsn), *ws_old = lab_alloc(wso);
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	/* {cache rows, context}: the first 4096 rows serve as the smaller cache,
	 * whose workspaces the larger one's cover */
	const int runs[][2] = { { 4096, 512 }, { 4096, 4096 }, { max_ctx, 512 }, { max_ctx, 4096 },
				{ max_ctx, max_ctx } };
	for (const auto &run : runs) {
		const int rows = run[0], ctx = run[1];
		int p = ctx - 1;
		LAB_CK(cudaMemcpy(pos, &p, sizeof p, cudaMemcpyHostToDevice));
		char nm[64];
		snprintf(nm, sizeof nm, "ctx%d_of_%d", ctx, rows);
		double bytes = (double)ctx * cw * 2;
		if (L.run_old)
			lab_row(&L, "mla_decode", "old", nm, bytes, lab_time_us(&L, [&] {
					mla_317::decode(n_head, kv_lora, d_rope, qt, cache, rows, pos, kq_scale,
							ob, ws_old, L.s);
				}));
		if (L.run_new)
			lab_row(&L, "mla_decode", "new", nm, bytes, lab_time_us(&L, [&] {
					LAB_X4(x4k_mla_decode(n_head, kv_lora, d_rope, qt, cache, rows, pos,
							      kq_scale, ob, ws_new, wsn, L.s, &e), e);
				}));
	}
	return 0;
}
