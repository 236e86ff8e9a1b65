/*
 * mem_plan.c - the CUDA trunk's memory plan (x4.h section 6b), arithmetic
 * only, in every build: the workspace layout the trunk carves its pointers
 * by, the weights as the upload places them, the cache, the chunk's pick
 * and the longest context a card accepts (docs/record.md 5).
 */
#include "trunk_int.h"
#include "x4_kern.h"

static uintptr_t carve(uintptr_t *at, size_t n)
{
	uintptr_t p = (*at + 255) & ~(uintptr_t)255;
	*at = p + n;
	return p;
}

size_t x4_cuda_ws_layout(const x4_config *c, int max_ctx, int T, char *base, x4_cuda_ws *w)
{
	x4_cuda_ws tmp;
	if (!w)
		w = &tmp;
	size_t Tn = (size_t)T, D = (size_t)c->n_embd, hc = (size_t)c->n_hc;
	size_t nh = (size_t)c->n_head, cw = (size_t)(c->kv_lora + c->d_rope);
	/* the dense FFN's width, or the shared experts' side by side */
	size_t F = (size_t)X4_MAX(1, X4_MAX(c->n_ff, c->n_ff_exp * X4_MAX(1, c->n_expert_shared)));
	size_t ncoef = (size_t)X4K_HC_NCOEF(c->n_hc);
	int k = X4_MAX(1, c->n_expert_used), E = X4_MAX(1, c->n_expert);
	x4k_hc_cfg hcc = { c->n_hc, c->n_embd, c->sinkhorn_iters, c->rms_eps, c->hc_eps,
			   c->clamp_min, c->clamp_max };
	uintptr_t start = (uintptr_t)base, at = start;
#define F32(p, n) (w->p = (float *)carve(&at, sizeof(float) * (n)))
	F32(H, Tn * hc * D);
	F32(Hn, Tn * hc * D);
	F32(x, Tn * D);
	F32(xh, Tn * D);
	F32(y, Tn * D);
	F32(shared, Tn * D);
	F32(coef_a, Tn * ncoef);
	F32(coef_f, Tn * ncoef);
	F32(cq, Tn * (size_t)c->q_lora);
	F32(q, Tn * nh * (size_t)c->d_qk);
	F32(kva, Tn * cw);
	F32(qt, Tn * nh * cw);
	F32(ob, Tn * nh * (size_t)c->kv_lora);
	F32(o, Tn * nh * (size_t)c->d_v);
	F32(g, Tn * F);
	F32(u, Tn * F);
	F32(h, Tn * F);
	F32(hn, Tn * D);
	F32(logits, Tn * (size_t)c->n_vocab);
	F32(omega, (size_t)X4_MAX(1, c->d_rope / 2));
#undef F32
	w->hc_ws_bytes = x4k_hc_workspace_bytes(&hcc, T);
	w->hc_ws = (void *)carve(&at, w->hc_ws_bytes);
	/* The route table's size depends on the tile the token count picks
	 * (4 routes for decode sizes, 64 for prefill): the largest of all. */
	w->routes_ws_bytes = 0;
	for (int n = 1; n <= T; n++)
		w->routes_ws_bytes = X4_MAX(w->routes_ws_bytes,
					    x4k_moe_routes_bytes(n, k, E, x4k_moe_tile(n, k)));
	w->routes_ws = (void *)carve(&at, w->routes_ws_bytes);
	w->exp_ws_bytes = x4k_moe_experts_workspace_bytes(T, k, c->n_embd, X4_MAX(1, c->n_ff_exp));
	w->exp_ws = (void *)carve(&at, w->exp_ws_bytes);
	w->att_ws_bytes = x4k_mla_decode_workspace_bytes(c->n_head, c->kv_lora, max_ctx);
	w->att_ws = (void *)carve(&at, w->att_ws_bytes);
	w->ids = (int32_t *)carve(&at, sizeof(int32_t) * Tn);
	w->pos = (int *)carve(&at, sizeof(int));
	return (size_t)(carve(&at, 0) - start);
}

static uint64_t placed(const x4_gguf_tensor *t) { return t ? (t->nbytes + 255) & ~(uint64_t)255 : 0; }

uint64_t x4_mem_weight_bytes(const x4_model *m)
{
	uint64_t n = placed(m->token_embd) + placed(m->output_norm) + placed(m->output);
	for (int b = 0; b < m->c.n_block; b++) {
#define X4_COUNT_(f, ...) n += placed(m->blk[b].f);
		X4_BLOCK_TENSORS(X4_COUNT_)
#undef X4_COUNT_
	}
	return n;
}

