/* emu_dataflow.cc - runs the step-structure probe's two forms
 * (bench/kernels/dataflow.cuh, the lab bench/kernels/dataflow.cu) on the CPU
 * with emu_rt.h's runtime, on the tiny preset's plan (its head cut to 4,096
 * rows) at 37 positions of cache, two steps: the kernels form a
 * stage at a time (each unit a block), and the dataflow form with all of its
 * blocks' threads on fibers at once (the loader warp, the compute warps,
 * the counters between blocks), which emu_rt.h's one-block run_block cannot
 * do: run_grid below swaps each block's barriers and warps in as its
 * threads run.  The bulk copies land at issue, or late: the page poisoned
 * (0xff, NaN) at issue and filled only when a thread waits on its barrier,
 * so that a read before the wait shows.  Checked: every stage's output of
 * the kernels form against a float64 product of the same rows with the same
 * input (the stage before's output) at 3e-5 of its scaled sum of |terms|,
 * in the bf16 plan and in the iq4 plan (the IQ4_NL stages' bytes as codes,
 * decoded as quant_dev.cuh's CUDA-core lookup does);
 * the dataflow form's outputs the same bits as the kernels form's, for 1 to
 * 5 blocks, 8 and 16 compute warps, rings of 1, 2 and 5 pages, in order and
 * at random, the copies at issue and late; each stage's counter at steps x units; no wait gave up
 * and no copy read outside the weights or wrote outside its page.  A
 * deadlock (every thread waiting, for 64 rounds) ends the run.  Run by
 * tests/tool_emu_dataflow.sh in make test. */
#include <map>

#include "cuda_runtime.h" /* emu_cuda.h */
#define X4_EMU 1
#include "dataflow.cuh"

using namespace x4df;

/* the blocks' dynamic shared memory, and the block whose thread runs */
static std::vector<std::vector<uint8_t>> df_smem;
static unsigned df_cur;

#include "emu_rt.h"

/* ---------------- the probe's primitives ---------------- */
struct df_copy {
	void *dst;
	const void *src;
	unsigned bytes;
};
struct df_bar {
	unsigned expected, pending, phase;
	long tx;
	std::vector<df_copy> copies; /* late: issued, not landed */
};
static std::map<const uint64_t *, df_bar> bars;
static bool df_late;
static const uint8_t *w_lo, *w_hi; /* the weights: every copy's source */
static size_t df_smem_bytes;
static long n_copies;

