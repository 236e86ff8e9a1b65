/* emu_gemm.cc - runs x4's tensor-core gemm core (gemm_mma.cuh) on the CPU
 * with emu_rt.h's runtime: x4k_gemm's tile kernel (gemm_mma_kernel of
 * gemm_quant.cu) on IQ4_NL and BF16 weights, and the routed experts' tiles
 * (moe_gu_mma, moe_down_mma of moe_experts.cu) on IQ4_NL and Q8_0, the
 * kernels' own text as prep.py copies it out.  Each output against a float64
 * reference from the same bytes (lib/blockfmt.h's x4b_decode_row) at the
 * kernel tests' rule (1e-5 of the sum of |terms|), and the same bits under a
 * random warp schedule with the copies landing as late as their waits allow.
 * Run by tests/tool_emu_gemm.sh in make test. */
#include "cuda_runtime.h" /* emu_cuda.h: before blockfmt.h, built with -D__CUDACC__ */
#include "x4_kern.h"
#include "quant_dev.cuh"
#include "gemm_mma.cuh"

using namespace x4d;
#include "gemm_quant.cu.inc"
#include "moe_experts.cu.inc"

/* the kernels' dynamic shared memory (extern uint8_t mma_smem[] in each) */
constexpr int SMEM_MAX = x4m::mma_fmt<X4_T_BF16>::SMEM > x4m::mma_fmt<X4_T_Q8_0>::SMEM
	? x4m::mma_fmt<X4_T_BF16>::SMEM : x4m::mma_fmt<X4_T_Q8_0>::SMEM;
alignas(16) uint8_t mma_smem[SMEM_MAX];
namespace x4c {
alignas(16) float sm[1];
}

#include "emu_rt.h"

static std::mt19937_64 rng(1);
static double urand() { return (rng() >> 11) * 0x1p-53; }
static float sgn() { return rng() & 1 ? 1.f : -1.f; }

/* a grid of blocks of 256 threads, each block on its fibers; sched 0 in
 * order with copies at issue, else random from sched with late copies */
template <int TYPE, class F> static void launch(dim3 grid, unsigned sched, F kern)
{
	emu_smem = mma_smem;
	SMEM = x4m::mma_fmt<TYPE>::SMEM;
	late_copies = sched != 0;
	body = kern;
	for (unsigned y = 0; y < grid.y; y++)
		for (unsigned x = 0; x < grid.x; x++)
			run_block(grid, dim3(x4m::THREADS), uint3{ x, y, 0 }, sched ? sched + 131 * y + x : 0);
}

/* 16-byte aligned buffers (device memory), listed as what cp.async may
 * read: a copy past a matrix's end stops the run */
struct buf {
	std::vector<uint8_t> v;
	uint8_t *p;
	size_t n;
	buf(size_t n_) : v(n_ + 16, 0x5a), n(n_)
	{
		p = (uint8_t *)(((uintptr_t)v.data() + 15) & ~(uintptr_t)15);
		emu_global_add(p, n);
	}
	~buf()
	{
		for (size_t i = 0; i < emu_global.size(); i++)
			if (emu_global[i].first == (const char *)p)
				emu_global.erase(emu_global.begin() + i--);
	}
	float *f() { return (float *)p; }
};

/* rows of weights: BF16 of magnitude 2^-8..2^-3, or random blocks with an
 * fp16 scale 2^-12..2^-10 */
