/*
 * step_phases.cuh - the phases of the persistent decode step (x4k_step,
 * kernels/step.cu; docs/step.md): what one block does between two grid
 * barriers, on step_dev.cuh's ring and products.
 *
 * A block is one SM's: NW warps, the ring (NSLOT slots a warp), the input
 * vector xs, and the columns of D it owns (every G-th unit of UNIT
 * columns): it alone updates those columns of the four streams, which it
 * keeps in shared memory (sH), and it computes the rows of W_o and of the
 * downs that produce them, so that an update and the next gate's partial
 * products follow a sublayer with no barrier between.  A phase's tasks are
 * rows (or groups of rows) of its weights, spread over the warps of the
 * grid (interleaved over the blocks), over a block's warps (its own
 * columns), or in contiguous runs (the value expansion, whose rows need
 * their head's attention output).  Warp 0 sits out the tasks of the phase
 * after a gate (A1, F1) to run the gate's Sinkhorn meanwhile.
 *
 * Every sum runs in a fixed order: the same bits every run.
 */
#ifndef X4_STEP_PHASES_CUH
#define X4_STEP_PHASES_CUH

#include "step_dev.cuh"
#include "quant_dev.cuh"

namespace x4s {

/* ---------------- a block ---------------- */

/* A thread's place: read from threadIdx where used, never kept in a
 * struct whose address a phase holds (that would put it, and every access
 * to it, in local memory: with ~225 KB of shared memory an SM there is
 * little L1 to hold a stack, so a local access is an L2 round trip). */
static __device__ __forceinline__ int tid_() { return (int)threadIdx.x; }
static __device__ __forceinline__ int warp_() { return (int)threadIdx.x >> 5; }
static __device__ __forceinline__ int lane_() { return (int)threadIdx.x & 31; }

/* The block's uniform state, in its shared memory (written once by thread
 * 0 at the start): the parameters' copy, the pieces of the workspace and
 * of shared memory.  The phases hold its address. */
struct Blk {
	x4k_step_params P; /* the launch's parameters, copied */
	const x4k_step_params *p; /* &P */
	int G, b;
	int ncol;          /* columns of D this block owns (UNIT a unit) */
	int colmax;        /* the most any block owns: sH's row stride */
	int nc;            /* gate coefficients n_hc * (2 + n_hc) */
	/* the workspace's pieces */
	unsigned *bar;
	float *part, *pm, *pl, *pacc, *lg, *hx, *hbar;
	/* shared memory */
	float *xs;         /* [XS] the input vector of the phase */
	float *coef;       /* [NCMAX] the gate's coefficients (pre | post | comb) */
	float *sm;         /* [NCMAX + 8] the gate's projection; scratch */
	float *gb;         /* [NCMAX + 3] the gate's base and scale */
	float *red;        /* [32] reductions */
	float *sw;         /* [MAXE + 2 MAXK] the router's scores and choice */
	int *ssel;         /* [MAXK] the chosen experts, ascending */
	float *swts;       /* [MAXK] their weights */
	int *snsel;        /* [1] */
	float *sH;         /* [n_hc][colmax] this block's columns of the streams */
	float *ys;         /* [colmax] the sublayer's output at them */
	float *res;        /* [MAXK + 1][colmax] the downs' products at them */
	uint16_t *sfn;     /* [NCMAX][n_hc][colmax] the next gate's projection at them */
	uint8_t *ring;     /* [NW][NSLOT][SLOTB] */
	uint8_t *phmem;    /* [3][PH_BYTES] the phases' descriptors (step_tasks.cuh) */
	unsigned long long *clk_exit, *clk_arrive, *clk_mark; /* the phase clock, or NULL */

