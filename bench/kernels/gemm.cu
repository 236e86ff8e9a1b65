/*
 * gemm.cu - the kernel lab for the prefill products Y = X W^T (x4k_gemm,
 * kernels/gemm_quant.cu) for a 512-token chunk at the model's dense
 * shapes: the dense FFN's and the shared expert's IQ4_NL gate/up and down,
 * the BF16 attention projections q_a, kv_a, q_b and attn_output.  One
 * variant (no old kernel is kept for it), L2 flushed between repetitions.
 * Bytes: the weights, X [512][k] and Y [512][n] fp32; tflops: 2 n k 512.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/gemm [new|all]
 */
#include "lab.h"
#include "x4_kern.h"

struct shape {
	int type, n, k;
	const char *name;
};

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times x4k_gemm for a 512-token chunk at the model's shapes");
	const x4_config c = lab_model();
	const int T = 512;
	const shape shapes[] = {
		{ X4_T_IQ4_NL, c.n_ff, c.n_embd, "dense_gate_up" },
		{ X4_T_IQ4_NL, c.n_embd, c.n_ff, "dense_down" },
		{ X4_T_IQ4_NL, c.n_ff_exp, c.n_embd, "shexp_gate_up" },
		{ X4_T_IQ4_NL, c.n_embd, c.n_ff_exp, "shexp_down" },
		{ X4_T_BF16, c.q_lora, c.n_embd, "attn_q_a" },
		{ X4_T_BF16, c.kv_lora + c.d_rope, c.n_embd, "attn_kv_a_mqa" },
		{ X4_T_BF16, c.n_head * c.d_qk, c.q_lora, "attn_q_b" },
		{ X4_T_BF16, c.n_embd, c.n_head * c.d_v, "attn_output" },
	};
	x4_err e = { 0 };
	for (const shape &sh : shapes) {
		size_t wb = x4_type_bytes(sh.type, (uint64_t)sh.n * sh.k);
		void *w = lab_alloc(wb);
		if (sh.type == X4_T_BF16)
			lab_fill_half<<<1024, 256>>>((uint16_t *)w, wb / 2, 41, false);
		else
			lab_bytes(w, wb, 41);
		float *x = lab_f32((size_t)T * sh.k, 42), *y = (float *)lab_alloc((size_t)T * sh.n * 4);
		LAB_CK(cudaDeviceSynchronize());
		char nm[96];
		snprintf(nm, sizeof nm, "%s_%s_%dx%d_t%d", sh.name, x4_type_name(sh.type), sh.n, sh.k, T);
		double bytes = (double)wb + 4.0 * T * sh.k + 4.0 * T * sh.n;
		if (L.run_new)
			lab_row(&L, "gemm", "new", nm, bytes, lab_time_us(&L, [&] {
					LAB_X4(x4k_gemm(sh.type, w, sh.n, sh.k, T, x, y, L.s, &e), e);
				}), 2.0 * sh.n * sh.k * T);
		LAB_CK(cudaFree(w));
		LAB_CK(cudaFree(x));
		LAB_CK(cudaFree(y));
	}
	return 0;
}
