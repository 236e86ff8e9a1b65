/*
 * kern_ws.c - the kernels' workspace sizes (lib/x4_kern.h section 0), in
 * every build: the CUDA trunk allocates by them and the memory plan
 * (lib/cuda/mem_plan.c) counts by them without a device, so the two cannot part.
 * The splits they use are the ones the kernels launch with (x4_kern.h).
 */
#include "x4_kern.h"

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

int x4k_moe_tile(int n_tok, int k)
{
	return (long long)n_tok * k <= 32 ? 4 : 64;
}

size_t x4k_moe_routes_bytes(int n_tok, int k, int n_expert, int tile)
{
	if (n_tok < 0 || k <= 0 || n_expert <= 0 || tile <= 0)
		return 0;
	size_t r = (size_t)n_tok * k, mt = (size_t)x4k_moe_max_tiles((int)r, n_expert, tile);
	return align256(r * 4) * 3 + align256((size_t)n_expert * 4) +
	       align256(((size_t)n_expert + 1) * 4) + align256(mt * 4) * 2 + align256(4) +
	       align256((size_t)n_tok * n_expert * 4);
}

size_t x4k_moe_experts_workspace_bytes(int n_tok, int k, int d, int f)
{
	if (n_tok < 0 || k <= 0 || d <= 0 || f <= 0)
		return 0;
	const size_t nr = (size_t)n_tok * k;
	return align256(nr * f * 4) + align256(nr * d * 4);
}

size_t x4k_hc_workspace_bytes(const x4k_hc_cfg *c, int n_tok)
{
	if (!c || c->n_hc < 1 || c->n_hc > 4 || c->D < 1 || n_tok < 0)
		return 0;
	size_t nc = X4K_HC_NCOEF(c->n_hc);
	/* a split call's partials, then (x4k_hc_pre_norm's side) its tokens'
	 * normalised projections */
	size_t fused = (size_t)n_tok * x4k_hc_nsplit(c->D, n_tok) * (nc + 1) + (size_t)n_tok * nc;
	size_t eager = (size_t)n_tok * (nc + 1);
	/* A workspace for n_tok serves every smaller call, and a split call of
	 * up to X4K_HC_SPLIT_MAX_TOK tokens can need more than n_tok unsplit
	 * ones (D 3584: 8 tokens need 22592 floats, 16 tokens 784). */
	int ns = n_tok < X4K_HC_SPLIT_MAX_TOK ? n_tok : X4K_HC_SPLIT_MAX_TOK;
	size_t split = (size_t)ns * x4k_hc_nsplit(c->D, ns) * (nc + 1) + (size_t)ns * nc;
	if (split > fused)
		fused = split;
	return ((size_t)n_tok * sizeof(unsigned) + 255) / 256 * 256 +
	       (fused > eager ? fused : eager) * sizeof(float);
}

size_t x4k_mla_decode_workspace_bytes(int n_head, int kv_lora, int max_ctx)
{
	if (n_head < 1 || kv_lora < 1 || max_ctx < 1)
		return 0;
	size_t ns = (size_t)x4k_mla_nsplit(max_ctx);
	return sizeof(float) * ns * (size_t)n_head * (2 + (size_t)kv_lora) + 256;
}
