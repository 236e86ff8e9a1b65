/* emu_route.cc - runs the router's top k (x4route::top_k of
 * moe_route_dev.cuh, which moe_router.cu's selection kernels and the batch-1
 * gate/up launch share) on the CPU with emu_rt.h's runtime: a warp a token,
 * its biases through load_bias, every lane's picks (expert, unbiased score
 * bit for bit, their sum) against x4r_topk on the same float sums g + bias,
 * in order and under random warp schedules.  Built at __CUDA_ARCH__ 800 it
 * runs the selection by redux.sync (the largest key, then the lowest index
 * holding it), below that by the shuffle tree; tests/tool_emu_route.sh
 * builds both, in make test.  The cases: random scores, the experts past
 * n_expert in some lanes, exact ties across lanes and within a lane (expert
 * l and l + 32), -0 against +0, infinities, and NaN (some, or all but fewer
 * than k, where the lowest indices not yet taken fill the slots). */
#include "x4_kern.h"
#include "moe_route_dev.cuh"

#include "emu_rt.h"

#include <algorithm>

using x4route::picks;
using x4route::MAX_K;

#if __CUDA_ARCH__ >= 800
static const char *PATH = "redux";
#else
static const char *PATH = "shfl";
#endif

static std::mt19937_64 rng(1);
static float urand() { return (float)(rng() >> 40) * 0x1p-24f; } /* [0, 1) */
static float pick(std::initializer_list<float> v) { return v.begin()[rng() % v.size()]; }
static uint32_t bits(float f) { return __float_as_uint(f); }

/* one token: n experts, k picks, the scores g and biases b (n each) */
struct token {
	int n, k;
	std::vector<float> g, b;
};
static token blank(int n, int k) { return token{ n, k, std::vector<float>(n), std::vector<float>(n) }; }

/* x4r_topk on the float sums the kernel ranks, and the score sum it adds in
 * slot order; whether every lane's picks are those, else why not in why */
static bool same(const token &c, const picks *lanes, char *why, size_t nwhy)
{
	std::vector<double> key(c.n);
	for (int e = 0; e < c.n; e++)
		key[e] = (double)(c.g[e] + c.b[e]);
	int sel[MAX_K];
	x4r_topk(key.data(), c.n, c.k, sel);
	float sum = 0.f;
	for (int s = 0; s < c.k; s++)
		sum += c.g[sel[s]];
	for (int l = 0; l < 32; l++) {
		const picks &p = lanes[l];
		for (int s = 0; s < c.k; s++)
			if (p.ex[s] != sel[s] || bits(p.g[s]) != bits(c.g[sel[s]])) {
				snprintf(why, nwhy, "lane %d slot %d: expert %d g %a, want %d g %a", l, s, p.ex[s],
					 p.g[s], sel[s], c.g[sel[s]]);
				return false;
			}
		if (bits(p.sum) != bits(sum) && !(isnan(p.sum) && isnan(sum))) {
			snprintf(why, nwhy, "lane %d: sum %a, want %a", l, p.sum, sum);
			return false;
		}
	}
	return true;
}

/* the tokens of a group, TOKS a block (a warp each), each block in order
 * (sched 0) and under two random schedules; one PASS/FAIL line */