uint64_t x4_mem_weight_bytes_specs(const x4_config *c, const x4_tensor_spec *t, int n)
{
	uint64_t sum = 0;
	for (int i = 0; i < n; i++) {
		if (t[i].block >= c->n_block)
			continue; /* NextN: not part of the trunk */
		uint64_t el = t[i].ne[0] * t[i].ne[1] * t[i].ne[2] * t[i].ne[3];
		sum += (x4_type_bytes(t[i].type, el) + 255) & ~(uint64_t)255;
	}
	return sum;
}

uint64_t x4_mem_cache_bytes(const x4_config *c, int max_ctx)
{
	return (uint64_t)c->n_block * (uint64_t)max_ctx * (uint64_t)(c->kv_lora + c->d_rope) * 2;
}

uint64_t x4_mem_ws_bytes(const x4_config *c, int max_ctx, int chunk)
{
	return x4_cuda_ws_layout(c, max_ctx, chunk, NULL, NULL);
}

int x4_mem_narrow_chunk(int max_ctx) { return X4_MIN(X4_MEM_NARROW_CHUNK, max_ctx); }

uint64_t x4_mem_ctx_need(const x4_config *c, int max_ctx, uint64_t reserve)
{
	return x4_mem_cache_bytes(c, max_ctx) +
	       x4_mem_ws_bytes(c, max_ctx, x4_mem_narrow_chunk(max_ctx)) + reserve;
}

int x4_mem_chunk(const x4_config *c, int max_ctx, int prefill_chunk, uint64_t room,
		 uint64_t reserve)
{
	uint64_t avail = room > reserve ? room - reserve : 0;
	if (prefill_chunk) {
		int T = X4_MIN(prefill_chunk, max_ctx);
		return x4_mem_ws_bytes(c, max_ctx, T) <= avail ? T : 0;
	}
	int floor_t = x4_mem_narrow_chunk(max_ctx);
	for (int T = X4_MEM_MAX_CHUNK; T >= 1; T /= 2) {
		int Tc = X4_MIN(T, max_ctx);
		if (x4_mem_ws_bytes(c, max_ctx, Tc) <= avail)
			return Tc;
		if (Tc <= floor_t)
			break;
	}
	return 0;
}

const char *x4_mem_verdict_name(int v)
{
	switch (v) {
	case X4_MEM_FITS: return "fits";
	case X4_MEM_NO_WEIGHTS: return "weights";
	case X4_MEM_NO_CONTEXT: return "context";
	case X4_MEM_NO_CHUNK: return "chunk";
	default: return "?";
	}
}

void x4_mem_plan_solve(const x4_config *c, uint64_t weight_bytes, int max_ctx,
		       int prefill_chunk, uint64_t usable, uint64_t reserve, x4_mem_plan *p)
{
	memset(p, 0, sizeof *p);
	p->max_ctx = max_ctx;
	p->narrow_chunk = x4_mem_narrow_chunk(max_ctx);
	p->usable = usable;
	p->reserve = reserve;
	p->weight_bytes = weight_bytes;
	p->cache_bytes = x4_mem_cache_bytes(c, max_ctx);
	p->narrow_ws_bytes = x4_mem_ws_bytes(c, max_ctx, p->narrow_chunk);
	p->room = (int64_t)usable - (int64_t)weight_bytes - (int64_t)p->cache_bytes;
	p->ws_bytes = p->narrow_ws_bytes;
	if (weight_bytes >= usable)
		p->verdict = X4_MEM_NO_WEIGHTS;
	else if (x4_mem_ctx_need(c, max_ctx, reserve) > usable - weight_bytes)
		p->verdict = X4_MEM_NO_CONTEXT;
	else if (!(p->chunk = x4_mem_chunk(c, max_ctx, prefill_chunk, (uint64_t)p->room, reserve)))
		p->verdict = X4_MEM_NO_CHUNK;
	if (p->chunk)
		p->ws_bytes = x4_mem_ws_bytes(c, max_ctx, p->chunk);
	else if (p->verdict == X4_MEM_NO_CHUNK)
		p->ws_bytes = x4_mem_ws_bytes(c, max_ctx, X4_MIN(prefill_chunk, max_ctx));
	p->free_after = p->room - (int64_t)p->ws_bytes;
}

int x4_mem_max_ctx(const x4_config *c, uint64_t weight_bytes, uint64_t usable,
		   uint64_t reserve)
{
	if (weight_bytes >= usable)
		return 0;
	uint64_t left = usable - weight_bytes;
	/* The need grows with max_ctx (the cache, the narrowest chunk up to
	 * 128, the decode attention's splits), so the fitting contexts are a
	 * prefix of [1, n_ctx_train]. */
	int lo = 0, hi = c->n_ctx_train; /* lo fits (0: trivially), the answer is in [lo, hi] */
	if (x4_mem_ctx_need(c, hi, reserve) <= left)
		return hi;
	while (hi - lo > 1) {
		int mid = lo + (hi - lo) / 2;
		if (x4_mem_ctx_need(c, mid, reserve) <= left)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}