static void fill_w(int type, uint8_t *w, size_t rows, int k)
{
	if (type == X4_T_BF16) {
		for (size_t i = 0; i < rows * k; i++) {
			const float v = sgn() * ldexpf((float)(1 + urand()), -8 + (int)(rng() % 5));
			const uint16_t h = (uint16_t)(__float_as_uint(v) >> 16);
			memcpy(w + 2 * i, &h, 2);
		}
		return;
	}
	const int bb = x4b_block_bytes(type);
	for (size_t b = 0; b < rows * (k / 32); b++) {
		uint8_t *p = w + b * bb;
		for (int i = 0; i < bb; i++)
			p[i] = (uint8_t)rng();
		const uint16_t hb = __half_as_ushort(__float2half_rn(sgn() * (float)(0.25e-3 + 0.75e-3 * urand())));
		memcpy(p, &hb, 2);
	}
}
/* activations with all 24 bits of significand in use, over 2^-6..2^1 */
static void fill_x(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = sgn() * ldexpf((float)(1 + urand()), -6 + (int)(rng() % 8));
}
static void decode(int type, const uint8_t *row, int k, std::vector<double> &o)
{
	std::vector<float> t(k);
	if (x4b_decode_row(type, row, t.data(), (uint64_t)k))
		abort();
	o.assign(t.begin(), t.end());
}
/* a . x and sum |a_i x_i| */
static void dot(const std::vector<double> &w, const float *x, int k, double &s, double &m)
{
	s = m = 0;
	for (int c = 0; c < k; c++) {
		s += w[c] * x[c];
		m += fabs(w[c] * x[c]);
	}
}

static void check(const char *name, const float *got, const double *ref, const double *mag, size_t n)
{
	double worst = 0;
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < n; i++) {
		const double e = fabs((double)got[i] - ref[i]), q = mag[i] > 0 ? e / mag[i] : e;
		if (!(e <= 1e-5 * mag[i])) {
			if (!bad)
				first = i;
			bad++;
		}
		if (q > worst || q != q)
			worst = q;
	}
	if (bad)
		report(false, name, "worst err/mag %.3g; %zu of %zu beyond 1e-5*mag, first [%zu] got %.9g want %.9g",
		       worst, bad, n, first, got[first], ref[first]);
	else
		report(true, name, "worst err/mag %.3g (%zu outputs)", worst, n);
}

static const char *tname(int t) { return t == X4_T_BF16 ? "bf16" : t == X4_T_IQ4_NL ? "iq4_nl" : "q8_0"; }

/* x4k_gemm's tile kernel: y[t][n] = W x_t, W n x k of TYPE */
template <int TYPE> static void gemm_case(int n, int k, int T, bool sched)
{
	const size_t rb = x4d::row_bytes(TYPE, k);
	buf w(rb * n), x((size_t)T * k * 4), y((size_t)T * n * 4), y2((size_t)T * n * 4);
	fill_w(TYPE, w.p, n, k);
	fill_x(x.f(), (size_t)T * k);
	memset(y.p, 0xff, (size_t)T * n * 4);
	const dim3 grid((n + 127) / 128, (T + 63) / 64);
	launch<TYPE>(grid, 0, [&] { gemm_mma_kernel<TYPE>(w.p, n, k, T, x.f(), y.f()); });
	std::vector<double> wd, ref((size_t)T * n), mag((size_t)T * n);
	for (int r = 0; r < n; r++) {
		decode(TYPE, w.p + r * rb, k, wd);
		for (int t = 0; t < T; t++)
			dot(wd, x.f() + (size_t)t * k, k, ref[(size_t)t * n + r], mag[(size_t)t * n + r]);
	}
	char nm[128];
	snprintf(nm, sizeof nm, "gemm %s n %d k %d tokens %d", tname(TYPE), n, k, T);
	check(nm, y.f(), ref.data(), mag.data(), (size_t)T * n);
	if (!sched)
		return;
	memset(y2.p, 0xff, (size_t)T * n * 4);
	launch<TYPE>(grid, 7 * n + k, [&] { gemm_mma_kernel<TYPE>(w.p, n, k, T, x.f(), y2.f()); });
	snprintf(nm, sizeof nm, "gemm %s schedule", tname(TYPE));
	report(!memcmp(y.p, y2.p, (size_t)T * n * 4), nm,
	       "n %d k %d tokens %d: random warp order and late copies give the same bits", n, k, T);
}