constexpr int TOKS = 8;
template <int JN>
static void group(const char *name, const std::vector<token> &toks)
{
	static uint8_t none[1];
	emu_smem = none, SMEM = 0;
	emu_stack = 64 << 10; /* top_k's frames are small: the blocks start sooner */
	late_copies = false;
	char why[200] = "", nm[160];
	size_t bad = 0, first = 0;
	std::vector<picks> out;
	for (size_t t0 = 0; t0 < toks.size(); t0 += TOKS) {
		const int nt = (int)std::min(toks.size() - t0, (size_t)TOKS);
		for (unsigned sched : { 0u, 1u + (unsigned)t0, 1000u + (unsigned)t0 }) {
			out.assign((size_t)nt * 32, picks{});
			memset(out.data(), 0xff, out.size() * sizeof(picks)); /* unwritten slots show */
			body = [&] {
				const int w = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
				const token &c = toks[t0 + w];
				if (c.n > 32 * JN)
					die("more experts than the lanes hold");
				float bv[JN];
				x4route::load_bias<JN>(lane, c.n, c.b.data(), bv);
				x4route::top_k<JN>(lane, c.n, c.k, c.g.data(), bv, out[(size_t)w * 32 + lane]);
			};
			run_block(dim3(1), dim3(32 * nt), uint3{ 0, 0, 0 }, sched);
			for (int w = 0; w < nt; w++) {
				char wy[160];
				if (!same(toks[t0 + w], &out[(size_t)w * 32], wy, sizeof wy) && !bad++) {
					first = t0 + w;
					snprintf(why, sizeof why, "%s%s", sched ? "random schedule, " : "", wy);
				}
			}
		}
	}
	snprintf(nm, sizeof nm, "top_k[%s] %s", PATH, name);
	if (bad) {
		const token &c = toks[first];
		report(false, nm, "%zu of %zu runs differ; first token %zu (n_expert %d k %d JN %d) %s", bad,
		       3 * toks.size(), first, c.n, c.k, JN, why);
	} else
		report(true, nm, "%zu tokens, JN %d, every lane's picks in order and under 2 random schedules",
		       toks.size(), JN);
}

/* per k in 1..8, reps tokens of n experts from fill */
template <class F> static std::vector<token> each_k(int n, int reps, F fill)
{
	std::vector<token> v;
	for (int k = 1; k <= MAX_K && k <= n; k++)
		for (int r = 0; r < reps; r++) {
			token c = blank(n, k);
			fill(c);
			v.push_back(c);
		}
	return v;
}

/* sigmoid scores and small biases, as the model's */
static void model(token &c)
{
	for (int e = 0; e < c.n; e++) {
		c.g[e] = urand();
		c.b[e] = (urand() - 0.5f) * 0.2f;
	}
}
/* either sign over 2^-140..2^40 (subnormals too): the key's order of
 * negative values and of every binade */
static void wide(token &c)
{
	for (int e = 0; e < c.n; e++) {
		c.g[e] = (rng() & 1 ? -1.f : 1.f) * ldexpf(1.f + urand(), -140 + (int)(rng() % 180));
		c.b[e] = rng() % 4 ? 0.f : (rng() & 1 ? -1.f : 1.f) * ldexpf(1.f + urand(), -20 + (int)(rng() % 30));
	}
}
/* a few values whose sums tie exactly, from different g and b */
static void grid(token &c)
{
	for (int e = 0; e < c.n; e++) {
		c.g[e] = pick({ 0.25f, 0.5f, 0.75f, 1.f });
		c.b[e] = pick({ 0.f, 0.25f, -0.25f, 0.5f });
	}
}
/* small values, then the top made of ties inside lanes: experts l, l + 32,
 * ... of a few lanes all at 0.75 (split as g 0.5 + b 0.25 or g 0.25 + b
 * 0.5), and at 0.625 in other lanes */
static void lane_ties(token &c)
{
	for (int e = 0; e < c.n; e++) {
		c.g[e] = urand() * 0.25f;
		c.b[e] = urand() * 0.25f;
	}
	for (int i = 0; i < 4; i++) {
		const int l = (int)(rng() % 32);
		const float top = i < 2 ? 0.75f : 0.625f;
		for (int e = l; e < c.n; e += 32) {
			c.g[e] = rng() & 1 ? 0.5f : 0.25f;
			c.b[e] = top - c.g[e];
		}
	}
}
/* zeros of either sign on top, which tie: g and b each -0 or +0, else
 * below zero */
static void zeros(token &c)
{
	for (int e = 0; e < c.n; e++) {
		const bool z = rng() % 3 != 0;
		c.g[e] = z ? pick({ -0.f, 0.f }) : -urand() - 0x1p-20f;
		c.b[e] = z ? pick({ -0.f, 0.f }) : pick({ -0.f, 0.f, -0.5f });
	}
}
/* -inf as a real value (many, ties among them), +inf too, and +inf + -inf
 * (NaN) */
