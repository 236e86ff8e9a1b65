/*
 * embed.cu - the kernel lab for the embedding lookup (x4k_embed: a BF16
 * row of the [131072][3584] table widened into the 4 fp32 streams) for the
 * decode step's one token, the id read on the device.  L2 flushed between
 * repetitions.  Bytes: the row read, the 4 streams written.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/embed [new|all]
 */
#include "lab.h"
#include "x4_kern.h"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the embedding lookup, one token");
	const x4_config c = lab_model();
	const int V = c.n_vocab, D = c.n_embd, n_hc = c.n_hc;
	uint16_t *emb = lab_half((size_t)V * D, 101, false);
	float *H = (float *)lab_alloc((size_t)n_hc * D * 4);
	int32_t *id = (int32_t *)lab_alloc(sizeof(int32_t));
	int32_t tok = V / 2 + 7;
	LAB_CK(cudaMemcpy(id, &tok, sizeof tok, cudaMemcpyHostToDevice));
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	char nm[64];
	snprintf(nm, sizeof nm, "1tok_vocab%d_%dx%d", V, n_hc, D);
	if (L.run_new)
		lab_row(&L, "embed", "new", nm, 2.0 * D + 4.0 * n_hc * D, lab_time_us(&L, [&] {
				LAB_X4(x4k_embed(emb, V, D, n_hc, id, 1, H, L.s, &e), e);
			}));
	return 0;
}
