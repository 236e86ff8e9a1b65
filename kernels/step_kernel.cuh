/*
 * step_kernel.cuh - the persistent decode step's kernel (x4k_step; the
 * launcher is kernels/step.cu, docs/step.md): the phases' prologues that
 * are not weight streams (the norms, the cache row, q's rope, the
 * attention, the combine, the router's choice, the head's norm) and the
 * kernel that runs every phase in order, on step_tasks.cuh's phases.
 * Separate from step.cu so that the CPU emulator (bench/emu) compiles the
 * same text.
 */
#ifndef X4_STEP_KERNEL_CUH
#define X4_STEP_KERNEL_CUH

#include "moe_dev.cuh"
#include "step_tasks.cuh"

namespace x4s {

/* ---------------- A2, A3, A5, A6, F2, F3 and head prologues ---------------- */

/* A2: c_q = RMS_q_a_norm(cq) into xs; on the last block also the cache
 * row (docs/forward.md 6.1, 6.3: kv_store_kernel's expressions). */
template <int NW> __device__ __noinline__ void pro_qnorm(Blk &B, const x4k_step_layer *L)
{
	constexpr int NT = 32 * NW;
	const x4k_step_params &p = *B.p;
	const int ql = p.q_lora;
	float ss = 0.f;
	for (int i = tid_(); i < ql; i += NT) {
		const float v = ldcg(p.cq + i);
		B.xs[i] = v;
		ss = fmaf(v, v, ss);
	}
	ss = x4c::block_sum(ss, B.red);
	const float inv = 1.0f / sqrtf(ss / (float)ql + p.eps);
	for (int i = tid_(); i < ql; i += NT)
		B.xs[i] = (B.xs[i] * inv) * L->q_a_norm[i];
	if (B.b == B.G - 1) {
		const int kvl = p.kv_lora, cw = kvl + p.d_rope, pos = p.pos[0];
		float kss = 0.f;
		for (int i = tid_(); i < kvl; i += NT) {
			const float v = ldcg(p.kva + i);
			kss = fmaf(v, v, kss);
		}
		kss = x4c::block_sum(kss, B.red);
		const float kinv = 1.0f / sqrtf(kss / (float)kvl + p.eps);
		__half *row = reinterpret_cast<__half *>(L->cache) + (size_t)pos * cw;
		for (int i = tid_(); i < kvl; i += NT)
			row[i] = __float2half_rn((ldcg(p.kva + i) * kinv) * L->kv_a_norm[i]);
		for (int i = tid_(); i < p.d_rope / 2; i += NT) {
			const float2 r = x4c::rope_pair(ldcg(p.kva + kvl + 2 * i), ldcg(p.kva + kvl + 2 * i + 1), pos,
							p.omega[i]);
			row[kvl + 2 * i] = __float2half_rn(r.x);
			row[kvl + 2 * i + 1] = __float2half_rn(r.y);
		}
	}
	__syncthreads();
}

/* A3: q (every head's d_qk) into xs, and the roped q_r of every head into
 * q-tilde's last d_rope values, spread over the grid. */
template <int NW> __device__ __noinline__ void pro_q(Blk &B)
{
	constexpr int NT = 32 * NW;
	const x4k_step_params &p = *B.p;
	const int dqk = p.d_nope + p.d_rope, cw = p.kv_lora + p.d_rope, hr = p.d_rope / 2;
	copy_ldcg(B.xs, p.q, p.n_head * dqk, tid_(), NT);
	const int pos = p.pos[0];
	for (int g = tid_() + NT * B.b; g < p.n_head * hr; g += NT * B.G) {
		const int h = g / hr, i = g % hr;
		const float *qr = p.q + (size_t)h * dqk + p.d_nope + 2 * i;
		const float2 r = x4c::rope_pair(ldcg(qr), ldcg(qr + 1), pos, p.omega[i]);
		p.qt[(size_t)h * cw + p.kv_lora + 2 * i] = r.x;
		p.qt[(size_t)h * cw + p.kv_lora + 2 * i + 1] = r.y;
	}
	__syncthreads();
}

/* A4: the attention of docs/forward.md 6.4, absorbed, in fp32 over the
 * fp16 cache (docs/numerics.md 1.7): block b takes the head group b % HG
 * (NH heads) and the split b / HG of the positions [0, pos], in tiles of
 * AT_T rows staged into the ring's memory (free in this phase); scores
 * a (head, row) pair on NSPL threads, an online softmax a head on a warp,
 * the value sums 8 latent columns a thread.  Partials: the running max,
 * the sum of exponentials and the unnormalised sums of each (split, head). */
template <int NW> __device__ __noinline__ void attention(Blk &B, const x4k_step_layer *L)
{
	constexpr int NT = 32 * NW;
	const x4k_step_params &p = *B.p;
	const int kvl = p.kv_lora, cw = kvl + p.d_rope, nhd = p.n_head;
	const int len = p.pos[0] + 1, NH = att_heads(nhd), HG = nhd / NH;
	int S, span;
	att_split(len, B.G, HG, &S, &span);
	const int s = B.b / HG, h0 = (B.b % HG) * NH, t0 = s * span, t1 = min(len, t0 + span);
	if (s >= S)
		return; /* uniform over the block */
	const int RS = cw + 8; /* a staged row: 16 bytes of padding against bank conflicts */
	const int NSPL = NT / (NH * AT_T), dspl = cw / NSPL;
	__half *rows = reinterpret_cast<__half *>(B.ring);
	float *scp = reinterpret_cast<float *>(B.ring + (((size_t)AT_T * RS * 2 + 15) & ~(size_t)15));
	float *P = scp + NSPL * NH * AT_T, *alpha = P + NH * AT_T, *mrun = alpha + NH, *lrun = mrun + NH;
	copy_ldcg(B.xs, p.qt + (size_t)h0 * cw, NH * cw, tid_(), NT);
	if (tid_() < NH) {
		mrun[tid_()] = -INFINITY;
		lrun[tid_()] = 0.f;
	}
	const int tau = tid_() % AT_T, hh = (tid_() / AT_T) % NH, sp = tid_() / (AT_T * NH);
	const int nchk = NH * kvl / 8, per = kvl / 8;
	float acc[2][8];
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int j = 0; j < 8; j++)
			acc[i][j] = 0.f;
	const char *cache = reinterpret_cast<const char *>(L->cache);
	for (int tb = t0; tb < t1; tb += AT_T) {
		const int nr = min(AT_T, t1 - tb), lines = cw / 8;
		for (int q = tid_(); q < nr * lines; q += NT) {
			const int r = q / lines, o = q % lines;
			cp16(rows + (size_t)r * RS + 8 * o, cache + ((size_t)(tb + r) * cw + 8 * o) * 2, 16);
		}
		commit();
		wait_pending(0);
		__syncthreads();
		if (sp < NSPL) { /* this thread's part of the score (hh, tau) */
			float a = 0.f;
			if (tau < nr) {
				const float *q = B.xs + (size_t)hh * cw + sp * dspl;
				const __half *k = rows + (size_t)tau * RS + sp * dspl;
				for (int c = 0; c < dspl; c += 8) {
					const uint4 kv = *reinterpret_cast<const uint4 *>(k + c);
					const float4 q0 = *reinterpret_cast<const float4 *>(q + c);
					const float4 q1 = *reinterpret_cast<const float4 *>(q + c + 4);
					const __half *kh = reinterpret_cast<const __half *>(&kv);
					a = fmaf(q0.x, __half2float(kh[0]), a);
					a = fmaf(q0.y, __half2float(kh[1]), a);
					a = fmaf(q0.z, __half2float(kh[2]), a);
					a = fmaf(q0.w, __half2float(kh[3]), a);
					a = fmaf(q1.x, __half2float(kh[4]), a);
					a = fmaf(q1.y, __half2float(kh[5]), a);
					a = fmaf(q1.z, __half2float(kh[6]), a);
					a = fmaf(q1.w, __half2float(kh[7]), a);
				}
			}
			scp[(sp * NH + hh) * AT_T + tau] = a;
		}
		__syncthreads();
		if (warp_() < NH) { /* head h's online softmax, a lane a row */
			const int h = warp_();
			float sc = -INFINITY;
			if (lane_() < nr) {
				float d = 0.f;
				for (int q = 0; q < NSPL; q++)
					d += scp[(q * NH + h) * AT_T + lane_()];
				sc = d * p.kq_scale;
			}
			const float mold = mrun[h], mnew = fmaxf(mold, x4c::warp_max(sc));
			const float pr = lane_() < nr ? expf(sc - mnew) : 0.f;
			const float sum = x4c::warp_sum(pr);
			P[h * AT_T + lane_()] = pr;
			__syncwarp();
			if (lane_() == 0) {
				const float al = expf(mold - mnew);
				alpha[h] = al;
				mrun[h] = mnew;
				lrun[h] = lrun[h] * al + sum;
			}
		}
		__syncthreads();
#pragma unroll
		for (int i = 0; i < 2; i++) { /* this thread's 8 latent columns of a head */
			const int ci = tid_() + NT * i;
			if (ci >= nchk)
				break;
			const int h = ci / per, c0 = 8 * (ci % per);
			const float al = alpha[h];
#pragma unroll
			for (int j = 0; j < 8; j++)
				acc[i][j] *= al;
			for (int r = 0; r < nr; r++) {
				const float pr = P[h * AT_T + r];
				const uint4 vv = *reinterpret_cast<const uint4 *>(rows + (size_t)r * RS + c0);
				const __half *vh = reinterpret_cast<const __half *>(&vv);
#pragma unroll
				for (int j = 0; j < 8; j++)
					acc[i][j] = fmaf(pr, __half2float(vh[j]), acc[i][j]);
			}
		}
		__syncthreads(); /* the rows and P are the next tile's */
	}
	if (tid_() < NH) {
		B.pm[(size_t)s * nhd + h0 + tid_()] = mrun[tid_()];
		B.pl[(size_t)s * nhd + h0 + tid_()] = lrun[tid_()];
	}
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const int ci = tid_() + NT * i;
		if (ci >= nchk)
			break;
		const int h = ci / per, c0 = 8 * (ci % per);
		float *o = B.pacc + ((size_t)s * nhd + h0 + h) * kvl + c0;
#pragma unroll
		for (int j = 0; j < 8; j++)
			o[j] = acc[i][j];
	}
	/* every read of the tile's memory (mrun, lrun) before a warp's ring
	 * copies into it: the next phase's items are issued right after */
	__syncthreads();
}

