/*
 * dataflow.cu - the kernel lab's probe of the decode step's structure, not
 * of a kernel: how fast one card runs a step of the released model's shapes
 * (every product's bytes from x4_layout, the cache's rows at a context, in
 * the step's order) when the products themselves are ideal, built two ways:
 *
 *   kernels    (old) a kernel a stage, as x4's step is built: each block one
 *              unit, its weights copied before griddepcontrol.wait (after
 *              it where they depend on the router), the steps one CUDA
 *              graph with programmatic dependent launch on; kernelsv the
 *              same with the input staged by a thread's loads all at once;
 *              kernelsp (old too) with as many blocks as the card holds,
 *              each taking its units in turn through a ring of two pages
 *              (the next unit's weights in flight while one is worked),
 *              the input staged once a block;
 *   dataflow   (new) one persistent kernel for all the steps, a block an SM:
 *              a loader warp copies each unit's weights into a ring of
 *              shared-memory pages as soon as a page is free (the routed
 *              experts' only once the router's units are done), and the
 *              compute warps wait only for a count of the stage before's
 *              units (a counter a stage, to which each block adds its units
 *              after its last one) and the unit's page, 8 compute warps and
 *              a ring of 5 pages; dataflow2 the same with a ring of two
 *              pages, dataflow16 with 16 compute warps;
 *   dataflowv  (new) the same lists, loader and counters by warps: no block
 *              barrier a unit, each warp taking rows of the block's units of
 *              a stage in turn and summing a row's parts itself, the input
 *              staged by stage_xv once a run of a stage's units; the last
 *              warp of a run counts it; dataflowv16 with 16 compute warps,
 *              dataflowv16n with a pause between a count's polls, and
 *              dataflowv16x (timing only, its outputs wrong and not checked)
 *              with no wait for other blocks' counts at all: the form's
 *              cost without its cross-block waits.
 *
 * A stage is one product of its rows (rb bytes a row, read as BF16 pairs)
 * with the stage before's output: y = tanh(scale * sum w x); the step's
 * first stage adds the step's number, so that a read of the previous
 * step's value changes the bits.  A unit is up to 64 rows of at most one
 * page (32 KB).  Both forms compute a unit with the same code in the same
 * order, so every stage's output after the last step must be the same bits
 * in each form: the program checks it and exits 1 if not.  The figures are
 * a probe's, not x4's: the products are plain dot products (the IQ4_NL and
 * Q6_K bytes read as BF16 words), the step is one chain (each stage waits
 * for the one before; the streams' second inputs are left out), and the
 * gate, the top k and the attention's softmax have no cost of their own.
 * Bytes: every stage's weights (and the cache rows) once a step; the Q6_K
 * head's rows are rounded up to 16 bytes (+0.14%).
 *
 * Rows (lab.h's columns): one a form, its median step over the pairs (a pair:
 * kernels, then each dataflow form, then kernels); on stderr its steps a
 * second and its median ratio against the kernels runs beside it (their
 * mean over its step; the range over the pairs), and the kernels form's
 * control (its first run of a pair over its second).
 *
 * The kernels and the plan are bench/kernels/dataflow.cuh's, which the CPU
 * emulator also runs (tests/tool_emu_dataflow.sh: the kernels form against
 * float64, the dataflow form's bits against it with several blocks at once);
 * tests/tool_dataflow.sh checks the full preset's plan on the host.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/dataflow [old|new|all] [context] [steps] [pairs] [bf16|iq4] [work=NS]
 *        [fold|uniform=K] [trace=PATH]
 *   build/bench/dataflow plan [context] [blocks] [bf16|iq4] [work=NS] [fold|uniform=K]   # no device
 *
 * fold: the step's one-unit stages left out (the most that folding them
 * into their consumers can give); uniform=K: the step's bytes as K equal
 * stages (the ceilings' synthetic step on this probe's kernels).  trace=PATH:
 * after the pairs, one traced run of each kernels form (%globaltimer stamps
 * of every stage: a profiled run, not a speed), PATH-FORM.tsv and on stderr
 * what each kind of stage adds to the step.
 *
 * iq4: the IQ4_NL stages' bytes read as 4-bit codes through the codebook on
 * the CUDA cores (two values a byte, dataflow.cuh), so that the products
 * cost what decoding them costs; bf16 (the default): every stage's bytes as
 * BF16 pairs, the structure's own cost.  work=NS: each unit of the step's
 * small stages (the two gates, the norms and cache row, the combine, the
 * router's top k, the head's gate, the argmax) spins NS ns past its product,
 * the serial work those stages have in x4 (bench/RESULTS.md 44 took the gate
 * apart: 1.4 us of its blocks' work, 2.0 of the cross-block sum, 1.5 of the
 * collapse and norm), to see which form hides it behind the weights' stream.
 */
