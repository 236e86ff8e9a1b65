/*
 * dataflow.cu - the kernel lab's probe of the decode step's structure, not
 * of a kernel: how fast one card runs a step of the released model's shapes
 * (every product's bytes from x4_layout, the cache's rows at a context, in
 * the step's order) when the products themselves are ideal, built two ways:
 *
 *   kernels    (old) a kernel a stage, as x4's step is built: each block one
 *              unit, its weights copied before griddepcontrol.wait (after
 *              it where they depend on the router), the steps one CUDA
 *              graph with programmatic dependent launch on;
 *   dataflow   (new) one persistent kernel for all the steps, a block an SM:
 *              a loader warp copies each unit's weights into a ring of
 *              shared-memory pages as soon as a page is free (the routed
 *              experts' only once the router's units are done), and the
 *              compute warps wait only for a count of the stage before's
 *              units (a counter a stage, to which each block adds its units
 *              after its last one) and the unit's page, 8 compute warps and
 *              a ring of 5 pages; dataflow2 the same with a ring of two
 *              pages, dataflow16 with 16 compute warps.
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
 *   build/bench/dataflow plan [context] [blocks] [bf16|iq4] [work=NS]   # no device: the stages, the lists' check
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
#include "lab.h"
#include "dataflow.cuh"

using namespace x4df;

int main(int argc, char **argv)
{
	/* the last arguments: bf16 (the default) or iq4, how the IQ4_NL stages'
	 * bytes are read; work=NS, the small stages' serial work (default 0) */
	bool iq4 = false;
	int work_ns = 0;
	for (; argc > 2; argc--) {
		const char *a = argv[argc - 1];
		if (!strcmp(a, "iq4") || !strcmp(a, "bf16"))
			iq4 = !strcmp(a, "iq4");
		else if (!strncmp(a, "work=", 5) && atoi(a + 5) >= 0 && atoi(a + 5) <= 1000000)
			work_ns = atoi(a + 5);
		else
			break;
	}
	if (argc > 1 && !strcmp(argv[1], "plan")) { /* no device */
		const int ctx = argc > 2 ? atoi(argv[2]) : 512, G = argc > 3 ? atoi(argv[3]) : 132;
		if (ctx < 1 || G < 1) {
			fprintf(stderr, "lab: context and blocks must be positive\n");
			return 2;
		}
		return show_plan(make_plan(lab_model(), ctx, iq4, work_ns), G, 3, ctx);
	}
	lab L;
	lab_init(&L, argc, argv,
		 "times a decode step of the model's shapes as kernels (old) and as one dataflow kernel (new)\n"
		 "  arguments: [old|new|all] [context 512] [steps 16] [pairs 3] [bf16|iq4] [work=NS]");
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
	plan P = make_plan(c, ctx, iq4, work_ns);
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
		int npage; /* 0: the kernels */
		int nw;    /* the dataflow block's compute warps */
		bool on;
		std::vector<stage> st;
		float *y;
		stage *dst;
		std::vector<double> us, ratio; /* ratio: the kernels runs beside it over its run, a pair each */
	};
	constexpr int NF = 4;
	form F[NF] = { { "kernels", 0, CW, L.run_old, {}, NULL, NULL, {} },
		       { "dataflow", NPAGE, 8, L.run_new, {}, NULL, NULL, {} },
		       { "dataflow2", 2, 8, L.run_new, {}, NULL, NULL, {} },
		       { "dataflow16", NPAGE, 16, L.run_new, {}, NULL, NULL, {} } };
	/* the dataflow kernel of nw compute warps */
	auto dkern = [](int nw) { return nw == 16 ? dataflow_kernel<16> : dataflow_kernel<8>; };
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

	const size_t sk = PAGE + (XMAX + UROWS) * 4 + 16;
	LAB_CK(cudaFuncSetAttribute(stage_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sk));
	auto dsmem = [](int np) { return (size_t)np * PAGE + (XMAX + UROWS) * 4 + 2 * NPAGE * 8; };
	for (const form &f : F) {
		if (!f.npage)
			continue;
		LAB_CK(cudaFuncSetAttribute(dkern(f.nw), cudaFuncAttributeMaxDynamicSharedMemorySize,
					    (int)dsmem(NPAGE)));
		int per_sm = 0;
		LAB_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dkern(f.nw), 32 * (f.nw + 1),
								     dsmem(f.npage)));
		if (per_sm < 1) {
			fprintf(stderr, "lab: the %s block (%zu bytes of shared memory, %d threads) does not fit an SM\n",
				f.name, dsmem(f.npage), 32 * (f.nw + 1));
			return 1;
		}
	}

	/* the kernels form: all the steps as one graph */
	x4k_pdl_set(1);
	cudaGraphExec_t ge = NULL;
	if (F[0].on) {
		cudaGraph_t g;
		LAB_CK(cudaStreamBeginCapture(L.s, cudaStreamCaptureModeThreadLocal));
		for (int step = 0; step < steps; step++)
			for (int s = 0; s < ns; s++)
				x4p::launch(stage_kernel, dim3(P.st[s].units), dim3(32 * CW), sk, L.s, F[0].dst + s,
					    step, err);
		LAB_CK(cudaGetLastError());
		LAB_CK(cudaStreamEndCapture(L.s, &g));
		LAB_CK(cudaGraphInstantiate(&ge, g, 0));
		LAB_CK(cudaGraphDestroy(g));
	}
	auto run = [&](form &f) -> double {
		LAB_CK(cudaMemsetAsync(f.y, 0, ylen * 4, L.s));
		LAB_CK(cudaMemsetAsync(done, 0, (size_t)ns * 4, L.s));
		LAB_CK(cudaMemsetAsync(err, 0, 4, L.s));
		LAB_CK(cudaEventRecord(L.a, L.s));
		if (!f.npage) {
			LAB_CK(cudaGraphLaunch(ge, L.s));
		} else {
			int steps_ = steps, np = f.npage;
			void *args[] = { &f.dst, &dlist, &doff, &done, &steps_, &np, &err };
			LAB_CK(cudaLaunchCooperativeKernel((void *)dkern(f.nw), dim3(G), dim3(32 * (f.nw + 1)), args,
							   dsmem(np), L.s));
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
		for (int s = 0; s < ns; s++)
			if (memcmp(h.data() + yoff[s], ref.data() + yoff[s], (size_t)P.st[s].rows * 4)) {
				fprintf(stderr, "lab: %s: stage %d's outputs differ from %s's\n", f.name, s,
					F[0].on ? F[0].name : F[1].name);
				rc = 1;
				break;
			}
	}
	if (!ref.empty())
		fprintf(stderr, "# outputs after %d steps: %s\n", steps, rc ? "DIFFER" : "the same bits in every form run");

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
		std::vector<double> &r = f.npage ? f.ratio : control;
		if (!r.empty()) {
			std::sort(r.begin(), r.end());
			const size_t k = r.size();
			fprintf(stderr, "; %s %.3fx (pairs %.3f-%.3f)", f.npage ? "against kernels" : "control",
				k % 2 ? r[k / 2] : 0.5 * (r[k / 2 - 1] + r[k / 2]), r.front(), r.back());
		}
		fprintf(stderr, "\n");
	}
	return rc;
}
