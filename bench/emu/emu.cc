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
#include <stdarg.h>
#include <ucontext.h>

#include <deque>
#include <functional>
#include <random>
#include <vector>

#include "x4_kern.h"
#include "mla_mma.cuh"
#include "mla_prefill_mma.cuh"

namespace mla_mma {
alignas(16) unsigned char smraw[232448];
}
namespace x4c {
alignas(16) float sm[1];
}

/* ---------------- runtime ---------------- */
struct emu_copy {
	uint32_t dst;
	const void *src;
	int bytes;
};
struct emu_fiber {
	ucontext_t ctx;
	uint3 tid;
	int warp, lane;
	bool done;
	std::vector<emu_copy> open;
	std::deque<std::vector<emu_copy>> groups;
	std::vector<char> stack;
};
struct emu_warp {
	int arrived, gen, op;
	uint32_t in[32][10];
	uint32_t out[32][4];
};
emu_fiber *emu_cur;
uint3 blockIdx;
dim3 gridDim, blockDim;
static ucontext_t sched_ctx;
static std::vector<emu_fiber> fibers;
static std::vector<emu_warp> warps;
static int bar_arrived, bar_gen, n_threads;
static long progress;
static bool late_copies;
static std::function<void()> body;
static long n_collectives;

uint3 emu_tid() { return emu_cur->tid; }
static void yield_() { swapcontext(&emu_cur->ctx, &sched_ctx); }
static void die(const char *m)
{
	fprintf(stderr, "emu: %s (block %u,%u thread %u)\n", m, blockIdx.x, blockIdx.y, emu_cur ? emu_cur->tid.x : 0);
	abort();
}

void __syncthreads()
{
	int g = bar_gen;
	if (++bar_arrived == n_threads) {
		bar_arrived = 0;
		bar_gen++;
		progress++;
		return;
	}
	while (bar_gen == g)
		yield_();
}

typedef void (*compute_fn)(emu_warp &);
static void warp_op(int op, const uint32_t *in, int nin, uint32_t *out, int nout, compute_fn f)
{
	emu_warp &w = warps[emu_cur->warp];
	const int l = emu_cur->lane, g = w.gen;
	if (w.arrived == 0)
		w.op = op;
	else if (w.op != op)
		die("divergent warp collective");
	memcpy(w.in[l], in, nin * 4);
	if (++w.arrived == 32) {
		f(w);
		w.arrived = 0;
		w.gen++;
		progress++;
		n_collectives++;
	} else {
		while (w.gen == g)
			yield_();
	}
	memcpy(out, w.out[l], nout * 4);
}

static void shfl_xor_c(emu_warp &w)
{
	const int m = (int)w.in[0][1];
	for (int l = 0; l < 32; l++) {
		if ((int)w.in[l][1] != m)
			die("shfl lanes disagree on the mask");
		w.out[l][0] = w.in[l ^ m][0];
	}
}
static void shfl_idx_c(emu_warp &w)
{
	for (int l = 0; l < 32; l++)
		w.out[l][0] = w.in[w.in[l][1] & 31][0];
}
float __shfl_xor_sync(unsigned mask, float v, int m)
{
	if (mask != 0xffffffffu)
		die("partial mask");
	uint32_t in[2] = { __float_as_uint(v), (uint32_t)m }, out;
	warp_op(1, in, 2, &out, 1, shfl_xor_c);
	return __uint_as_float(out);
}
int __shfl_xor_sync(unsigned mask, int v, int m)
{
	uint32_t in[2] = { (uint32_t)v, (uint32_t)m }, out;
	warp_op(1, in, 2, &out, 1, shfl_xor_c);
	return (int)out;
}
float __shfl_sync(unsigned mask, float v, int s)
{
	uint32_t in[2] = { __float_as_uint(v), (uint32_t)s }, out;
	warp_op(2, in, 2, &out, 1, shfl_idx_c);
	return __uint_as_float(out);
}
int __shfl_sync(unsigned mask, int v, int s)
{
	uint32_t in[2] = { (uint32_t)v, (uint32_t)s }, out;
	warp_op(2, in, 2, &out, 1, shfl_idx_c);
	return (int)out;
}

