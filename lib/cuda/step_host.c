/*
 * step_host.c - the persistent decode step's parameters (x4k_step,
 * lib/x4_kern.h section 5) from a trunk's bindings: one definition for the
 * CUDA trunk (device pointers, lib/cuda/trunk_cuda.c) and the CPU emulator
 * of the step (host pointers, bench/emu/emu_step.cc).
 */
#include "trunk_cuda.h"

#ifdef X4_HAVE_CUDA

void x4_step_layers(const x4_config *c, const x4_block_w *hw, const x4_block_dev *d,
		    uint16_t *cache, int max_ctx, x4k_step_layer *out)
{
	const size_t cw = (size_t)(c->kv_lora + c->d_rope);
	for (int b = 0; b < c->n_block; b++) {
		const x4_block_dev *s = &d[b];
		x4k_step_layer *L = &out[b];
		memset(L, 0, sizeof *L);
		L->hc_fn[0] = s->hc_attn_fn;
		L->hc_fn[1] = s->hc_ffn_fn;
		L->hc_base[0] = s->hc_attn_base;
		L->hc_base[1] = s->hc_ffn_base;
		L->hc_scale[0] = s->hc_attn_scale;
		L->hc_scale[1] = s->hc_ffn_scale;
		L->norm[0] = s->attn_norm;
		L->norm[1] = s->ffn_norm;
		L->q_a = s->attn_q_a;
		L->q_b = s->attn_q_b;
		L->kv_a = s->attn_kv_a_mqa;
		L->k_b = s->attn_k_b;
		L->v_b = s->attn_v_b;
		L->o = s->attn_output;
		L->q_a_norm = s->attn_q_a_norm;
		L->kv_a_norm = s->attn_kv_a_norm;
		if (hw[b].moe) {
			L->router = s->ffn_gate_inp;
			L->router_bias = s->exp_probs_b;
			L->gate_exps = s->ffn_gate_exps;
			L->up_exps = s->ffn_up_exps;
			L->down_exps = s->ffn_down_exps;
			L->gate_sh = s->ffn_gate_shexp;
			L->up_sh = s->ffn_up_shexp;
			L->down_sh = s->ffn_down_shexp;
		} else {
			L->gate = s->ffn_gate;
			L->up = s->ffn_up;
			L->down = s->ffn_down;
		}
		L->cache = cache + (size_t)b * (size_t)max_ctx * cw;
	}
}

void x4_step_params(const x4_config *c, const x4_block_w *hw, const x4k_step_layer *layers,
		    const void *token_embd, const void *output_norm, const void *output, int max_ctx,
		    const x4_cuda_ws *w, x4k_step_params *p)
{
	memset(p, 0, sizeof *p);
	p->D = c->n_embd;
	p->n_hc = c->n_hc;
	p->n_layer = c->n_block;
	p->q_lora = c->q_lora;
	p->kv_lora = c->kv_lora;
	p->d_nope = c->d_nope;
	p->d_rope = c->d_rope;
	p->n_head = c->n_head;
	p->d_v = c->d_v;
	p->n_vocab = c->n_vocab;
	p->F_d = c->n_ff;
	p->n_expert = c->n_expert;
	p->k = c->n_expert_used;
	p->F_e = c->n_ff_exp;
	p->F_sh = c->n_ff_exp * c->n_expert_shared;
	p->max_ctx = max_ctx;
	p->exp_type = X4_T_IQ4_NL;
	for (int b = 0; b < c->n_block; b++)
		if (hw[b].moe && hw[b].ffn_gate_exps) {
			p->exp_type = hw[b].ffn_gate_exps->type;
			break;
		}
	p->expert_norm = c->expert_norm;
	p->eps = c->rms_eps;
	p->kq_scale = c->kq_scale;
	p->expert_scale = c->expert_scale;
	p->hc = (x4k_hc_cfg){ c->n_hc, c->n_embd, c->sinkhorn_iters, c->rms_eps, c->hc_eps,
			      c->clamp_min, c->clamp_max };
	p->layers = layers;
	p->token_embd = token_embd;
	p->output_norm = output_norm;
	p->output = output;
	p->ids = w->ids;
	p->pos = w->pos;
	p->omega = w->omega;
	p->H = w->H;
	p->cq = w->cq;
	p->kva = w->kva;
	p->q = w->q;
	p->qt = w->qt;
	p->o = w->o;
	p->h = w->h;
	p->logits = w->logits;
	p->ws = w->step_ws;
	p->clock = NULL;
}

#else
typedef int x4_step_host_unused;
#endif
