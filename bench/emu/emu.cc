#ifndef NST
#define NST 2
#endif
/* emu.cc - runs x4's tensor-core attention kernels (the real headers, with
 * the inline-asm primitives replaced by PTX-ISA semantics) on the CPU: one
 * fiber a thread, warp collectives (shfl, ldmatrix, mma) as rendezvous,
 * __syncthreads as a block barrier, cp.async landing either at issue or at
 * the wait that covers it, and the warps scheduled in order or at random.
 * Checks against x4r_mla_attn (lib/ref/ref_attn.c); run by tests/tool_emu_mla.sh
 * in make test. */
#include "x4_kern.h"
#include "mla_mma.cuh"
#include "mla_prefill_mma.cuh"

namespace mla_mma {
alignas(16) unsigned char smraw[232448];
}
namespace x4c {
alignas(16) float sm[1];
}

#include "emu_rt.h"

static const float KQ_SCALE = 0.0721688f;
struct data {
	int n_head, max_ctx;
	std::vector<uint16_t> cache;
	std::vector<float> qt;
};
static void make(data &d, int n_head, int max_ctx, int n_tok, unsigned seed, float qsig)
{
	std::mt19937 r(seed);
	std::normal_distribution<float> N(0.f, 1.f);
	d.n_head = n_head;
	d.max_ctx = max_ctx;
	d.cache.resize((size_t)max_ctx * 576);
	for (auto &v : d.cache)
		v = __half_as_ushort(__float2half_rn(N(r)));
	d.qt.resize((size_t)n_tok * n_head * 576);
	for (auto &v : d.qt)
		v = qsig * N(r);
}

static void prefill_emu(const data &d, int n_tok, int pos, const float *qt, float *ob, unsigned sched, bool late)
{
	late_copies = late;
	x4c::mla_params a = {};
	static int p;
	p = pos;
	a.qt = qt;
	a.cache = reinterpret_cast<const __half2 *>(d.cache.data());
	a.pos = &p;
	a.ob = ob;
	a.n_head = d.n_head;
	a.kv_lora = 512;
	a.cw = 576;
	a.max_ctx = d.max_ctx;
	a.scale = KQ_SCALE;
	const int n_rows = n_tok * d.n_head, nb = (n_rows + 31) / 32;
	body = [&] { mla_mma::mla_prefill_mma_kernel<NST>(a, n_rows); };
	for (int b = 0; b < nb; b++)
		run_block(dim3(nb), dim3(256), uint3{ (unsigned)b, 0, 0 }, sched ? sched + b : 0);
}

static void decode_emu(const data &d, int pos, float *ob, unsigned sched, bool late, int tr)
{
	late_copies = late;
	static int p;
	p = pos;
	const int nsplit = x4k_mla_nsplit(d.max_ctx);
	static std::vector<char> ws;
	ws.assign(x4k_mla_decode_workspace_bytes(d.n_head, 512, d.max_ctx) + 64, 0);
	x4c::mla_params a = x4c::mla_decode_params(d.qt.data(), d.cache.data(), &p, ob, ws.data(), d.n_head, 512,
					      576, d.max_ctx, KQ_SCALE, nsplit);
	body = [&] {
		if (tr == 1)
			mla_mma::mla_mma_kernel<2, 1>(a);
		else
			mla_mma::mla_mma_kernel<2, 2>(a);
	};
	for (int y = 0; y < d.n_head / 16; y++)
		for (int x = 0; x < nsplit; x++)
			run_block(dim3(nsplit, d.n_head / 16), dim3(256), uint3{ (unsigned)x, (unsigned)y, 0 },
				  sched ? sched + x : 0);
	if (nsplit == 1)
		return;
	body = [&] { x4c::mla_combine_kernel(a, nsplit); };
	for (int y = 0; y < 4; y++)
		for (int x = 0; x < d.n_head; x++)
			run_block(dim3(d.n_head, 4), dim3(128), uint3{ (unsigned)x, (unsigned)y, 0 }, sched);
}

static void compare(const char *name, const data &d, int n_tok, int pos, const float *got)
{
	const size_t no = (size_t)n_tok * d.n_head * 512;
	std::vector<float> ref(no), mag(no);
	double smax = 0;
	x4r_mla_attn(n_tok, d.n_head, 512, 64, d.qt.data(), d.cache.data(), d.max_ctx, pos, KQ_SCALE,
		     ref.data(), mag.data(), &smax);
	double worst = 0;
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < no; i++) {
		double e = fabs((double)got[i] - ref[i]), q = mag[i] > 0 ? e / mag[i] : e;
		if (!(e <= 3e-5 * mag[i] + 1e-30)) {
			if (!bad)
				first = i;
			bad++;
		}
		if (q > worst || q != q)
			worst = q;
	}
	char msg[256];
	snprintf(msg, sizeof msg, "heads %d max_ctx %d pos %d tokens %d (max |score| %.1f): worst err/mag %.3g%s",
		 d.n_head, d.max_ctx, pos, n_tok, smax, worst, bad ? "" : "");
	if (bad)
		report(false, name, "%s; %zu of %zu beyond 3e-5*mag, first [%zu] got %.9g want %.9g", msg, bad, no,
		       first, got[first], ref[first]);
	else
		report(true, name, "%s", msg);
}