/* shared memory: the dynamic buffer is mla_mma::smraw */
static const size_t SMEM = sizeof(mla_mma::smraw);
uint32_t emu_smem_off(const void *p)
{
	const unsigned char *c = (const unsigned char *)p;
	if (c < mla_mma::smraw || c >= mla_mma::smraw + SMEM)
		die("smem_u32 of a pointer outside shared memory");
	return (uint32_t)(c - mla_mma::smraw);
}
static void do_copy(const emu_copy &c)
{
	if (c.bytes)
		memcpy(mla_mma::smraw + c.dst, c.src, c.bytes);
	memset(mla_mma::smraw + c.dst + c.bytes, 0, 16 - c.bytes);
}
void emu_cp_async16(uint32_t dst, const void *src, int bytes)
{
	if (dst % 16 || dst + 16 > SMEM || (uintptr_t)src % 16 || bytes < 0 || bytes > 16)
		die("bad cp.async");
	emu_copy c = { dst, src, bytes };
	if (late_copies)
		emu_cur->open.push_back(c);
	else
		do_copy(c);
}
void emu_cp_commit()
{
	emu_cur->groups.push_back(emu_cur->open);
	emu_cur->open.clear();
}
void emu_cp_wait(int n)
{
	while ((int)emu_cur->groups.size() > n) {
		for (const emu_copy &c : emu_cur->groups.front())
			do_copy(c);
		emu_cur->groups.pop_front();
	}
}

static uint16_t smem_h(uint32_t a)
{
	if (a + 2 > SMEM)
		die("ldmatrix past shared memory");
	uint16_t h;
	memcpy(&h, mla_mma::smraw + a, 2);
	return h;
}
/* ldmatrix.x4: lanes 8i..8i+7 address matrix i's rows; lane l gets, in
 * register i, row l/4 columns 2(l%4), +1; .trans: rows 2(l%4), +1 of column l/4 */
static void ldsm_c(emu_warp &w, bool trans)
{
	for (int l = 0; l < 32; l++)
		if (w.in[l][0] % 16)
			die("ldmatrix row address not 16-byte aligned");
	for (int l = 0; l < 32; l++)
		for (int i = 0; i < 4; i++) {
			uint16_t h0, h1;
			if (!trans) {
				uint32_t ra = w.in[8 * i + l / 4][0];
				h0 = smem_h(ra + 2 * (2 * (l % 4)));
				h1 = smem_h(ra + 2 * (2 * (l % 4) + 1));
			} else {
				h0 = smem_h(w.in[8 * i + 2 * (l % 4)][0] + 2 * (l / 4));
				h1 = smem_h(w.in[8 * i + 2 * (l % 4) + 1][0] + 2 * (l / 4));
			}
			w.out[l][i] = (uint32_t)h0 | (uint32_t)h1 << 16;
		}
}
static void ldsm_n(emu_warp &w) { ldsm_c(w, false); }
static void ldsm_t(emu_warp &w) { ldsm_c(w, true); }
void emu_ldsm(uint32_t (&r)[4], uint32_t addr, bool trans)
{
	warp_op(trans ? 4 : 3, &addr, 1, r, 4, trans ? ldsm_t : ldsm_n);
}

static float hf(uint32_t w, int e) { return __half2float(__ushort_as_half((unsigned short)(w >> (16 * e)))); }
/* mma.m16n8k16.row.col f32.f16.f16.f32 (PTX ISA fragment layouts), groupID
 * g = l/4, threadID_in_group t = l%4:
 *   A: a0,a1 (reg 0) row g, cols 2t,2t+1; a2,a3 (reg 1) row g+8; a4,a5 (reg 2)
 *      row g, cols 2t+8,+9; a6,a7 (reg 3) row g+8, cols 2t+8,+9
 *   B: b0,b1 (reg 0) rows 2t,2t+1 of col g; b2,b3 (reg 1) rows 2t+8,+9
 *   C/D: c0,c1 row g cols 2t,2t+1; c2,c3 row g+8
 * D = A.B + C, here with the products and their sum exact, rounded once. */
static void mma_c(emu_warp &w)
{
	float A[16][16], B[16][8], C[16][8];
	int na[16][16] = {}, nb[16][8] = {}, nc[16][8] = {};
	for (int l = 0; l < 32; l++) {
		int g = l / 4, t = l % 4;
		const uint32_t *in = w.in[l];
		int ar[4] = { g, g + 8, g, g + 8 }, ac[4] = { 2 * t, 2 * t, 2 * t + 8, 2 * t + 8 };
		for (int r = 0; r < 4; r++)
			for (int e = 0; e < 2; e++) {
				A[ar[r]][ac[r] + e] = hf(in[r], e);
				na[ar[r]][ac[r] + e]++;
			}
		for (int r = 0; r < 2; r++)
			for (int e = 0; e < 2; e++) {
				B[2 * t + 8 * r + e][g] = hf(in[4 + r], e);
				nb[2 * t + 8 * r + e][g]++;
			}
		int cr[4] = { g, g, g + 8, g + 8 }, cc[4] = { 2 * t, 2 * t + 1, 2 * t, 2 * t + 1 };
		for (int r = 0; r < 4; r++) {
			C[cr[r]][cc[r]] = __uint_as_float(in[6 + r]);
			nc[cr[r]][cc[r]]++;
		}
	}
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++)
			if (na[i][j] != 1 || (j < 8 && (nb[i][j] != 1 || nc[i][j] != 1)))
				die("fragment layout: an element given twice or never");
	for (int l = 0; l < 32; l++) {
		int g = l / 4, t = l % 4;
		int cr[4] = { g, g, g + 8, g + 8 }, cc[4] = { 2 * t, 2 * t + 1, 2 * t, 2 * t + 1 };
		for (int r = 0; r < 4; r++) {
			double s = C[cr[r]][cc[r]];
			for (int k = 0; k < 16; k++)
				s += (double)A[cr[r]][k] * B[k][cc[r]];
			w.out[l][r] = __float_as_uint((float)s);
		}
	}
}
void emu_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	uint32_t in[10] = { a[0], a[1], a[2], a[3], b0, b1, __float_as_uint(d[0]), __float_as_uint(d[1]),
			    __float_as_uint(d[2]), __float_as_uint(d[3]) },
		 out[4];
	warp_op(5, in, 10, out, 4, mma_c);
	for (int r = 0; r < 4; r++)
		d[r] = __uint_as_float(out[r]);
}

