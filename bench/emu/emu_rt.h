/* emu_rt.h - the emulator's runtime, shared by its drivers (emu.cc: the
 * attention kernels, emu_gemm.cc: the gemm core, emu_q6k.cc: the Q6_K gemv,
 * emu_route.cc: the router's top k): one fiber a thread, warp collectives
 * (shfl, match.any, redux.sync, ldmatrix, mma.sync) as rendezvous with the
 * PTX ISA's fragment layouts, __syncthreads as a block barrier, cp.async
 * landing at issue or at the wait that covers it, the warps in order or at
 * random, and the PASS/FAIL report.  Included once by each driver (a
 * program each), after the kernel headers; the driver points emu_smem/SMEM
 * at the buffer its kernels' dynamic shared memory is. */
#include <stdarg.h>
#include <ucontext.h>

#include <deque>
#include <functional>
#include <random>
#include <vector>

/* ---------------- runtime ---------------- */
struct emu_copy {
	uint32_t dst;
	const void *src;
	int bytes, size; /* bytes read of the size written (the rest zeros) */
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
static size_t emu_stack = 256 << 10; /* a fiber's stack: a driver of small kernels may take less */

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

/* bar.sync id, n (id 1..15; 0 is __syncthreads'): n arrivals release them */
static int nbar_arrived[16], nbar_gen[16];
void emu_bar_named(int id, int n)
{
	if (id < 1 || id > 15 || n < 1 || n > n_threads)
		die("bad named barrier");
	int g = nbar_gen[id];
	if (++nbar_arrived[id] == n) {
		nbar_arrived[id] = 0;
		nbar_gen[id]++;
		progress++;
		return;
	}
	while (nbar_gen[id] == g)
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
	if (nin) /* __syncwarp passes none: memcpy's NULL is undefined even for 0 bytes */
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
	if (nout)
		memcpy(out, w.out[l], nout * 4);
}

static void syncwarp_c(emu_warp &) {}
void __syncwarp(unsigned mask)
{
	if (mask != 0xffffffffu)
		die("partial mask");
	warp_op(7, NULL, 0, NULL, 0, syncwarp_c);
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

/* shfl.up: lane l takes lane l - d's value; the lanes below d keep their own */
static void shfl_up_c(emu_warp &w)
{
	for (int l = 0; l < 32; l++)
		w.out[l][0] = w.in[l >= (int)w.in[l][1] ? l - (int)w.in[l][1] : l][0];
}
int __shfl_up_sync(unsigned mask, int v, unsigned d)
{
	if (mask != 0xffffffffu)
		die("partial mask");
	uint32_t in[2] = { (uint32_t)v, d }, out;
	warp_op(8, in, 2, &out, 1, shfl_up_c);
	return (int)out;
}
/* shfl.down: lane l takes lane l + d's value; the lanes past 31 - d keep their own */
static void shfl_down_c(emu_warp &w)
{
	for (int l = 0; l < 32; l++)
		w.out[l][0] = w.in[l + (int)w.in[l][1] < 32 ? l + (int)w.in[l][1] : l][0];
}
float __shfl_down_sync(unsigned mask, float v, unsigned d)
{
	if (mask != 0xffffffffu)
		die("partial mask");
	uint32_t in[2] = { __float_as_uint(v), d }, out;
	warp_op(14, in, 2, &out, 1, shfl_down_c);
	return __uint_as_float(out);
}
/* match.any.sync.b32: the lanes whose value equals this lane's */
static void match_any_c(emu_warp &w)
{
	for (int l = 0; l < 32; l++) {
		uint32_t m = 0;
		for (int i = 0; i < 32; i++)
			m |= (uint32_t)(w.in[i][0] == w.in[l][0]) << i;
		w.out[l][0] = m;
	}
}
unsigned __match_any_sync(unsigned mask, int v)
{
	if (mask != 0xffffffffu)
		die("partial mask");
	uint32_t in = (uint32_t)v, out;
	warp_op(9, &in, 1, &out, 1, match_any_c);
	return out;
}

/* redux.sync.{max,min}.{u32,s32}: the warp's largest or smallest value, in
 * every lane; a signed and an unsigned reduction are different collectives */
template <class T, bool MAX>
static void redux_c(emu_warp &w)
{
	T r = (T)w.in[0][0];
	for (int l = 1; l < 32; l++) {
		const T v = (T)w.in[l][0];
		if (MAX ? v > r : v < r)
			r = v;
	}
	for (int l = 0; l < 32; l++)
		w.out[l][0] = (uint32_t)r;
}
template <class T, bool MAX>
static T redux(int op, unsigned mask, T v)
{
	if (mask != 0xffffffffu)
		die("partial mask");
	uint32_t in = (uint32_t)v, out;
	warp_op(op, &in, 1, &out, 1, redux_c<T, MAX>);
	return (T)out;
}
unsigned __reduce_max_sync(unsigned mask, unsigned v) { return redux<unsigned, true>(10, mask, v); }
unsigned __reduce_min_sync(unsigned mask, unsigned v) { return redux<unsigned, false>(11, mask, v); }
int __reduce_max_sync(unsigned mask, int v) { return redux<int, true>(12, mask, v); }
int __reduce_min_sync(unsigned mask, int v) { return redux<int, false>(13, mask, v); }

/* shared memory: the dynamic buffer the driver names (emu_smem, SMEM bytes) */
static unsigned char *emu_smem;
static size_t SMEM;
uint32_t emu_smem_off(const void *p)
{
	const unsigned char *c = (const unsigned char *)p;
	if (c < emu_smem || c >= emu_smem + SMEM)
		die("smem_u32 of a pointer outside shared memory");
	return (uint32_t)(c - emu_smem);
}
static void do_copy(const emu_copy &c)
{
	if (c.bytes)
		memcpy(emu_smem + c.dst, c.src, c.bytes);
	memset(emu_smem + c.dst + c.bytes, 0, c.size - c.bytes);
}
/* the global memory a kernel may read by cp.async, where the driver lists
 * it (emu_global_add; none listed: any) */
static std::vector<std::pair<const char *, size_t>> emu_global;
static void emu_global_add(const void *p, size_t n) { emu_global.push_back({ (const char *)p, n }); }
static bool in_global(const void *src, int bytes)
{
	if (emu_global.empty() || !bytes)
		return true;
	for (auto &g : emu_global)
		if ((const char *)src >= g.first && (const char *)src + bytes <= g.first + g.second)
			return true;
	return false;
}
static void cp_async(uint32_t dst, const void *src, int bytes, int size)
{
	if (dst % size || dst + size > SMEM || (uintptr_t)src % size || bytes < 0 || bytes > size)
		die("bad cp.async");
	if (!in_global(src, bytes))
		die("cp.async reads outside the buffers the driver listed");
	emu_copy c = { dst, src, bytes, size };
	if (late_copies)
		emu_cur->open.push_back(c);
	else
		do_copy(c);
}
void emu_cp_async16(uint32_t dst, const void *src, int bytes) { cp_async(dst, src, bytes, 16); }
void emu_cp_async4(uint32_t dst, const void *src) { cp_async(dst, src, 4, 4); }
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
	memcpy(&h, emu_smem + a, 2);
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
static float bf(uint32_t w, int e) { return __uint_as_float((w >> (16 * e)) << 16); }
/* mma.m16n8k16.row.col f32.{f16,bf16}.{f16,bf16}.f32 (PTX ISA fragment
 * layouts), groupID g = l/4, threadID_in_group t = l%4:
 *   A: a0,a1 (reg 0) row g, cols 2t,2t+1; a2,a3 (reg 1) row g+8; a4,a5 (reg 2)
 *      row g, cols 2t+8,+9; a6,a7 (reg 3) row g+8, cols 2t+8,+9
 *   B: b0,b1 (reg 0) rows 2t,2t+1 of col g; b2,b3 (reg 1) rows 2t+8,+9
 *   C/D: c0,c1 row g cols 2t,2t+1; c2,c3 row g+8
 * D = A.B + C, here with the products and their sum exact, rounded once
 * (16 products of 11- or 8-bit significands and C sum exactly in double
 * unless their exponents span more than ~30 binades). */
template <float (*EL)(uint32_t, int)>
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
				A[ar[r]][ac[r] + e] = EL(in[r], e);
				na[ar[r]][ac[r] + e]++;
			}
		for (int r = 0; r < 2; r++)
			for (int e = 0; e < 2; e++) {
				B[2 * t + 8 * r + e][g] = EL(in[4 + r], e);
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
static void mma_run(int op, compute_fn f, float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	uint32_t in[10] = { a[0], a[1], a[2], a[3], b0, b1, __float_as_uint(d[0]), __float_as_uint(d[1]),
			    __float_as_uint(d[2]), __float_as_uint(d[3]) },
		 out[4];
	warp_op(op, in, 10, out, 4, f);
	for (int r = 0; r < 4; r++)
		d[r] = __uint_as_float(out[r]);
}
void emu_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { mma_run(5, mma_c<hf>, d, a, b0, b1); }
void emu_mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	mma_run(6, mma_c<bf>, d, a, b0, b1);
}

/* mma.m16n8k16.row.col.s32.u8.s8.s32: A 16x16 u8 (lane l, g = l/4, t = l%4:
 * a0's bytes A[g][4t + i], a1's A[g + 8][4t + i]), B 16x8 s8 (b's bytes
 * B[4t + i][g]), C and D s32 in the fp32 form's places; exact (wrapping as
 * the hardware's s32 would; the kernels' sums never come near). */
static void mma_u8s8_c(emu_warp &w)
{
	int A[16][16], B[16][8], C[16][8];
	for (int l = 0; l < 32; l++) {
		const int g = l / 4, t = l % 4;
		const uint32_t *in = w.in[l];
		for (int i = 0; i < 4; i++) {
			A[g][4 * t + i] = (int)(uint8_t)(in[0] >> 8 * i);
			A[g + 8][4 * t + i] = (int)(uint8_t)(in[1] >> 8 * i);
			B[4 * t + i][g] = (int)(int8_t)(in[2] >> 8 * i);
		}
		C[g][2 * t] = (int)in[3], C[g][2 * t + 1] = (int)in[4];
		C[g + 8][2 * t] = (int)in[5], C[g + 8][2 * t + 1] = (int)in[6];
	}
	for (int l = 0; l < 32; l++) {
		const int g = l / 4, t = l % 4;
		const int cr[4] = { g, g, g + 8, g + 8 }, cc[4] = { 2 * t, 2 * t + 1, 2 * t, 2 * t + 1 };
		for (int r = 0; r < 4; r++) {
			int64_t s = C[cr[r]][cc[r]];
			for (int k = 0; k < 16; k++)
				s += (int64_t)A[cr[r]][k] * B[k][cc[r]];
			w.out[l][r] = (uint32_t)s;
		}
	}
}
void emu_mma_u8s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b, const int (&c)[4])
{
	uint32_t in[7] = { a0, a1, b, (uint32_t)c[0], (uint32_t)c[1], (uint32_t)c[2], (uint32_t)c[3] }, out[4];
	warp_op(15, in, 7, out, 4, mma_u8s8_c);
	for (int r = 0; r < 4; r++)
		d[r] = (int)out[r];
}

