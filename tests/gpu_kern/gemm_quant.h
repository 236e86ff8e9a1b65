/*
 * gemm_quant.h - kernels/gemm_quant.cu (x4k_gemm: the prefill products of
 * IQ4_NL, Q6_K and BF16 weights, on the FMA core and on the tensor-core
 * core, "core fma" and "core mma" in the case text) against x4r_gemm
 * (lib/ref/ref_gemv.c), by gemv_quant.h's run_product.
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

/* The tensor-core core (kernels/gemm_mma.cuh: 128-row x 64-token tiles,
 * IQ4_NL and BF16 with k % 32 == 0): the tiny preset's shapes (the shared
 * down's IQ4_NL rows of 72 bytes and q_b's 96 columns: rows at every even
 * offset of their 16-byte lines), then the model's at token counts from 1
 * to 600 (one token, a partial tile, the 64-token edge, several tiles),
 * the large ones checked on 8 tokens.  Each against the reference by the
 * FMA core's rule (TOL * mag) and rerun for the same bits. */
static const struct pcase gemm_mma_tiny[] = {
	{ X4_T_IQ4_NL, 512, 256, 37, 7000 }, { X4_T_IQ4_NL, 256, 512, 37, 7001 }, /* dense */
	{ X4_T_IQ4_NL, 128, 256, 37, 7002 }, { X4_T_IQ4_NL, 256, 128, 37, 7003 }, /* shared */
	{ X4_T_BF16, 96, 256, 37, 7004 }, { X4_T_BF16, 128, 256, 37, 7005 },     /* q_a, kv_a */
	{ X4_T_BF16, 384, 96, 37, 7006 }, { X4_T_BF16, 256, 128, 37, 7007 },     /* q_b, output */
	{ X4_T_IQ4_NL, 130, 160, 129, 7008 }, /* 90-byte rows, a row past two tiles */
};
static const int gemm_mma_tokens[] = { 1, 2, 63, 64, 65, 130, 333, 600 };
static const struct pcase gemm_mma_model[] = {
	{ X4_T_IQ4_NL, 9216, 3584, 0, 7100 }, { X4_T_IQ4_NL, 3584, 9216, 0, 7101 }, /* dense */
	{ X4_T_IQ4_NL, 1024, 3584, 0, 7102 }, { X4_T_IQ4_NL, 3584, 1024, 0, 7103 }, /* shared */
	{ X4_T_BF16, 768, 3584, 0, 7104 }, { X4_T_BF16, 576, 3584, 0, 7105 },       /* q_a, kv_a */
	{ X4_T_BF16, 6144, 768, 0, 7106 }, { X4_T_BF16, 3584, 4096, 0, 7107 },      /* q_b, output */
};

static void test_gemm_cases(void)
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

static void test_gemm(void)
{
	/* every case on each core: the FMA core stays what sm_75 and the odd
	 * shapes run; the tensor cores what sm_80 and later run by default */
	const int was = x4k_gemm_mma_get();
	x4k_gemm_mma_set(0);
	test_gemm_cases();
	x4k_gemm_mma_set(1);
	test_gemm_cases();
	for (size_t i = 0; i < X4_ARRAY_LEN(gemm_mma_tiny); i++)
		run_product("tiny preset", gemm_mma_tiny[i], 0);
	for (size_t i = 0; i < X4_ARRAY_LEN(gemm_mma_model); i++)
		for (size_t j = 0; j < X4_ARRAY_LEN(gemm_mma_tokens); j++) {
			struct pcase g = gemm_mma_model[i];
			g.t = gemm_mma_tokens[j];
			g.seed += 10 * j;
			run_product_op("model tokens", g, g.t > 65 ? 8 : 0, false);
		}
	x4k_gemm_mma_set(was);
}