/* A5: o-bar of this block's heads [hlo, hhi] into xs (kv_lora a head): the
 * splits combined in order, each weighted by exp(its max - the max). */
template <int NW> __device__ __noinline__ void pro_combine(Blk &B, int ntask, int R)
{
	constexpr int NT = 32 * NW;
	const x4k_step_params &p = *B.p;
	const int kvl = p.kv_lora, nhd = p.n_head;
	int lo, hi;
	run_of(ntask, B.b, B.G, lo, hi);
	if (lo < hi) {
		const int hlo = lo * R / p.d_v, hhi = (hi * R - 1) / p.d_v, nb = hhi - hlo + 1;
		const int len = p.pos[0] + 1;
		int S, span;
		att_split(len, B.G, nhd / att_heads(nhd), &S, &span);
		float *w = B.xs + XS - nb * (S + 1); /* [nb][S] weights, then [nb] 1 / sums */
		for (int hb = warp_(); hb < nb; hb += NW) {
			const int h = hlo + hb;
			float m = -INFINITY;
			for (int q = lane_(); q < S; q += 32)
				m = fmaxf(m, ldcg(B.pm + (size_t)q * nhd + h));
			m = x4c::warp_max(m);
			float l = 0.f;
			for (int q = lane_(); q < S; q += 32) {
				const float e = expf(ldcg(B.pm + (size_t)q * nhd + h) - m);
				w[hb * S + q] = e;
				l = fmaf(e, ldcg(B.pl + (size_t)q * nhd + h), l);
			}
			l = x4c::warp_sum(l);
			if (lane_() == 0)
				w[nb * S + hb] = 1.0f / l;
		}
		__syncthreads();
		for (int i = tid_(); i < nb * kvl; i += NT) {
			const int hb = i / kvl, c = i % kvl, h = hlo + hb;
			const float *src = B.pacc + (size_t)h * kvl + c; /* split q at q * nhd * kvl */
			float a = 0.f;
			for (int q0 = 0; q0 < S; q0 += 8) { /* 8 loads in flight, the sum in split order */
				float t[8];
#pragma unroll
				for (int u = 0; u < 8; u++)
					t[u] = q0 + u < S ? ldcg(src + (size_t)(q0 + u) * nhd * kvl) : 0.f;
#pragma unroll
				for (int u = 0; u < 8; u++)
					if (q0 + u < S)
						a = fmaf(w[hb * S + q0 + u], t[u], a);
			}
			B.xs[i] = a * w[nb * S + hb];
		}
	}
	__syncthreads();
}