/* fma.rn.bf16x2: each half a * b + c rounded once to BF16 (nearest even).
 * Here a * b (16 significant bits) + c sums in double (exact unless their
 * exponents are ~37 binades apart), rounded to BF16 on the double's bits
 * (not via float: that would round twice).  Outside BF16's normal range
 * (subnormals, overflow, NaN: never met by the kernels' exact integers) it
 * stops. */
static uint32_t bf16_rn(double v)
{
	if (v == 0)
		return signbit(v) ? 0x8000u : 0u;
	uint64_t u;
	memcpy(&u, &v, 8);
	const int e = (int)((u >> 52) & 0x7ff) - 1023;
	if (e < -126 || e > 127)
		die("fma_bf16x2 outside BF16's normal range");
	const uint64_t keep = u >> 45, rest = u & ((1ull << 45) - 1), half = 1ull << 44; /* 7 fraction bits kept */
	const uint64_t ur = (keep + (rest > half || (rest == half && (keep & 1)))) << 45;
	double vr;
	memcpy(&vr, &ur, 8);
	return __float_as_uint((float)vr) >> 16; /* exact: 8 significant bits */
}
uint32_t emu_fma_bf16x2(uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t r = 0;
	for (int e = 0; e < 2; e++)
		r |= bf16_rn((double)bf(a, e) * bf(b, e) + bf(c, e)) << (16 * e);
	return r;
}

static void entry()
{
	body();
	emu_cur->done = true;
}

/* thread t of a block on fiber f, at the start of body() */
static void fiber_init(emu_fiber &f, unsigned t)
{
	f.tid = uint3{ t, 0, 0 };
	f.warp = (int)t / 32;
	f.lane = (int)t % 32;
	f.done = false;
	f.stack.resize(emu_stack);
	getcontext(&f.ctx);
	f.ctx.uc_stack.ss_sp = f.stack.data();
	f.ctx.uc_stack.ss_size = f.stack.size();
	f.ctx.uc_link = &sched_ctx;
	makecontext(&f.ctx, entry, 0);
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
	memset(nbar_arrived, 0, sizeof nbar_arrived);
	memset(emu_smem, 0xff, SMEM); /* NaN in fp32 and fp16: stale reads show */
	for (int i = 0; i < n_threads; i++)
		fiber_init(fibers[i], (unsigned)i);
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