namespace x4df {
uint8_t *emu_df_smem() { return df_smem[df_cur].data(); }

static df_bar &bar_of(const uint64_t *b)
{
	auto it = bars.find(b);
	if (it == bars.end())
		die("an mbarrier used before its init");
	return it->second;
}

static void complete(df_bar &m)
{
	if (m.pending == 0 && m.tx == 0) {
		m.phase++;
		m.pending = m.expected;
		progress++;
	}
}

static void land(df_bar &m)
{
	for (const df_copy &c : m.copies) {
		memcpy(c.dst, c.src, c.bytes);
		m.tx -= c.bytes;
	}
	m.copies.clear();
	complete(m);
}

void emu_df_mbar_init(uint64_t *b, unsigned count)
{
	const uint8_t *p = reinterpret_cast<const uint8_t *>(b), *s = df_smem[df_cur].data();
	if (p < s || p + 8 > s + df_smem_bytes || (uintptr_t)p % 8)
		die("an mbarrier outside the block's shared memory");
	bars[b] = df_bar{ count, count, 0, 0, {} };
	progress++;
}

bool emu_df_mbar_try(uint64_t *b, unsigned parity)
{
	df_bar &m = bar_of(b);
	if ((m.phase & 1) != parity)
		return true;
	if (!m.copies.empty()) { /* late copies land when their barrier is waited on */
		land(m);
		progress++;
		if ((m.phase & 1) != parity)
			return true;
	}
	yield_();
	return false;
}

void emu_df_mbar_arrive(uint64_t *b)
{
	df_bar &m = bar_of(b);
	if (!m.pending)
		die("an mbarrier arrival past its count");
	m.pending--;
	complete(m);
}

void emu_df_bulk(void *dst, const void *src, unsigned bytes, uint64_t *b)
{
	const uint8_t *d = static_cast<const uint8_t *>(dst), *s = static_cast<const uint8_t *>(src);
	const uint8_t *lo = df_smem[df_cur].data();
	if (bytes == 0 || bytes % 16 || (uintptr_t)d % 16 || (uintptr_t)s % 16)
		die("a bulk copy not in 16-byte pieces");
	if (d < lo || d + bytes > lo + df_smem_bytes)
		die("a bulk copy past the block's shared memory");
	if (s < w_lo || s + bytes > w_hi)
		die("a bulk copy from outside the weights");
	df_bar &m = bar_of(b);
	if (!m.pending)
		die("a bulk copy's arrival past its barrier's count");
	m.tx += bytes; /* mbarrier.arrive.expect_tx */
	m.pending--;
	if (df_late) {
		memset(dst, 0xff, bytes);
		m.copies.push_back(df_copy{ dst, src, bytes });
	} else {
		memcpy(dst, src, bytes);
		m.tx -= bytes;
	}
	n_copies++;
	progress++;
	complete(m);
}

unsigned emu_df_ld_acquire(const unsigned *p)
{
	yield_(); /* a spin: let the others run */
	return *p;
}
} /* namespace x4df */

/* blocks b0 .. b0 + nb - 1 of a grid of gridx blocks of `threads`, all of
 * their threads on fibers at once; sched 0: in order, else a random order
 * every round from that seed */
static void run_grid(unsigned b0, unsigned nb, unsigned gridx, unsigned threads, unsigned sched,
		     std::function<void()> kern)
{
	struct bstate {
		std::vector<emu_warp> warps;
		int bar_arrived = 0, bar_gen = 0, nba[16] = {}, nbg[16] = {};
	};
	std::vector<bstate> B(nb);
	for (bstate &s : B)
		s.warps.assign((threads + 31) / 32, emu_warp{});
	df_smem.assign(nb, std::vector<uint8_t>(df_smem_bytes, 0xff));
	bars.clear();
	gridDim = dim3(gridx);
	blockDim = dim3(threads);
	n_threads = (int)threads;
	body = kern;
	const size_t n = (size_t)nb * threads;
	fibers.clear();
	fibers.resize(n);
	for (size_t i = 0; i < n; i++)
		fiber_init(fibers[i], (unsigned)(i % threads));
	int in = -1; /* the block whose state the runtime's globals hold */
	auto swap_in = [&](int b) {
		if (in == b)
			return;
		if (in >= 0) {
			bstate &s = B[in];
			std::swap(warps, s.warps);
			s.bar_arrived = bar_arrived, s.bar_gen = bar_gen;
			memcpy(s.nba, nbar_arrived, sizeof s.nba);
			memcpy(s.nbg, nbar_gen, sizeof s.nbg);
		}
		bstate &s = B[b];
		std::swap(warps, s.warps);
		bar_arrived = s.bar_arrived, bar_gen = s.bar_gen;
		memcpy(nbar_arrived, s.nba, sizeof s.nba);
		memcpy(nbar_gen, s.nbg, sizeof s.nbg);
		blockIdx = uint3{ b0 + (unsigned)b, 0, 0 };
		df_cur = (unsigned)b;
		in = b;
	};
	std::mt19937 rng(sched);
	std::vector<size_t> order(n);
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	for (int idle = 0;;) {
		const long p0 = progress;
		size_t live = 0;
		if (sched)
			std::shuffle(order.begin(), order.end(), rng);
		for (size_t i : order) {
			emu_fiber &f = fibers[i];
			if (f.done)
				continue;
			swap_in((int)(i / threads));
			emu_cur = &f;
			swapcontext(&sched_ctx, &f.ctx);
			if (f.done)
				progress++;
			else
				live++;
		}
		if (!live)
			break;
		idle = progress == p0 ? idle + 1 : 0;
		if (idle > 64)
			die("deadlock: no thread has moved for 64 rounds");
	}
	emu_cur = NULL; /* the runtime's globals keep the last block's state: the next run sets its own */
}