/* n floats of global src (an activation) into xs at off. */
template <int NW> __device__ __noinline__ void pro_load(Blk &B, const float *src, int n, int off)
{
	copy_ldcg(B.xs + off, src, n, tid_(), 32 * NW);
}

/* F2: the router's choice (docs/forward.md 7.2) on warp 0: the scores, the
 * top k (moe_select_token, the router kernels' rule), then the choice in
 * ascending expert id, the order the downs are summed in. */
template <int NW> __device__ __noinline__ void pro_topk(Blk &B, const x4k_step_layer *L)
{
	const x4k_step_params &p = *B.p;
	if (warp_() == 0) {
		float *g = B.sw; /* [n_expert] scores */
		for (int e = lane_(); e < p.n_expert; e += 32)
			g[e] = 1.f / (1.f + expf(-ldcg(B.lg + e)));
		__syncwarp();
		int32_t *sel = reinterpret_cast<int32_t *>(B.sw + MAXE);
		float *wts = B.sw + MAXE + MAXK;
		x4c::moe_select_token<true>(0, lane_(), p.n_expert, p.k, g, L->router_bias, p.expert_scale,
				      p.expert_norm != 0, sel, wts);
		__syncwarp();
		if (lane_() == 0) {
			int n = 0;
			for (int i = 0; i < p.k; i++) { /* insertion by id */
				const int e = sel[i];
				if (e < 0 || e >= p.n_expert)
					continue;
				int j = n++;
				for (; j > 0 && B.ssel[j - 1] > e; j--) {
					B.ssel[j] = B.ssel[j - 1];
					B.swts[j] = B.swts[j - 1];
				}
				B.ssel[j] = e;
				B.swts[j] = wts[i];
			}
			B.snsel[0] = n;
		}
	}
	__syncthreads();
}