static void prefill_case(int n_head, int max_ctx, int n_tok, int pos, unsigned seed, float qsig = 1.2f)
{
	data d;
	make(d, n_head, max_ctx, n_tok, seed, qsig);
	const size_t no = (size_t)n_tok * n_head * 512;
	std::vector<float> o1(no), o2(no);
	memset(o1.data(), 0xff, no * 4);
	memset(o2.data(), 0xff, no * 4);
	prefill_emu(d, n_tok, pos, d.qt.data(), o1.data(), 0, false);
	compare("prefill mma", d, n_tok, pos, o1.data());
	prefill_emu(d, n_tok, pos, d.qt.data(), o2.data(), seed * 7 + 1, true);
	report(!memcmp(o1.data(), o2.data(), no * 4), "prefill mma schedule",
	       "heads %d pos %d tokens %d: random warp order and late copies give the same bits", n_head, pos, n_tok);
	/* a sub-chunk alone: the same bits */
	if (n_tok >= 3) {
		const int off = 1, nb = n_tok - 2;
		std::vector<float> o3((size_t)nb * n_head * 512);
		prefill_emu(d, nb, pos + off, d.qt.data() + (size_t)off * n_head * 576, o3.data(), 0, false);
		report(!memcmp(o3.data(), o1.data() + (size_t)off * n_head * 512, o3.size() * 4), "prefill mma chunking",
		       "heads %d pos %d tokens %d: tokens %d..%d alone", n_head, pos, n_tok, pos + off, pos + off + nb - 1);
	}
}

static void decode_case(int n_head, int max_ctx, int pos, unsigned seed, float qsig = 1.2f)
{
	data d;
	make(d, n_head, max_ctx, 1, seed, qsig);
	const size_t no = (size_t)n_head * 512;
	std::vector<float> o1(no), o2(no);
	for (int tr = 1; tr <= 2; tr++) { /* rounds of 32 and 64 cache rows */
		char nm[64];
		memset(o1.data(), 0xff, no * 4);
		decode_emu(d, pos, o1.data(), 0, false, tr);
		snprintf(nm, sizeof nm, "decode mma, rounds of %d", 32 * tr);
		compare(nm, d, 1, pos, o1.data());
		decode_emu(d, pos, o2.data(), seed * 5 + 3, true, tr);
		snprintf(nm, sizeof nm, "decode mma schedule, rounds of %d", 32 * tr);
		report(!memcmp(o1.data(), o2.data(), no * 4), nm,
		       "heads %d pos %d: random warp order and late copies give the same bits", n_head, pos);
	}
}

int main(int argc, char **argv)
{
	const char *only = argc > 1 ? argv[1] : "";
	emu_smem = mla_mma::smraw;
	SMEM = sizeof(mla_mma::smraw);
	if (!*only || strstr("decode", only)) {
		decode_case(16, 32, 28, 1);     /* one split, a part tile */
		decode_case(32, 100, 70, 2);    /* splits, the last short */
		decode_case(16, 200, 199, 3, 12.f); /* peaked */
		decode_case(32, 2100, 2099, 4);  /* 64 splits of 33 rows: rounds of 64 half empty */
		decode_case(16, 300, 150, 5);    /* a span of 160: two and a half rounds of 64 */
	}
	if (!*only || strstr("prefill", only)) {
		prefill_case(16, 64, 7, 0, 11);    /* 3.5 blocks, contexts 1..7 */
		prefill_case(16, 80, 5, 62, 12);   /* across a tile edge */
		prefill_case(32, 40, 1, 0, 13);    /* one token one row */
		prefill_case(32, 100, 3, 60, 14);
		prefill_case(48, 128, 5, 90, 15);  /* blocks across tokens */
		prefill_case(16, 64, 5, 62, 16);   /* tokens past max_ctx: clamped */
		prefill_case(32, 130, 2, 97, 17, 12.f); /* peaked */
		prefill_case(16, 96, 7, 30, 18);
	}
	printf("# %d passed, %d failed (%ld warp collectives)\n", passes, fails, n_collectives);
	return fails ? 1 : 0;
}