/* one form's state: its stages (outputs and inputs its own), counters, error */
struct form {
	std::vector<stage> st;
	std::vector<float> y;
	std::vector<unsigned> done;
	int err = 0;
	form(const plan &P, const std::vector<size_t> &yoff)
	    : st(P.st), y(yoff.back(), 0.f), done(P.st.size(), 0)
	{
		wire(st, y.data(), yoff);
	}
};

/* a kernels form: stage_kernel<NPG, VX> on G blocks a stage (0: a block a
 * unit), its blocks eight at a time */
static void run_kernels(form &F, int steps, unsigned sched, bool late, int npg = 1, bool vx = false, int G = 0)
{
	df_late = late;
	df_smem_bytes = stage_smem(npg);
	for (int step = 0; step < steps; step++)
		for (size_t s = 0; s < F.st.size(); s++) {
			const unsigned g = (unsigned)(G ? std::min(F.st[s].units, G) : F.st[s].units);
			for (unsigned b0 = 0; b0 < g; b0 += 8)
				run_grid(b0, std::min(8u, g - b0), g, 32 * CW, sched ? sched + 977 * (unsigned)s : 0, [&] {
					if (npg == 2)
						stage_kernel<2, true>(&F.st[s], step, &F.err, nullptr);
					else if (vx)
						stage_kernel<1, true>(&F.st[s], step, &F.err, nullptr);
					else
						stage_kernel<1, false>(&F.st[s], step, &F.err, nullptr);
				});
		}
}

static void run_dataflow(form &F, const plan &P, int G, int nw, int steps, int npage, unsigned sched, bool late,
			 bool wv, int mode)
{
	dealt d = flatten(deal(P, G));
	std::vector<int2> &flat = d.flat;
	std::vector<int> &off = d.off;
	df_late = late;
	df_smem_bytes = dataflow_smem(npage);
	run_grid(0, (unsigned)G, (unsigned)G, 32 * (nw + 1), sched, [&] {
		if (wv && nw == 16)
			dataflow_warp_kernel<16>(F.st.data(), flat.data(), off.data(), F.done.data(), steps, npage, &F.err,
						 mode);
		else if (wv)
			dataflow_warp_kernel<8>(F.st.data(), flat.data(), off.data(), F.done.data(), steps, npage, &F.err,
						mode);
		else if (nw == 16)
			dataflow_kernel<16>(F.st.data(), flat.data(), off.data(), F.done.data(), steps, npage, &F.err);
		else
			dataflow_kernel<8>(F.st.data(), flat.data(), off.data(), F.done.data(), steps, npage, &F.err);
	});
}

/* the plan (iq4: the IQ4_NL stages read as codes) run by each form; the
 * dataflow configurations from cfgs[0 .. ncfg) */
struct cfg {
	int G, nw, npage;
	unsigned sched;
	bool late;
	bool wv;  /* the form by warps (dataflowv) */
	int mode; /* its waits: DF_POLL, or DF_NAP (a pause between polls) */
};