/* F3's end: y at this block's columns, the routed terms in ascending id
 * (moe_reduce_kernel's slot_add), then the shared term. */
template <int NW> __device__ __noinline__ void down_sum(Blk &B, bool shared)
{
	const int ns = B.snsel[0], cm = B.colmax;
	for (int li = tid_(); li < B.ncol; li += 32 * NW) {
		float a = 0.f;
		for (int m = 0; m < ns; m++)
			a = a + B.swts[m] * B.res[(size_t)m * cm + li];
		if (shared)
			a += B.res[(size_t)ns * cm + li];
		B.ys[li] = a;
	}
	__syncthreads();
}

/* The head's prologue: h-hat = RMS_output_norm(the streams' mean) into xs. */
template <int NW> __device__ __noinline__ void pro_head(Blk &B)
{
	const x4k_step_params &p = *B.p;
	const int D = p.D;
	if (warp_() == 0) {
		float v = sum_ldcg(B.part, X4K_STEP_NPART, B.G, lane_(), 32);
		v = x4c::warp_sum(v);
		if (lane_() == 0)
			B.red[0] = v;
	}
	__syncthreads();
	const float inv = 1.0f / sqrtf(B.red[0] / (float)D + p.eps);
	copy_ldcg(B.xs, B.hbar, D, tid_(), 32 * NW);
	for (int c = tid_(); c < D; c += 32 * NW)
		B.xs[c] = (B.xs[c] * inv) * p.output_norm[c];
	__syncthreads();
}