/* the experts' tiles: E experts of gate, up (f x d) and down (d x f), K
 * routes a token, expert 1 on every token (several tiles of one expert) */
template <int TYPE> static void moe_case(int d, int f, int E, int K, int n_tok, bool sched)
{
	const size_t rbd = x4d::row_bytes(TYPE, d), rbf = x4d::row_bytes(TYPE, f);
	buf g(rbd * f * E), u(rbd * f * E), dn(rbf * d * E), x((size_t)n_tok * d * 4);
	fill_w(TYPE, g.p, (size_t)f * E, d);
	fill_w(TYPE, u.p, (size_t)f * E, d);
	fill_w(TYPE, dn.p, (size_t)d * E, f);
	fill_x(x.f(), (size_t)n_tok * d);
	const int nr = n_tok * K;
	std::vector<int32_t> sel(nr);
	for (int t = 0; t < n_tok; t++)
		for (int j = 0; j < K; j++) {
			int e;
			bool dup;
			do {
				e = j == 0 ? 1 : (int)(rng() % E);
				dup = false;
				for (int i = 0; i < j; i++)
					dup |= sel[t * K + i] == e;
			} while (dup);
			sel[t * K + j] = e;
		}
	/* the route table as x4k_moe_route_table lays it out */
	std::vector<int32_t> counts(E, 0), offsets(E + 1, 0), route(nr), pos(nr), tex, tst;
	for (int i = 0; i < nr; i++)
		counts[sel[i]]++;
	for (int e = 0; e < E; e++)
		offsets[e + 1] = offsets[e] + counts[e];
	std::vector<int32_t> at(offsets.begin(), offsets.end() - 1);
	for (int i = 0; i < nr; i++) {
		pos[i] = at[sel[i]];
		route[at[sel[i]]++] = i;
	}
	for (int e = 0; e < E; e++)
		for (int s = offsets[e]; s < offsets[e + 1]; s += x4m::TOKS)
			tex.push_back(e), tst.push_back(s);
	int32_t ntiles = (int32_t)tex.size();
	x4k_moe_routes r = {};
	r.n_tok = n_tok, r.k = K, r.n_expert = E, r.tile = x4m::TOKS, r.max_tiles = ntiles + 1; /* a spare tile: returns */
	r.sel = sel.data(), r.counts = counts.data(), r.offsets = offsets.data(), r.route = route.data();
	tex.push_back(0), tst.push_back(0);
	r.tile_expert = tex.data(), r.tile_start = tst.data(), r.n_tiles = &ntiles;
	buf h((size_t)nr * f * 4), out((size_t)nr * d * 4), h2((size_t)nr * f * 4), out2((size_t)nr * d * 4);
	auto run = [&](buf &hh, buf &oo, unsigned s) {
		memset(hh.p, 0xff, (size_t)nr * f * 4);
		memset(oo.p, 0xff, (size_t)nr * d * 4);
		launch<TYPE>(dim3(r.max_tiles, (f + 63) / 64), s,
			     [&] { moe_gu_mma<TYPE>(r, x.f(), d, f, g.p, u.p, hh.f()); });
		launch<TYPE>(dim3(r.max_tiles, (d + 127) / 128), s,
			     [&] { moe_down_mma<TYPE>(r, d, f, dn.p, hh.f(), oo.f()); });
	};
	run(h, out, 0);
	/* h = silu(g) u from float64 g, u; its error bound from theirs (1e-5 of
	 * their magnitudes through the derivatives) and silu's own rounding;
	 * down against the kernel's own h (the core alone) */
	std::vector<double> wg, wu, wdn, href((size_t)nr * f), hmag((size_t)nr * f), oref((size_t)nr * d),
		omag((size_t)nr * d);
	for (int i = 0; i < nr; i++) {
		const int e = sel[i], t = i / K, p = pos[i];
		for (int rr = 0; rr < f; rr++) {
			decode(TYPE, g.p + ((size_t)e * f + rr) * rbd, d, wg);
			decode(TYPE, u.p + ((size_t)e * f + rr) * rbd, d, wu);
			double ga, gm, ua, um;
			dot(wg, x.f() + (size_t)t * d, d, ga, gm);
			dot(wu, x.f() + (size_t)t * d, d, ua, um);
			const double sg = 1 / (1 + exp(-ga)), sl = ga * sg, ds = sg * (1 + ga * (1 - sg));
			href[(size_t)p * f + rr] = sl * ua;
			hmag[(size_t)p * f + rr] = fabs(ds * ua) * gm + fabs(sl) * um + 0.1 * fabs(sl * ua);
		}
		for (int rr = 0; rr < d; rr++) {
			decode(TYPE, dn.p + ((size_t)e * d + rr) * rbf, f, wdn);
			dot(wdn, h.f() + (size_t)p * f, f, oref[(size_t)i * d + rr], omag[(size_t)i * d + rr]);
		}
	}
	char nm[160];
	snprintf(nm, sizeof nm, "moe_gu %s d %d f %d experts %d k %d tokens %d tiles %d", tname(TYPE), d, f, E, K,
		 n_tok, ntiles);
	check(nm, h.f(), href.data(), hmag.data(), (size_t)nr * f);
	snprintf(nm, sizeof nm, "moe_down %s d %d f %d experts %d k %d tokens %d tiles %d", tname(TYPE), d, f, E, K,
		 n_tok, ntiles);
	check(nm, out.f(), oref.data(), omag.data(), (size_t)nr * d);
	if (!sched)
		return;
	run(h2, out2, 5 * d + f);
	snprintf(nm, sizeof nm, "moe %s schedule", tname(TYPE));
	report(!memcmp(h.p, h2.p, (size_t)nr * f * 4) && !memcmp(out.p, out2.p, (size_t)nr * d * 4), nm,
	       "d %d f %d tokens %d: random warp order and late copies give the same bits", d, f, n_tok);
}