static void check_plan(const x4_config &c, bool iq4, const cfg *cfgs, int ncfg, int uniform = 0)
{
	const char *mode = uniform ? "uniform" : iq4 ? "iq4" : "bf16";
	const int ctx = 37, steps = 2;
	variant v;
	v.uniform = uniform;
	plan P = make_plan(c, ctx, iq4, 0, v);
	const int ns = (int)P.st.size();
	/* the weights: BF16 words of 2^-7..2^-4 (the lab's filler's range) */
	std::vector<uint8_t> W(P.wbytes + 16);
	uint8_t *w = W.data() + (16 - (uintptr_t)W.data() % 16) % 16;
	std::mt19937 rng(5);
	for (size_t i = 0; i < P.wbytes / 2; i++) {
		const uint32_t z = rng();
		const uint16_t h = (uint16_t)((z & 0x807fu) | (((z >> 7) & 3u) + 0x78u) << 7);
		memcpy(w + 2 * i, &h, 2);
	}
	w_lo = w, w_hi = w + P.wbytes;
	for (stage &s : P.st)
		s.w = w + reinterpret_cast<size_t>(s.w);
	const std::vector<size_t> yoff = out_offsets(P);
	size_t units = 0;
	int n_codes = 0;
	for (const stage &s : P.st) {
		units += s.units;
		n_codes += s.codes;
	}
	printf("# %s: the tiny plan at context %d: %d stages (%d of codes), %zu units a step, %.1f MB a step\n",
	       mode, ctx, ns, n_codes, units, P.bytes * 1e-6);
	char name[96];

	/* the kernels form, in order with the copies at issue: the reference */
	form K(P, yoff);
	run_kernels(K, steps, 0, false);
	snprintf(name, sizeof name, "%s.kernels.waits", mode);
	report(!K.err, name, "no wait gave up");
	{
		static const int8_t cb[16] = { X4B_IQ4NL_CODES_LO, X4B_IQ4NL_CODES_HI };
		size_t bad = 0, n = 0;
		int first = -1;
		double worst = 0;
		for (int s = 1; s < ns; s++) { /* stage 0's input is the previous step's, overwritten */
			const stage &S = K.st[s];
			const unsigned m = (unsigned)S.nx - 1;
			for (int r = 0; r < S.rows; r++, n++) {
				const uint8_t *row = S.w + (size_t)r * S.rb;
				double sum = 0, mag = 0;
				if (S.codes) /* byte b: values 2b (its low nibble) and 2b + 1 */
					for (int b = 0; b < S.rb; b++)
						for (int h = 0; h < 2; h++) {
							const double t = (double)cb[(row[b] >> (4 * h)) & 15] *
									 S.x[(unsigned)(2 * b + h) & m];
							sum += t, mag += fabs(t);
						}
				else
					for (int j = 0; j < S.rb / 2; j++) {
						uint16_t h;
						memcpy(&h, row + 2 * j, 2);
						const double t = (double)__uint_as_float((uint32_t)h << 16) * S.x[(unsigned)j & m];
						sum += t, mag += fabs(t);
					}
				const double ref = tanh(sum * S.scale) + (S.first ? 1e-3 * (steps - 1) : 0);
				const double d = fabs(S.y[r] - ref), tol = 2e-7 + 3e-5 * S.scale * mag;
				worst = std::max(worst, d / tol);
				if (!(d <= tol) && !bad++)
					first = s;
			}
		}
		snprintf(name, sizeof name, "%s.kernels.float64", mode);
		report(!bad, name, "%zu of %zu outputs of stages 1..%d within 3e-5 of the scaled sum of |terms| "
		       "(worst %.2g of the bound)", n - bad, n, ns - 1, worst);
		if (bad)
			printf("# %s: the first stage out of bounds: %d\n", name, first);
	}
	form K2(P, yoff);
	run_kernels(K2, steps, 3, true);
	snprintf(name, sizeof name, "%s.kernels.late", mode);
	report(!K2.err && K2.y == K.y, name, "the same bits at random with late copies");
	form K3(P, yoff);
	run_kernels(K3, steps, 5, true, 1, true);
	snprintf(name, sizeof name, "%s.kernelsv.late", mode);
	report(!K3.err && K3.y == K.y, name, "the input staged by stage_xv: the same bits at random with late copies");
	for (int G : { 1, 3, 7 }) { /* pipelined: a block's units through its ring of pages */
		form K4(P, yoff);
		run_kernels(K4, steps, G == 3 ? 0 : 11u * G, G != 3, 2, true, G);
		snprintf(name, sizeof name, "%s.kernelsp.G%d", mode, G);
		report(!K4.err && K4.y == K.y, name, "the same bits, %d blocks a stage%s", G,
		       G == 3 ? ", in order" : ", at random with late copies");
	}

	for (int k = 0; k < ncfg; k++) {
		const cfg &g = cfgs[k];
		form D(P, yoff);
		const long c0 = n_copies;
		run_dataflow(D, P, g.G, g.nw, steps, g.npage, g.sched, g.late, g.wv, g.mode);
		snprintf(name, sizeof name, "%s.dataflow%s%s.G%d.W%d.ring%d.%s.%s", mode, g.wv ? "v" : "",
			 g.mode == DF_NAP ? "n" : "", g.G, g.nw, g.npage,
			 g.sched ? "random" : "order", g.late ? "late" : "atissue");
		int bad_stage = -1;
		for (int s = 0; s < ns && bad_stage < 0; s++)
			if (memcmp(D.y.data() + yoff[s], K.y.data() + yoff[s], (size_t)P.st[s].rows * 4))
				bad_stage = s;
		int bad_count = -1;
		for (int s = 0; s < ns && bad_count < 0; s++)
			if (D.done[s] != (unsigned)(steps * P.st[s].units))
				bad_count = s;
		report(!D.err && bad_stage < 0 && bad_count < 0 && n_copies - c0 == (long)(steps * units), name,
		       "%s; counters %s; %ld copies", bad_stage < 0 ? "every stage the kernels form's bits" : "a stage differs",
		       bad_count < 0 ? "steps x units" : "short", n_copies - c0);
		if (bad_stage >= 0)
			printf("# %s: stage %d differs\n", name, bad_stage);
	}
}