/* ---------------- the step ---------------- */

template <int NW, int NSLOT>
__global__ void __launch_bounds__(32 * NW, 1) step_kernel(const x4k_step_params prm)
{
#if defined(X4S_DEVICE) || defined(X4_EMU)
#ifdef X4_EMU
	uint8_t *step_smem = emu_block_smem();
#else
	extern __shared__ __align__(16) uint8_t step_smem[];
#endif
	Blk &B = blk_init<NW, NSLOT>(prm, step_smem);
	const x4k_step_params &p = B.P;
	Sync S = { 0, 0 };
	/* the descriptors: none, and two that alternate (the one being written
	 * is always the one two phases old, whose readers passed a barrier) */
	Ph *const none = reinterpret_cast<Ph *>(B.phmem);
	Ph *cur = reinterpret_cast<Ph *>(B.phmem + PH_BYTES), *nxt = reinterpret_cast<Ph *>(B.phmem + 2 * PH_BYTES);
	const bool t0 = tid_() == 0;
	const Cur nn = { 0, -1, 0, 0 };
	RingPos r = { nn, nn, 0, 0 };
#define SWAP()                        \
	do {                          \
		Ph *const sw_ = cur; \
		cur = nxt;           \
		nxt = sw_;           \
	} while (0)
	/* run the phase *ph from issue position r.ic, the next one *nx from n */
#define RUN(ph, nx, n)                                                 \
	do {                                                           \
		r.nic = (n);                                           \
		r = ring_run<NW, NSLOT>(B, *(ph), *(nx), r);           \
	} while (0)

	clk_exit(B, 0);
	/* the embedding at this block's columns and the first gate's partials */
	if (t0) {
		ph_none(*none);
		ph_qa(B, *nxt, &p.layers[0]);
	}
	fn_slice_copy(B, p.layers[0].hc_fn[0]);
	commit();
	wait_pending(0);
	__syncthreads();
	col_phase<NW>(B, COL_EMBED, false);
	r.ic = nn;
	r.nic = cur_start<NW>(B, *nxt);
	r = ring_fill<NW, NSLOT>(B, *none, *nxt, r);
	phase_end(B, S);
	SWAP();
	r.ic = r.nic;

	for (int l = 0; l < p.n_layer; l++) {
		const x4k_step_layer *L = &p.layers[l];
		const bool last = l + 1 == p.n_layer;
		const uint16_t *fn_next = last ? nullptr : p.layers[l + 1].hc_fn[0];
		/* A1: q_a, kv_a */
		gate_finish<NW>(B, L->hc_base[0], L->hc_scale[0], L->norm[0]);
		clk_mark(B, S);
		if (t0)
			ph_qb(B, *nxt, L);
		__syncthreads();
		RUN(cur, nxt, cur_start<NW>(B, *nxt));
		gate_coef(B);
		phase_end(B, S);
		SWAP();
		r.ic = r.nic;
		/* A2: q_b, the cache row */
		if (t0)
			ph_absorb(B, *nxt, L);
		pro_qnorm<NW>(B, L);
		clk_mark(B, S);
		RUN(cur, nxt, cur_start<NW>(B, *nxt));
		phase_end(B, S);
		SWAP();
		r.ic = r.nic;
		/* A3: the absorb */
		pro_q<NW>(B);
		clk_mark(B, S);
		RUN(cur, none, nn);
		phase_end(B, S);
		/* A4: the attention; the expansion's first items after it */
		if (t0)
			ph_expand(B, *nxt, L);
		attention<NW>(B, L);
		__syncthreads();
		r.ic = nn;
		r.nic = cur_start<NW>(B, *nxt);
		r = ring_fill<NW, NSLOT>(B, *none, *nxt, r);
		phase_end(B, S);
		SWAP();
		r.ic = r.nic;
		/* A5: the combine, the expansion */
		if (t0)
			ph_out(B, *nxt, L);
		pro_combine<NW>(B, (cur->N + cur->R - 1) / cur->R, cur->R);
		clk_mark(B, S);
		RUN(cur, nxt, cur_start<NW>(B, *nxt));
		phase_end(B, S);
		SWAP();
		r.ic = r.nic;
		/* A6: W_o at this block's columns, the update, the FFN gate's partials */
		if (t0) {
			if (L->router)
				ph_router(B, *nxt, L);
			else
				ph_dense_up(B, *nxt, L);
		}
		pro_load<NW>(B, p.o, p.n_head * p.d_v, 0);
		__syncthreads();
		clk_mark(B, S);
		RUN(cur, nxt, cur_start<NW>(B, *nxt));
		__syncthreads();
		col_phase<NW>(B, COL_UPDATE, false);
		phase_end(B, S);
		SWAP();
		r.ic = r.nic;
		/* F1 */
		gate_finish<NW>(B, L->hc_base[1], L->hc_scale[1], L->norm[1]);
		clk_mark(B, S);
		if (L->router) {
			RUN(cur, none, nn);
			gate_coef(B);
			phase_end(B, S);
			/* F2: the top k, the chosen experts' gate/up */
			pro_topk<NW>(B, L);
			clk_mark(B, S);
			Ph *rt = nxt, *dn = cur;
			if (t0) {
				ph_routed(B, *rt, L);
				ph_down(B, *dn, L, fn_next);
			}
			__syncthreads();
			r.ic = cur_start<NW>(B, *rt);
			RUN(rt, dn, cur_start<NW>(B, *dn));
			phase_end(B, S);
			/* F3: the downs at this block's columns, their sum */
			if (t0) {
				if (last)
					ph_head(B, *rt);
				else
					ph_qa(B, *rt, L + 1);
			}
			pro_load<NW>(B, B.hx, B.snsel[0] * p.F_e, 0);
			if (L->down_sh)
				pro_load<NW>(B, p.h, p.F_sh, B.snsel[0] * p.F_e);
			__syncthreads();
			clk_mark(B, S);
			r.ic = r.nic;
			RUN(dn, rt, cur_start<NW>(B, *rt));
			__syncthreads();
			down_sum<NW>(B, L->down_sh != nullptr);
			cur = rt;
			nxt = dn;
		} else {
			/* D1: the dense FFN's gate/up */
			if (t0)
				ph_dense_down(B, *nxt, L, fn_next);
			__syncthreads();
			RUN(cur, nxt, cur_start<NW>(B, *nxt));
			gate_coef(B);
			phase_end(B, S);
			SWAP();
			r.ic = r.nic;
			/* D3: its down at this block's columns */
			if (t0) {
				if (last)
					ph_head(B, *nxt);
				else
					ph_qa(B, *nxt, L + 1);
			}
			__syncthreads();
			RUN(cur, nxt, cur_start<NW>(B, *nxt));
			__syncthreads();
			SWAP();
		}
		col_phase<NW>(B, COL_UPDATE, last);
		phase_end(B, S);
		r.ic = r.nic;
	}
	/* the head */
	pro_head<NW>(B);
	clk_mark(B, S);
	RUN(cur, none, nn);
	__syncthreads();
	clk_arrive(B, S.phase + 1);
	clk_exit(B, S.phase + 1);
#undef RUN
#undef SWAP
#endif
}

} /* namespace x4s */

#endif