	__device__ int col(int li) const { return UNIT * (b + G * (li / UNIT)) + li % UNIT; }
};

/* A thread's own count of barriers and phases (thread 0's drives the
 * barrier, block 0's thread 0 the clock). */
struct Sync {
	unsigned target; /* the barrier's next count */
	int phase;       /* phases done */
};

/* Shared memory a block needs (bytes, 16-aligned pieces): Blk, the ring,
 * the rest. */
static __host__ __device__ inline size_t blk_smem(int NW, int NSLOT, int n_hc, int colmax)
{
	auto r16 = [](size_t n) { return (n + 15) & ~(size_t)15; };
	return r16(sizeof(Blk)) + 3 * PH_BYTES + (size_t)NW * NSLOT * SLOTB + r16(sizeof(float) * XS) + r16(sizeof(float) * NCMAX) +
	       r16(sizeof(float) * (NCMAX + 8)) + r16(sizeof(float) * (NCMAX + 3)) + r16(sizeof(float) * 32) +
	       r16(sizeof(float) * (MAXE + 2 * MAXK)) + r16(sizeof(int) * MAXK) + r16(sizeof(float) * MAXK) +
	       r16(sizeof(int)) + r16(sizeof(float) * (size_t)n_hc * colmax) + r16(sizeof(float) * colmax) +
	       r16(sizeof(float) * (MAXK + 1) * (size_t)colmax) +
	       r16(sizeof(uint16_t) * NCMAX * (size_t)n_hc * colmax);
}

/* The attention's heads a block (a divisor of n_head, at most 8). */
static __host__ __device__ inline int att_heads(int n_head)
{
	for (int nh = 8; nh > 1; nh--)
		if (n_head % nh == 0)
			return nh;
	return 1;
}

/* The attention's splits of len positions over a grid of G blocks with hg
 * head groups: s splits of span positions (the last may be shorter), at
 * least AT_T positions a split where there are blocks to spare. */
static __host__ __device__ inline void att_split(int len, int G, int hg, int *s, int *span)
{
	int n = (len + AT_T - 1) / AT_T, m = G / hg;
	n = n < m ? n : m;
	n = n < X4K_STEP_MAX_SPLIT ? n : X4K_STEP_MAX_SPLIT;
	n = n < 1 ? 1 : n;
	*span = (len + n - 1) / n;
	*s = (len + *span - 1) / *span;
}

/* Columns the busiest block owns. */
static __host__ __device__ inline int blk_colmax(int D, int G) { return UNIT * ((D / UNIT + G - 1) / G); }

template <int NW, int NSLOT>
static __device__ void blk_fill(Blk &B, const x4k_step_params &prm, uint8_t *smem)
{
	B.P = prm;
	B.p = &B.P;
	const x4k_step_params *p = &B.P;
	B.G = gridDim.x;
	B.b = blockIdx.x;
	const int nu = p->D / UNIT;
	B.ncol = B.b < nu ? UNIT * ((nu - 1 - B.b) / B.G + 1) : 0;
	B.colmax = blk_colmax(p->D, B.G);
	B.nc = X4K_HC_NCOEF(p->n_hc);
	const x4k_step_ws w = x4k_step_ws_of(p->n_head, p->kv_lora, p->n_expert, p->k, p->F_e, p->D);
	uint8_t *ws = static_cast<uint8_t *>(p->ws);
	B.bar = reinterpret_cast<unsigned *>(ws + w.bar);
	B.part = reinterpret_cast<float *>(ws + w.part);
	B.pm = reinterpret_cast<float *>(ws + w.pm);
	B.pl = reinterpret_cast<float *>(ws + w.pl);
	B.pacc = reinterpret_cast<float *>(ws + w.pacc);
	B.lg = reinterpret_cast<float *>(ws + w.lg);
	B.hx = reinterpret_cast<float *>(ws + w.hx);
	B.hbar = reinterpret_cast<float *>(ws + w.hbar);
	size_t at = (sizeof(Blk) + 15) & ~(size_t)15;
	auto take = [&](size_t n) {
		uint8_t *q = smem + at;
		at += (n + 15) & ~(size_t)15;
		return q;
	};
	B.ring = take((size_t)NW * NSLOT * SLOTB);
	B.phmem = take(3 * PH_BYTES);
	B.xs = reinterpret_cast<float *>(take(sizeof(float) * XS));
	B.coef = reinterpret_cast<float *>(take(sizeof(float) * NCMAX));
	B.sm = reinterpret_cast<float *>(take(sizeof(float) * (NCMAX + 8)));
	B.gb = reinterpret_cast<float *>(take(sizeof(float) * (NCMAX + 3)));
	B.red = reinterpret_cast<float *>(take(sizeof(float) * 32));
	B.sw = reinterpret_cast<float *>(take(sizeof(float) * (MAXE + 2 * MAXK)));
	B.ssel = reinterpret_cast<int *>(take(sizeof(int) * MAXK));
	B.swts = reinterpret_cast<float *>(take(sizeof(float) * MAXK));
	B.snsel = reinterpret_cast<int *>(take(sizeof(int)));
	B.sH = reinterpret_cast<float *>(take(sizeof(float) * (size_t)p->n_hc * B.colmax));
	B.ys = reinterpret_cast<float *>(take(sizeof(float) * B.colmax));
	B.res = reinterpret_cast<float *>(take(sizeof(float) * (MAXK + 1) * (size_t)B.colmax));
	B.sfn = reinterpret_cast<uint16_t *>(take(sizeof(uint16_t) * NCMAX * (size_t)p->n_hc * B.colmax));
	B.clk_exit = p->clock;
	B.clk_arrive = p->clock ? p->clock + X4K_STEP_MAX_PHASES : nullptr;
	B.clk_mark = p->clock ? p->clock + X4K_STEP_MAX_PHASES * (1 + X4K_STEP_CLOCK_BLOCKS) : nullptr;
}

/* The block's state at the start of its shared memory, by thread 0. */
template <int NW, int NSLOT>
__device__ Blk &blk_init(const x4k_step_params &prm, uint8_t *smem)
{
	Blk &B = *reinterpret_cast<Blk *>(smem);
	if (tid_() == 0)
		blk_fill<NW, NSLOT>(B, prm, smem);
	__syncthreads();
	return B;
}

/* The clock's marks: this block's arrival at the end of phase ph (1-based,
 * thread 0), block 0's leaving of its barrier, block 0's end of a phase's
 * prologue. */
static __device__ __forceinline__ void clk_arrive(const Blk &B, int ph)
{
	if (B.clk_arrive && tid_() == 0 && B.b < X4K_STEP_CLOCK_BLOCKS && ph < X4K_STEP_MAX_PHASES)
		B.clk_arrive[(size_t)ph * X4K_STEP_CLOCK_BLOCKS + B.b] = clock_ns();
}
static __device__ __forceinline__ void clk_exit(const Blk &B, int ph)
{
	if (B.clk_exit && B.b == 0 && tid_() == 0 && ph < X4K_STEP_MAX_PHASES)
		B.clk_exit[ph] = clock_ns();
}
static __device__ __forceinline__ void clk_mark(const Blk &B, const Sync &S)
{
	if (B.clk_mark && B.b == 0 && tid_() == 0 && S.phase + 1 < X4K_STEP_MAX_PHASES)
		B.clk_mark[S.phase + 1] = clock_ns();
}

/* The barrier at a phase's end, and the clock. */
static __device__ __noinline__ void phase_end(const Blk &B, Sync &S)
{
	S.phase++;
	__syncthreads();
	clk_arrive(B, S.phase);
	grid_sync(B.bar, S.target);
	clk_exit(B, S.phase);
#ifdef X4_EMU
	if (S.phase == emu_stop_phase)
		emu_fiber_exit();
#endif
}

/* ---------------- the gate's finish (docs/forward.md 5.1 steps 2-9) ----------------
 * After the barrier that follows the column phase: the grid's partial
 * projections and sums of squares added (a warp a row, lanes over the
 * blocks, a fixed order), m = fn . u / rms(u), pre on every thread, the
 * collapse x = sum_s pre[s] H[s] over all of D (H from L2), and the
 * sublayer's RMSNorm of x into xs.  The Sinkhorn (post, comb) is
 * gate_coef's, on warp 0 while the others run the next tasks. */
template <int NW>
static __device__ __noinline__ void gate_finish(Blk &B, const float *base, const float *scale, const float *gain)
{
	constexpr int NT = 32 * NW, CM = (4096 + NT - 1) / NT; /* D <= 4096 (x4k_step_check) */
	const x4k_step_params &p = *B.p;
	const int D = p.D, nh = p.n_hc, nc = B.nc, G = B.G;
	/* the loads that do not wait on anything: streams, gain, base, scale */
	float hv[CM][4], gv[CM];
#pragma unroll
	for (int i = 0; i < CM; i++) {
		const int c = tid_() + NT * i;
#pragma unroll
		for (int s = 0; s < 4; s++)
			hv[i][s] = c < D && s < nh ? ldcg(p.H + (size_t)s * D + c) : 0.f;
		gv[i] = c < D ? gain[c] : 0.f;
	}
	if (tid_() < nc)
		B.gb[tid_()] = base[tid_()];
	if (tid_() < 3)
		B.gb[NCMAX + tid_()] = scale[tid_()];
	for (int j = warp_(); j <= nc; j += NW) {
		float v = sum_ldcg(B.part + j, X4K_STEP_NPART, G, lane_(), 32);
		v = x4c::warp_sum(v);
		if (lane_() == 0)
			B.red[j] = v;
	}
	__syncthreads();
	const float inv = 1.0f / sqrtf(B.red[nc] / (float)(nh * D) + p.hc.rms_eps);
	if (tid_() < nc)
		B.sm[tid_()] = B.red[tid_()] * inv;
	__syncthreads();
	float pre[4];
#pragma unroll
	for (int s = 0; s < 4; s++)
		pre[s] = s < nh ? x4c::hc_pre_of(B.sm, B.gb, B.gb + NCMAX, s) : 0.f;
	/* the collapse, the sum in source order */
	float ss = 0.f, xv[CM];
#pragma unroll
	for (int i = 0; i < CM; i++) {
		float t = 0.f;
#pragma unroll
		for (int s = 0; s < 4; s++)
			if (s < nh)
				t = __fmaf_rn(pre[s], hv[i][s], t);
		xv[i] = t;
		ss = fmaf(t, t, ss);
	}
	ss = x4c::block_sum(ss, B.red);
	const float ninv = 1.0f / sqrtf(ss / (float)D + p.eps);
#pragma unroll
	for (int i = 0; i < CM; i++) {
		const int c = tid_() + NT * i;
		if (c < D)
			B.xs[c] = (xv[i] * ninv) * gv[i];
	}
	__syncthreads();
}

/* The gate's coefficients (pre | post | comb) from B.sm, on warp 0. */
static __device__ __noinline__ void gate_coef(Blk &B)
{
	if (warp_() == 0)
		x4c::hc_coef_warp<4>(B.sm, B.gb, B.gb + NCMAX, B.p->hc, B.coef);
}

/* ---------------- the column phase ----------------
 * This block's columns: the update of docs/forward.md 5.2 (A4, F4) with the
 * sublayer's output ys (or, first, the embedding), the streams written for
 * the other blocks' next gate, and this block's partial projections of the
 * next gate (sfn) and its sum of squares; after the last block, the
 * streams' mean and its sum of squares for the head instead. */
enum ColMode { COL_EMBED, COL_UPDATE };

template <int NW> __device__ __noinline__ void col_phase(Blk &B, ColMode mode, bool head)
{
	const x4k_step_params &p = *B.p;
	const int D = p.D, nh = p.n_hc, nc = B.nc, cm = B.colmax;
	if (mode == COL_EMBED) {
		const int32_t id = p.ids[0];
		for (int li = tid_(); li < B.ncol; li += 32 * NW) {
			const int c = B.col(li);
			/* an id the host should have refused: a loud NaN row */
			const float v = id >= 0 && id < p.n_vocab ? bf16(p.token_embd[(size_t)id * D + c])
								  : __int_as_float(0x7fc00000);
			for (int s = 0; s < nh; s++)
				B.sH[s * cm + li] = v;
		}
	} else {
		for (int li = tid_(); li < B.ncol; li += 32 * NW) {
			float h[4], o[4];
#pragma unroll
			for (int s = 0; s < 4; s++)
				h[s] = s < nh ? B.sH[s * cm + li] : 0.f;
			x4c::hc_update<4>(B.coef, B.ys[li], h, o);
#pragma unroll
			for (int s = 0; s < 4; s++)
				if (s < nh)
					B.sH[s * cm + li] = o[s];
		}
	}
	__syncthreads();
	float *part = B.part + (size_t)B.b * X4K_STEP_NPART;
	if (head) {
		/* the streams' mean (docs/forward.md 8), x4k_head's expression */
		const float inv_hc = 1.0f / (float)nh;
		float ss = 0.f;
		for (int li = tid_(); li < B.ncol; li += 32 * NW) {
			float v = 0.f;
			for (int s = 0; s < nh; s++)
				v += B.sH[s * cm + li];
			v *= inv_hc;
			B.hbar[B.col(li)] = v;
			ss = fmaf(v, v, ss);
		}
		ss = x4c::block_sum(ss, B.red);
		if (tid_() == 0)
			part[0] = ss;
		return;
	}
	for (int li = tid_(); li < B.ncol; li += 32 * NW)
		for (int s = 0; s < nh; s++)
			p.H[(size_t)s * D + B.col(li)] = B.sH[s * cm + li];
	/* partial projections: a warp a row j, lanes over (stream, column) */
	const int pairs = nh * B.ncol;
	for (int j = warp_(); j <= nc; j += NW) {
		float a = 0.f;
		for (int q = lane_(); q < pairs; q += 32) {
			const int s = q / B.ncol, li = q % B.ncol;
			const float h = B.sH[s * cm + li];
			a = j < nc ? fmaf(bf16(B.sfn[((size_t)j * nh + s) * cm + li]), h, a) : fmaf(h, h, a);
		}
		a = x4c::warp_sum(a);
		if (lane_() == 0)
			part[j] = a;
	}
}

/* The next gate's projection at this block's columns into sfn, by warp 0
 * with its first item of the phase that ends in the column phase (so that
 * the item's wait covers them): rows j, streams s, a unit (8 bytes) each. */
static __device__ __noinline__ void fn_slice_copy(const Blk &B, const uint16_t *fn)
{
	if (!fn || warp_() != 0)
		return;
	const int D = B.p->D, nh = B.p->n_hc, cm = B.colmax, nu = B.ncol / UNIT;
	const int n = B.nc * nh * nu;
	for (int q = lane_(); q < n; q += 32) {
		const int u = q % nu, s = (q / nu) % nh, j = q / (nu * nh);
		cp8(B.sfn + ((size_t)j * nh + s) * cm + UNIT * u,
		    fn + (size_t)j * nh * D + (size_t)s * D + UNIT * (B.b + B.G * u));
	}
}

} /* namespace x4s */

#endif