#include <errno.h>
#include <array>
#include "lab.h"
#include "dataflow.cuh"

using namespace x4df;

/* one traced run of a kernels form's graph ge (its stamps in dtr): each
 * stage's stamps at each step into PATH-NAME.tsv (ns from the step's start,
 * the previous step's last end), and on stderr the mean over the steps past
 * the first of what each kind of stage adds to the step (its span: its last
 * block's end less the stage before's) and of its parts: release (the
 * first block's release from the wait after the stage before's end), spread
 * (the last block's release after the first's), input (the last input
 * staged after the last release), weights (the last weights landed after
 * that), compute (the end after both); early: how long before the stage
 * before's end its first block was resident.  A profiled run: not a speed. */
static int traced(const char *name, cudaGraphExec_t ge, unsigned long long *dtr, lab &L, const plan &P, int steps,
		  const char *path)
{
	const int ns = (int)P.st.size();
	const size_t n = (size_t)steps * ns;
	std::vector<unsigned long long> h(n * TR_N, 0);
	for (size_t i = 0; i < n; i++)
		h[i * TR_N + TR_ENTRY] = h[i * TR_N + TR_WAIT0] = ~0ull;
	LAB_CK(cudaMemcpy(dtr, h.data(), h.size() * 8, cudaMemcpyHostToDevice));
	LAB_CK(cudaGraphLaunch(ge, L.s));
	LAB_CK(cudaStreamSynchronize(L.s));
	LAB_CK(cudaGetLastError());
	LAB_CK(cudaMemcpy(h.data(), dtr, h.size() * 8, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < n * TR_N; i++)
		if (h[i] == 0 || h[i] == ~0ull) {
			fprintf(stderr, "lab: trace %s: stage %zu of step %zu has no stamp %zu\n", name, i / TR_N % ns,
				i / TR_N / ns, i % TR_N);
			return 1;
		}
	char fn[512], tmp[520]; /* written to tmp, renamed once whole */
	snprintf(fn, sizeof fn, "%s-%s.tsv", path, name);
	snprintf(tmp, sizeof tmp, "%s.tmp", fn);
	FILE *f = fopen(tmp, "w");
	if (!f) {
		fprintf(stderr, "lab: cannot write %s: %s\n", tmp, strerror(errno));
		return 1;
	}
	fprintf(f, "step\tstage\tkind\tunits\tbytes\tentry\twait0\twait1\tinput\tweights\tend\n");
	std::vector<const char *> kinds;
	std::vector<std::array<double, 8>> sum; /* stages, span, release, spread, input, weights, compute, early */
	double total = 0;
	for (int step = 0; step < steps; step++)
		for (int s = 0; s < ns; s++) {
			const unsigned long long *t = &h[((size_t)step * ns + s) * TR_N];
			const size_t prev_i = (size_t)step * ns + s;
			const unsigned long long prev = prev_i ? h[(prev_i - 1) * TR_N + TR_END] : t[TR_ENTRY];
			const unsigned long long base = step ? h[((size_t)step * ns - 1) * TR_N + TR_END] : h[TR_ENTRY];
			fprintf(f, "%d\t%d\t%s\t%d\t%zu", step, s, P.kind[s], P.st[s].units,
				(size_t)P.st[s].rows * P.st[s].rb);
			for (int k = 0; k < TR_N; k++)
				fprintf(f, "\t%lld", (long long)(t[k] - base));
			fprintf(f, "\n");
			if (!step)
				continue;
			auto d = [](unsigned long long a, unsigned long long b) { return ((double)a - (double)b) * 1e-3; };
			const unsigned long long ready = std::max(t[TR_X], t[TR_W]);
			const std::array<double, 8> a = { 1,
							  d(t[TR_END], prev),
							  d(t[TR_WAIT0], prev),
							  d(t[TR_WAIT1], t[TR_WAIT0]),
							  d(t[TR_X], t[TR_WAIT1]),
							  std::max(0.0, d(t[TR_W], t[TR_X])),
							  d(t[TR_END], ready),
							  d(prev, t[TR_ENTRY]) };
			size_t k = 0;
			while (k < kinds.size() && strcmp(kinds[k], P.kind[s]))
				k++;
			if (k == kinds.size()) {
				kinds.push_back(P.kind[s]);
				sum.push_back({});
			}
			for (int j = 0; j < 8; j++)
				sum[k][j] += a[j];
			total += a[1];
		}
	if (ferror(f) | fclose(f) || rename(tmp, fn)) {
		fprintf(stderr, "lab: cannot write %s: %s\n", fn, strerror(errno));
		remove(tmp);
		return 1;
	}
	const int m = steps - 1;
	if (m < 1)
		return 0;
	fprintf(stderr, "# trace %s (%s; a profiled run, not a speed): %.1f us a step over steps 1-%d\n", name, fn,
		total / m, m);
	fprintf(stderr, "# kind\tstages\tspan_us\tus_a_stage\trelease\tspread\tinput\tweights\tcompute\tearly\n");
	for (size_t k = 0; k < kinds.size(); k++) {
		const double c = sum[k][0];
		fprintf(stderr, "# %s\t%.0f\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", kinds[k], c / m,
			sum[k][1] / m, sum[k][1] / c, sum[k][2] / c, sum[k][3] / c, sum[k][4] / c, sum[k][5] / c,
			sum[k][6] / c, sum[k][7] / c);
	}
	return 0;
}

int main(int argc, char **argv)
{
	/* the last arguments: bf16 (the default) or iq4, how the IQ4_NL stages'
	 * bytes are read; work=NS, the small stages' serial work (default 0) */
	bool iq4 = false;
	int work_ns = 0;
	variant v;
	const char *trace = NULL; /* trace=PATH: a traced run of each kernels form, PATH-FORM.tsv */
	for (; argc > 2; argc--) {
		const char *a = argv[argc - 1];
		if (!strcmp(a, "iq4") || !strcmp(a, "bf16"))
			iq4 = !strcmp(a, "iq4");
		else if (!strncmp(a, "work=", 5) && atoi(a + 5) >= 0 && atoi(a + 5) <= 1000000)
			work_ns = atoi(a + 5);
		else if (!strcmp(a, "fold"))
			v.fold = true;
		else if (!strncmp(a, "uniform=", 8) && atoi(a + 8) >= 1 && atoi(a + 8) <= 4096)
			v.uniform = atoi(a + 8);
		else if (!strncmp(a, "trace=", 6) && a[6])
			trace = a + 6;
		else
			break;
	}
	if (argc > 1 && !strcmp(argv[1], "plan")) { /* no device */
		const int ctx = argc > 2 ? atoi(argv[2]) : 512, G = argc > 3 ? atoi(argv[3]) : 132;
		if (ctx < 1 || G < 1) {
			fprintf(stderr, "lab: context and blocks must be positive\n");
			return 2;
		}
		return show_plan(make_plan(lab_model(), ctx, iq4, work_ns, v), G, 3, ctx);
	}
	lab L;
	lab_init(&L, argc, argv,
		 "times a decode step of the model's shapes as kernels (old) and as one dataflow kernel (new)\n"
		 "  arguments: [old|new|all] [context 512] [steps 16] [pairs 3] [bf16|iq4] [work=NS] [fold|uniform=K]\n"
		 "             [trace=PATH]");
	const int ctx = argc > 2 ? atoi(argv[2]) : 512, steps = argc > 3 ? atoi(argv[3]) : 16;
	const int pairs = argc > 4 ? atoi(argv[4]) : 3;
	if (ctx < 1 || steps < 1 || pairs < 1) {
		fprintf(stderr, "lab: context, steps and pairs must be positive\n");
		return 2;
	}
	cudaDeviceProp prop;
	LAB_CK(cudaGetDeviceProperties(&prop, 0));
	if (prop.major < 9) {
		fprintf(stderr, "lab: dataflow needs sm_90 (bulk copies and dependent launch); this card is %d.%d\n",
			prop.major, prop.minor);
		return 1;
	}
	const x4_config c = lab_model();
	plan P = make_plan(c, ctx, iq4, work_ns, v);
	const int ns = (int)P.st.size();
	uint8_t *w = (uint8_t *)lab_alloc(P.wbytes);
	lab_fill_half<<<1024, 256>>>((uint16_t *)w, P.wbytes / 2, 7, false);
	LAB_CK(cudaGetLastError());
	for (stage &s : P.st)
		s.w = w + reinterpret_cast<size_t>(s.w);

	/* one set of outputs a form (max(rows, XMAX) values a stage); the inputs
	 * follow the outputs */
	const std::vector<size_t> yoff = out_offsets(P);
	const size_t ylen = yoff.back();
	struct form {
		const char *name;
		int npage; /* 0: a kernels form */
		int nw;    /* the dataflow block's compute warps; a kernels form's: 1, its input by
			    * stage_xv; 2, the pipelined blocks (stage_kernel's ring of 2 pages) */
		bool wv;   /* the dataflow form by warps (dataflow_warp_kernel) */
		int mode;  /* its waits: DF_POLL, DF_NAP, DF_NODEP (timing only: its outputs not checked) */
		bool on;
		std::vector<stage> st;
		float *y;
		stage *dst;
		std::vector<double> us, ratio; /* ratio: the kernels runs beside it over its run, a pair each */
	};
	constexpr int NF = 10;
	form F[NF] = { { "kernels", 0, 0, false, 0, L.run_old, {}, NULL, NULL, {} },
		       { "kernelsv", 0, 1, false, 0, L.run_old, {}, NULL, NULL, {} },
		       { "kernelsp", 0, 2, false, 0, L.run_old, {}, NULL, NULL, {} },
		       { "dataflow", NPAGE, 8, false, 0, L.run_new, {}, NULL, NULL, {} },
		       { "dataflow2", 2, 8, false, 0, L.run_new, {}, NULL, NULL, {} },
		       { "dataflow16", NPAGE, 16, false, 0, L.run_new, {}, NULL, NULL, {} },
		       { "dataflowv", NPAGE, 8, true, DF_POLL, L.run_new, {}, NULL, NULL, {} },
		       { "dataflowv16", NPAGE, 16, true, DF_POLL, L.run_new, {}, NULL, NULL, {} },
		       { "dataflowv16n", NPAGE, 16, true, DF_NAP, L.run_new, {}, NULL, NULL, {} },
		       { "dataflowv16x", NPAGE, 16, true, DF_NODEP, L.run_new, {}, NULL, NULL, {} } };
	/* a dataflow form's kernel */
	auto dkern = [](const form &f) -> const void * {
		if (f.wv)
			return (const void *)(f.nw == 16 ? dataflow_warp_kernel<16> : dataflow_warp_kernel<8>);
		return (const void *)(f.nw == 16 ? dataflow_kernel<16> : dataflow_kernel<8>);
	};
	for (form &f : F) {
		if (!f.on)
			continue;
		f.y = (float *)lab_alloc(ylen * 4);
		f.st = P.st;
		wire(f.st, f.y, yoff);
		f.dst = (stage *)lab_alloc((size_t)ns * sizeof(stage));
		LAB_CK(cudaMemcpy(f.dst, f.st.data(), (size_t)ns * sizeof(stage), cudaMemcpyHostToDevice));
	}

	const int G = L.sms;
	const dealt D = flatten(deal(P, G));
	const std::vector<int2> &flat = D.flat;
	const std::vector<int> &off = D.off;
	size_t n_units = 0;
	for (const stage &s : P.st)
		n_units += s.units;
	int2 *dlist = (int2 *)lab_alloc(flat.size() * sizeof(int2));
	int *doff = (int *)lab_alloc(off.size() * sizeof(int));
	unsigned *done = (unsigned *)lab_alloc((size_t)ns * 4);
	int *err = (int *)lab_alloc(4);
	LAB_CK(cudaMemcpy(dlist, flat.data(), flat.size() * sizeof(int2), cudaMemcpyHostToDevice));
	LAB_CK(cudaMemcpy(doff, off.data(), off.size() * sizeof(int), cudaMemcpyHostToDevice));

	/* a kernels form's kernel, shared memory and blocks a stage */
	auto skern = [](int nw) {
		return nw == 2 ? stage_kernel<2, true> : nw ? stage_kernel<1, true> : stage_kernel<1, false>;
	};
	auto ssmem = [](int nw) { return stage_smem(nw == 2 ? 2 : 1); };
	int p_per_sm = 0; /* the pipelined form's blocks an SM */
	for (int nw = 0; nw < 3; nw++)
		LAB_CK(cudaFuncSetAttribute(skern(nw), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ssmem(nw)));
	LAB_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&p_per_sm, skern(2), 32 * CW, ssmem(2)));
	if (p_per_sm < 1) {
		fprintf(stderr, "lab: the kernelsp block (%zu bytes of shared memory) does not fit an SM\n", ssmem(2));
		return 1;
	}
	auto sgrid = [&](int nw, int units) { return nw == 2 ? std::min(units, L.sms * p_per_sm) : units; };
	for (const form &f : F) {
		if (!f.npage)
			continue;
		LAB_CK(cudaFuncSetAttribute(dkern(f), cudaFuncAttributeMaxDynamicSharedMemorySize,
					    (int)dataflow_smem(NPAGE)));
		int per_sm = 0;
		LAB_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dkern(f), 32 * (f.nw + 1),
								     dataflow_smem(f.npage)));
		if (per_sm < 1) {
			fprintf(stderr, "lab: the %s block (%zu bytes of shared memory, %d threads) does not fit an SM\n",
				f.name, dataflow_smem(f.npage), 32 * (f.nw + 1));
			return 1;
		}
	}

	/* a kernels form: all the steps as one graph; tr (a traced run's): TR_N
	 * stamps a stage and step */
	x4k_pdl_set(1);
	auto capture = [&](const form &f, unsigned long long *tr) {
		cudaGraph_t g;
		cudaGraphExec_t ge;
		LAB_CK(cudaStreamBeginCapture(L.s, cudaStreamCaptureModeThreadLocal));
		for (int step = 0; step < steps; step++)
			for (int s = 0; s < ns; s++) {
				unsigned long long *ts = tr ? tr + (size_t)TR_N * (step * ns + s) : tr;
				x4p::launch(skern(f.nw), dim3(sgrid(f.nw, P.st[s].units)), dim3(32 * CW), ssmem(f.nw), L.s,
					    f.dst + s, step, err, ts);
			}
		LAB_CK(cudaGetLastError());
		LAB_CK(cudaStreamEndCapture(L.s, &g));
		LAB_CK(cudaGraphInstantiate(&ge, g, 0));
		LAB_CK(cudaGraphDestroy(g));
		return ge;
	};
	cudaGraphExec_t gexec[NF] = {};
	unsigned long long *tr = trace ? (unsigned long long *)lab_alloc((size_t)steps * ns * TR_N * 8) : NULL;
	for (int i = 0; i < NF; i++)
		if (F[i].on && !F[i].npage)
			gexec[i] = capture(F[i], NULL);
	auto run = [&](form &f) -> double {
		LAB_CK(cudaMemsetAsync(f.y, 0, ylen * 4, L.s));
		LAB_CK(cudaMemsetAsync(done, 0, (size_t)ns * 4, L.s));
		LAB_CK(cudaMemsetAsync(err, 0, 4, L.s));
		LAB_CK(cudaEventRecord(L.a, L.s));
		if (!f.npage) {
			LAB_CK(cudaGraphLaunch(gexec[&f - F], L.s));
		} else {
			int steps_ = steps, np = f.npage, mode = f.mode;
			void *args[] = { &f.dst, &dlist, &doff, &done, &steps_, &np, &err, &mode };
			LAB_CK(cudaLaunchCooperativeKernel(dkern(f), dim3(G), dim3(32 * (f.nw + 1)), args,
							   dataflow_smem(np), L.s));
		}
		LAB_CK(cudaEventRecord(L.b, L.s));
		LAB_CK(cudaEventSynchronize(L.b));
		LAB_CK(cudaGetLastError());
		int bad = 0;
		LAB_CK(cudaMemcpy(&bad, err, 4, cudaMemcpyDeviceToHost));
		if (bad) {
			fprintf(stderr, "lab: %s: a wait gave up after %.1f s (a unit or a page never came)\n",
				f.name, SPIN_NS * 1e-9);
			exit(1);
		}
		float ms;
		LAB_CK(cudaEventElapsedTime(&ms, L.a, L.b));
		return 1e3 * ms / steps;
	};

	fprintf(stderr,
		"# dataflow: %d stages, %zu units a step, %.3f GB a step, context %d, %d steps a run, %d blocks, %s, "
		"work %d ns\n",
		ns, n_units, P.bytes * 1e-9, ctx, steps, G, iq4 ? "iq4" : "bf16", work_ns);
	/* a warm-up run of each, then the outputs compared */
	for (form &f : F)
		if (f.on)
			run(f);
	std::vector<float> ref;
	int rc = 0;
	for (form &f : F) {
		if (!f.on)
			continue;
		std::vector<float> h(ylen);
		LAB_CK(cudaMemcpy(h.data(), f.y, h.size() * 4, cudaMemcpyDeviceToHost));
		if (ref.empty()) {
			ref = h;
			continue;
		}
		if (f.mode == DF_NODEP) /* timing only: it does not wait for its inputs */
			continue;
		for (int s = 0; s < ns; s++)
			if (memcmp(h.data() + yoff[s], ref.data() + yoff[s], (size_t)P.st[s].rows * 4)) {
				fprintf(stderr, "lab: %s: stage %d's outputs differ from %s's\n", f.name, s,
					F[0].on ? F[0].name : F[1].name);
				rc = 1;
				break;
			}
	}
	if (!ref.empty())
		fprintf(stderr, "# outputs after %d steps: %s%s\n", steps, rc ? "DIFFER" : "the same bits in every form run",
			std::any_of(F, F + NF, [](const form &f) { return f.on && f.mode == DF_NODEP; })
				? " (but the timing-only forms, not compared)"
				: "");

	std::vector<double> control; /* the kernels form's first run of a pair over its second */
	for (int p = 0; p < pairs; p++) {
		double a0 = F[0].on ? run(F[0]) : 0;
		for (int i = 1; i < NF; i++)
			if (F[i].on)
				F[i].us.push_back(run(F[i]));
		double a1 = F[0].on ? run(F[0]) : 0;
		if (F[0].on) {
			F[0].us.push_back(a0);
			F[0].us.push_back(a1);
			control.push_back(a0 / a1);
			fprintf(stderr, "# pair %d: kernels %.1f, %.1f us a step (control %.3fx)", p, a0, a1, a0 / a1);
			for (int i = 1; i < NF; i++)
				if (F[i].on) {
					F[i].ratio.push_back(0.5 * (a0 + a1) / F[i].us.back());
					fprintf(stderr, "; %s %.1f (%.3fx)", F[i].name, F[i].us.back(), F[i].ratio.back());
				}
			fprintf(stderr, "\n");
		}
	}
	char shape[96];
	snprintf(shape, sizeof shape, "ctx %d, %d steps, %s, work %d ns", ctx, steps, iq4 ? "iq4" : "bf16", work_ns);
	for (form &f : F) {
		if (!f.on)
			continue;
		std::sort(f.us.begin(), f.us.end());
		const size_t n = f.us.size();
		const double us = n % 2 ? f.us[n / 2] : 0.5 * (f.us[n / 2 - 1] + f.us[n / 2]);
		lab_row(&L, "dataflow", f.name, shape, P.bytes, us);
		fprintf(stderr, "# %s: %.1f us a step, %.1f steps/s", f.name, us, 1e6 / us);
		const bool first = &f == F;
		std::vector<double> &r = first ? control : f.ratio;
		if (!r.empty()) {
			std::sort(r.begin(), r.end());
			const size_t k = r.size();
			fprintf(stderr, "; %s %.3fx (pairs %.3f-%.3f)", first ? "control" : "against kernels",
				k % 2 ? r[k / 2] : 0.5 * (r[k / 2 - 1] + r[k / 2]), r.front(), r.back());
		}
		fprintf(stderr, "\n");
	}
	if (trace)
		for (int i = 0; i < NF; i++)
			if (F[i].on && !F[i].npage)
				rc |= traced(F[i].name, capture(F[i], tr), tr, L, P, steps, trace);
	return rc;
}