int main()
{
	x4_config c;
	x4_err e = { 0 };
	if (x4_config_preset("tiny", &c, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	c.n_vocab = 4096; /* the head's 32,768 rows are most of the units: an eighth of them */
	emu_stack = 16 << 10;
	const cfg cfgs[] = { { 1, 8, 5, 0, false, false },  { 2, 8, 2, 7, true, false },
			     { 3, 8, 5, 0, true, false },   { 5, 8, 5, 11, true, false },
			     { 5, 8, 2, 13, false, false }, { 4, 8, 1, 17, true, false },
			     { 3, 16, 5, 29, true, false }, { 1, 8, 5, 0, false, true },
			     { 2, 8, 2, 31, true, true },   { 3, 8, 1, 37, true, true },
			     { 5, 8, 5, 41, true, true },   { 4, 16, 5, 43, true, true },
			     { 3, 16, 1, 59, true, true },  { 2, 16, 2, 61, true, true },
			     { 3, 16, 5, 89, true, true, DF_NAP } };
	check_plan(c, false, cfgs, 15);
	const cfg cfgs_iq4[] = { { 1, 8, 5, 0, true, false }, { 3, 8, 2, 19, true, false },
				 { 5, 16, 5, 23, false, false }, { 3, 8, 2, 47, true, true },
				 { 5, 16, 5, 53, false, true } };
	check_plan(c, true, cfgs_iq4, 5);
	/* units of two rows of 16 KB: most of a unit's warps have no row in it,
	 * and a warp may pass a page before the page's rows are done */
	const cfg cfgs_u[] = { { 2, 8, 1, 67, true, false }, { 3, 8, 1, 71, true, true },
			       { 2, 8, 2, 73, true, true },  { 3, 16, 1, 79, true, true },
			       { 1, 16, 5, 83, false, true } };
	check_plan(c, false, cfgs_u, 5, 6);
	printf("%d passed, %d failed\n", passes, fails);
	return fails ? 1 : 0;
}