int main(int argc, char **argv)
{
	const char *only = argc > 1 ? argv[1] : "";
	if (!*only || strstr("gemm", only)) {
		gemm_case<X4_T_IQ4_NL>(128, 32, 1, false);  /* one block */
		gemm_case<X4_T_IQ4_NL>(128, 64, 1, false);  /* 2 blocks: fewer than the ring's lead */
		gemm_case<X4_T_IQ4_NL>(200, 96, 7, true);   /* a part row tile, 3 blocks */
		gemm_case<X4_T_IQ4_NL>(256, 512, 64, false); /* 16 blocks: the ring wraps 4 times */
		gemm_case<X4_T_IQ4_NL>(130, 288, 65, true); /* odd rows (2-aligned 18-byte blocks), 2 token tiles */
		gemm_case<X4_T_BF16>(256, 64, 1, false);
		gemm_case<X4_T_BF16>(129, 32, 3, false);
		gemm_case<X4_T_BF16>(150, 160, 7, true);
		gemm_case<X4_T_BF16>(128, 512, 64, false);
		gemm_case<X4_T_BF16>(136, 96, 65, true);
	}
	if (!*only || strstr("moe", only)) {
		moe_case<X4_T_IQ4_NL>(96, 160, 3, 2, 70, true); /* expert 1: 70 routes, 2 tiles */
		moe_case<X4_T_Q8_0>(128, 96, 3, 2, 20, true);
		moe_case<X4_T_IQ4_NL>(256, 64, 4, 3, 5, false); /* one part tile an expert, 2 row tiles of down */
		moe_case<X4_T_Q8_0>(160, 224, 2, 1, 65, false);  /* 65 routes of expert 1: a tile of 1 */
	}
	printf("# %d passed, %d failed (%ld warp collectives)\n", passes, fails, n_collectives);
	return fails ? 1 : 0;
}