static void entry()
{
	body();
	emu_cur->done = true;
}

/* one block of the grid, its threads on fibers; sched 0: in order, else a
 * random order every round from that seed */
static void run_block(dim3 grid, dim3 block, uint3 bid, unsigned sched)
{
	gridDim = grid;
	blockDim = block;
	blockIdx = bid;
	n_threads = block.x * block.y * block.z;
	fibers.clear();
	fibers.resize(n_threads);
	warps.assign((n_threads + 31) / 32, emu_warp{});
	bar_arrived = bar_gen = 0;
	memset(mla_mma::smraw, 0xff, SMEM); /* NaN in fp32 and fp16: stale reads show */
	for (int i = 0; i < n_threads; i++) {
		emu_fiber &f = fibers[i];
		f.tid = uint3{ (unsigned)i, 0, 0 };
		f.warp = i / 32;
		f.lane = i % 32;
		f.done = false;
		f.stack.resize(256 << 10);
		getcontext(&f.ctx);
		f.ctx.uc_stack.ss_sp = f.stack.data();
		f.ctx.uc_stack.ss_size = f.stack.size();
		f.ctx.uc_link = &sched_ctx;
		makecontext(&f.ctx, entry, 0);
	}
	std::mt19937 rng(sched);
	std::vector<int> order(n_threads);
	for (int i = 0; i < n_threads; i++)
		order[i] = i;
	for (;;) {
		long p0 = progress;
		int live = 0;
		if (sched)
			std::shuffle(order.begin(), order.end(), rng);
		for (int i : order) {
			emu_fiber &f = fibers[i];
			if (f.done)
				continue;
			emu_cur = &f;
			swapcontext(&sched_ctx, &f.ctx);
			if (f.done) {
				progress++;
				for (auto &g : f.groups)
					if (!g.empty())
						die("a thread exited with copies outstanding");
			} else
				live++;
		}
		if (!live)
			break;
		if (progress == p0)
			die("deadlock: no thread can move");
	}
	emu_cur = NULL;
}

/* ---------------- the checks ---------------- */
static int fails, passes;
static void report(bool ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(bool ok, const char *name, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("%s %s: ", ok ? "PASS" : "FAIL", name);
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
	ok ? passes++ : fails++;
}

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

static void decode_emu(const data &d, int pos, float *ob, unsigned sched, bool late)
{
	late_copies = late;
	static int p;
	p = pos;
	const int nsplit = x4k_mla_nsplit(d.max_ctx);
	static std::vector<char> ws;
	ws.assign(x4k_mla_decode_workspace_bytes(d.n_head, 512, d.max_ctx) + 64, 0);
	x4c::mla_params a = x4c::mla_decode_params(d.qt.data(), d.cache.data(), &p, ob, ws.data(), d.n_head, 512,
					      576, d.max_ctx, KQ_SCALE, nsplit);
	body = [&] { mla_mma::mla_mma_kernel<2>(a); };
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
	memset(o1.data(), 0xff, no * 4);
	decode_emu(d, pos, o1.data(), 0, false);
	compare("decode mma", d, 1, pos, o1.data());
	decode_emu(d, pos, o2.data(), seed * 5 + 3, true);
	report(!memcmp(o1.data(), o2.data(), no * 4), "decode mma schedule",
	       "heads %d pos %d: random warp order and late copies give the same bits", n_head, pos);
}

int main(int argc, char **argv)
{
	const char *only = argc > 1 ? argv[1] : "";
	if (!*only || strstr("decode", only)) {
		decode_case(16, 32, 28, 1);     /* one split, a part tile */
		decode_case(32, 100, 70, 2);    /* splits, the last short */
		decode_case(16, 200, 199, 3, 12.f); /* peaked */
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
