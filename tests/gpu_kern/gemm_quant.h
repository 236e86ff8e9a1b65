/*
 * gemm_quant.h - kernels/gemm_quant.cu (x4k_gemm: the prefill products of
 * IQ4_NL, Q6_K and BF16 weights) against x4r_gemm (lib/ref/ref_gemv.c), by
 * gemv_quant.h's run_product.
 */

/* tiny odd sizes: a row tile and a token tile with tails */
static const struct pcase gemm_tiny[] = {
	{ X4_T_IQ4_NL, 70, 96, 3, 1002 }, { X4_T_IQ4_NL, 70, 1184, 67, 1003 },
	{ X4_T_Q6_K, 70, 1280, 3, 1006 }, { X4_T_Q6_K, 7, 256, 67, 1007 },
	{ X4_T_BF16, 70, 13, 3, 1010 }, { X4_T_BF16, 70, 1031, 67, 1011 },
};

/* the largest: a 512-token prefill chunk on the widest matrices, checked on
 * 8 tokens, NaN-checked on all */
static const struct pcase gemm_big[] = {
	{ X4_T_IQ4_NL, 9216, 3584, 512, 4000 }, { X4_T_IQ4_NL, 3584, 9216, 512, 4001 },
	{ X4_T_BF16, 3584, 4096, 512, 4002 }, { X4_T_Q6_K, 131072, 3584, 64, 4003 },
};

static void test_gemm(void)
{
	for (size_t i = 0; i < X4_ARRAY_LEN(gemm_tiny); i++)
		run_product("tiny", gemm_tiny[i], 0);
	for (size_t i = 0; i < X4_ARRAY_LEN(gemv_model); i++) { /* the model's, as gemm */
		struct pcase g = gemv_model[i];
		g.t = g.type == X4_T_Q6_K ? 5 : 67;
		g.seed += 1000;
		run_product("model", g, 0);
	}
	for (size_t i = 0; i < X4_ARRAY_LEN(gemm_big); i++)
		run_product("largest", gemm_big[i], 8);
}
