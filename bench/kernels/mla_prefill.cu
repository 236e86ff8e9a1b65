/*
 * mla_prefill.cu - the kernel lab for the prefill attention
 * (x4k_mla_prefill: a block a token and 8 heads walks the causal rows, no
 * split) at 32 heads over the fp16 latent cache of 576 a row: chunks of 64
 * and of 512 tokens whose last token ends the context at 512, 4096 and
 * 32768, in a cache of 32768 rows (the rows past the context are never
 * read: the cache's size does not change the work).  L2 flushed between
 * repetitions.  Bytes: the context's cache rows once (each token re-reads
 * the rows it shares with its neighbours, from L2), qt read and ob written;
 * tflops: the scores (576) and the weighted sum (512) over every causal row
 * of every head, 2 flops a multiply-add.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/mla_prefill [new|all]
 */
#include "lab.h"
#include "x4_kern.h"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the prefill attention, 64 and 512 tokens, contexts to 32768");
	const x4_config c = lab_model();
	const int n_head = c.n_head, kv_lora = c.kv_lora, d_rope = c.d_rope, cw = kv_lora + d_rope;
	const int max_ctx = 32768, TMAX = 512;
	uint16_t *cache = lab_half((size_t)max_ctx * cw, 61, true);
	float *qt = lab_f32((size_t)TMAX * n_head * cw, 62);
	float *ob = (float *)lab_alloc((size_t)TMAX * n_head * kv_lora * 4);
	int *pos = lab_int(0);
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	const int toks[] = { 64, TMAX }, ctxs[] = { 512, 4096, max_ctx };
	for (int n : toks)
		for (int ctx : ctxs) {
			int p = ctx - n;
			LAB_CK(cudaMemcpy(pos, &p, sizeof p, cudaMemcpyHostToDevice));
			char nm[64];
			snprintf(nm, sizeof nm, "t%d_ctx%d_of_%d", n, ctx, max_ctx);
			double bytes = (double)ctx * cw * 2 + 4.0 * n * n_head * (cw + kv_lora);
			double rows = (double)n * p + 0.5 * n * (n + 1.0); /* sum over t of p + t + 1 */
			double flops = 2.0 * rows * n_head * (cw + kv_lora);
			if (L.run_new)
				lab_row(&L, "mla_prefill", "new", nm, bytes, lab_time_us(&L, [&] {
						LAB_X4(x4k_mla_prefill(n, n_head, kv_lora, d_rope, qt, cache,
								       max_ctx, pos, c.kq_scale, ob, L.s, &e), e);
					}), flops);
		}
	return 0;
}