static void infs(token &c)
{
	const float inf = INFINITY;
	for (int e = 0; e < c.n; e++) {
		const unsigned r = (unsigned)(rng() % 8);
		c.g[e] = r < 4 ? -inf : r < 6 ? -urand() : r < 7 ? inf : 0.f;
		c.b[e] = rng() % 6 ? pick({ 0.f, -1.f }) : pick({ -inf, inf });
	}
}
/* NaN in about a third of the scores or biases (of either sign) */
static void some_nan(token &c)
{
	model(c);
	for (int e = 0; e < c.n; e++)
		if (rng() % 3 == 0)
			(rng() & 1 ? c.g[e] : c.b[e]) = rng() & 1 ? NAN : -NAN;
}
/* NaN everywhere but fewer than k experts (none at times): the rest of the
 * slots go to the lowest indices not yet taken */
static void most_nan(token &c)
{
	model(c);
	std::vector<bool> real(c.n);
	const int nr = (int)(rng() % c.k);
	for (int i = 0; i < nr; i++)
		real[rng() % c.n] = true;
	for (int e = 0; e < c.n; e++)
		if (!real[e])
			(rng() % 3 ? c.g[e] : c.b[e]) = NAN;
}

int main()
{
	printf("# top_k as built for __CUDA_ARCH__ %d: the %s selection\n", __CUDA_ARCH__, PATH);
	group<2>("random n_expert 64 k 1..8", each_k(64, 6, model));
	group<8>("random n_expert 256 k 1..8", each_k(256, 4, model));
	group<2>("random n_expert 40 (lanes 8..31 hold one) k 1..8", each_k(40, 6, model));
	group<8>("random n_expert 40 at the full J k 1..8", each_k(40, 3, model));
	group<1>("random n_expert 8 k 1..8", each_k(8, 3, model));
	{
		std::vector<token> v = each_k(9, 2, model), w = each_k(32, 2, model);
		v.insert(v.end(), w.begin(), w.end());
		group<1>("random n_expert 9 and 32 k 1..8", v);
	}
	group<2>("wide signs and binades n_expert 64 k 1..8", each_k(64, 4, wide));
	group<8>("wide signs and binades n_expert 256 k 1..8", each_k(256, 3, wide));
	group<2>("exact ties across lanes n_expert 64 k 1..8", each_k(64, 4, grid));
	group<8>("exact ties across lanes n_expert 256 k 1..8", each_k(256, 3, grid));
	group<2>("exact ties within a lane n_expert 64 k 1..8", each_k(64, 4, lane_ties));
	group<8>("exact ties within a lane n_expert 256 k 1..8", each_k(256, 3, lane_ties));
	group<2>("-0 and +0 tie n_expert 64 k 1..8", each_k(64, 4, zeros));
	group<2>("-0 and +0 tie n_expert 40 k 1..8", each_k(40, 3, zeros));
	group<8>("-0 and +0 tie n_expert 256 k 1..8", each_k(256, 3, zeros));
	group<2>("infinities n_expert 64 k 1..8", each_k(64, 4, infs));
	group<8>("infinities n_expert 256 k 1..8", each_k(256, 3, infs));
	{
		std::vector<token> v = each_k(64, 2, [](token &c) {
			for (int e = 0; e < c.n; e++)
				c.g[e] = -INFINITY, c.b[e] = pick({ 0.f, -1.f });
		});
		group<2>("all -inf n_expert 64 k 1..8", v);
	}
	group<2>("some NaN n_expert 64 k 1..8", each_k(64, 4, some_nan));
	group<8>("some NaN n_expert 256 k 1..8", each_k(256, 3, some_nan));
	group<2>("NaN but fewer than k n_expert 64 k 1..8", each_k(64, 4, most_nan));
	group<2>("NaN but fewer than k n_expert 40 k 1..8", each_k(40, 4, most_nan));
	group<8>("NaN but fewer than k n_expert 256 k 1..8", each_k(256, 3, most_nan));
	group<1>("NaN but fewer than k n_expert 8 k 1..8", each_k(8, 3, most_nan));
	printf("# %d passed, %d failed (%ld warp collectives)\n", passes, fails, n_collectives);
	return fails ? 1 : 0;
}
