/* emu_step.cc - runs the persistent decode step (kernels/step_kernel.cuh,
 * x4k_step) on the CPU with emu_rt.h's runtime, every block of the grid on
 * fibers at once (run_grid: the grid barrier needs them all live), on a
 * checkpoint's own bytes, step after step from position 0, and checks each
 * step's logits against the CPU trunk's (x4_trunk_forward, F32 with the fp16
 * cache, the GPU's widths) at docs/numerics.md 4's rule for two fp32 paths
 * over the same cache (1e-3 relative L2 a row) with the same argmax; then
 * the same bits on a second run under a random schedule with the copies
 * landing late.  Run by tests/tool_emu_step.sh in make test.
 *
 *   emu_step MODEL_DIR NW NSLOT G STEPS   (NW 16 or 8, NSLOT 3 or 2)
 */
#include "cuda_runtime.h" /* emu_cuda.h */
#include "x4_kern.h"
#include "step_kernel.cuh"

#include "emu_rt.h"

extern "C" {
#include "trunk_cuda.h"
}

#include <string>
#include <vector>

template <int NW, int NSLOT> static void launch(const x4k_step_params &p, int G, unsigned sched)
{
	const size_t smem = x4s::blk_smem(NW, NSLOT, p.n_hc, x4s::blk_colmax(p.D, G));
	late_copies = sched != 0;
	body = [&] { x4s::step_kernel<NW, NSLOT>(p); };
	run_grid(dim3(G), dim3(32 * NW), smem, sched);
}

static void run(const x4k_step_params &p, int nw, int nslot, int G, unsigned sched)
{
	if (nw == 16 && nslot == 3)
		launch<16, 3>(p, G, sched);
	else if (nw == 16 && nslot == 2)
		launch<16, 2>(p, G, sched);
	else if (nw == 8 && nslot == 3)
		launch<8, 3>(p, G, sched);
	else
		launch<8, 2>(p, G, sched);
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: emu_step MODEL_DIR NW NSLOT G STEPS\n");
		return 2;
	}
	const int nw = atoi(argv[2]), nslot = atoi(argv[3]), G = atoi(argv[4]), steps = atoi(argv[5]);
	x4_err e = {};
	x4_paths paths;
	x4_model *m = NULL;
	if (x4_paths_resolve(argv[1], NULL, &paths, &e) || x4_model_open(&m, &paths, &e)) {
		fprintf(stderr, "emu_step: %s\n", e.msg);
		return 1;
	}
	const x4_config *c = &m->c;
	const int max_ctx = steps + 1, cw = c->kv_lora + c->d_rope;

	/* the CPU trunk's logits, every position */
	std::vector<int32_t> ids(steps);
	for (int i = 0; i < steps; i++)
		ids[i] = (int32_t)((7919u * (unsigned)i + 17u) % (unsigned)c->n_vocab);
	x4_trunk_opts o;
	x4_trunk_opts_default(&o);
	o.device = -1;
	o.max_ctx = max_ctx;
	o.threads = 2;
	x4_trunk *t = NULL;
	std::vector<float> ref((size_t)steps * c->n_vocab);
	if (x4_trunk_create(&t, m, &o, &e) || x4_trunk_forward(t, ids.data(), steps, ref.data(), true, &e)) {
		fprintf(stderr, "emu_step: %s\n", e.msg);
		return 1;
	}
	x4_trunk_free(t);

	/* the step's buffers, on the host */
	std::vector<x4_block_dev> d(c->n_block);
	for (int b = 0; b < c->n_block; b++) {
#define X4_ADDR_(f, ...) d[b].f = m->blk[b].f ? m->blk[b].f->data : NULL;
		X4_BLOCK_TENSORS(X4_ADDR_)
#undef X4_ADDR_
	}
	std::vector<uint16_t> cache((size_t)c->n_block * max_ctx * cw, 0x7e00); /* NaN: unwritten rows show */
	std::vector<x4k_step_layer> layers(c->n_block);
	x4_step_layers(c, m->blk, d.data(), cache.data(), max_ctx, layers.data());
	const size_t wsb = x4_cuda_ws_layout(c, max_ctx, 1, NULL, NULL);
	std::vector<uint8_t> wsv(wsb + 256);
	x4_cuda_ws w;
	x4_cuda_ws_layout(c, max_ctx, 1, (char *)(((uintptr_t)wsv.data() + 255) & ~(uintptr_t)255), &w);
	x4_yarn_freqs(c, w.omega);
	x4k_step_params p;
	x4_step_params(c, m->blk, layers.data(), m->token_embd->data, m->output_norm->data, m->output->data,
		       max_ctx, &w, &p);

	if (getenv("EMU_STEP_STOP")) { /* debugging: the activations after phase N of step 0 */
		emu_stop_phase = atoi(getenv("EMU_STEP_STOP"));
		w.ids[0] = ids[0];
		w.pos[0] = 0;
		run(p, nw, nslot, G, 0);
		const size_t n = (size_t)((char *)w.logits - (char *)w.H) / 4;
		FILE *f = fopen(getenv("EMU_STEP_DUMP"), "wb");
		fwrite(w.H, 4, n, f);
		fwrite(p.ws, 1, w.step_ws_bytes, f);
		fclose(f);
		return 0;
	}
	std::vector<float> first((size_t)steps * c->n_vocab);
	for (int pass = 0; pass < 2; pass++) {
		std::fill(cache.begin(), cache.end(), (uint16_t)0x7e00);
		const unsigned sched = pass ? 7 : 0;
		double worst = 0;
		int agree = 0;
		bool same = true;
		for (int i = 0; i < steps; i++) {
			w.ids[0] = ids[i];
			w.pos[0] = i;
			std::fill(w.logits, w.logits + c->n_vocab, NAN);
			const x4k_step_ws sw = x4k_step_ws_of(p.n_head, p.kv_lora, p.n_expert, p.k, p.F_e, p.D);
			*(unsigned *)((char *)p.ws + sw.bar) = 0; /* x4k_step's memset */
			run(p, nw, nslot, G, sched);
			const float *r = &ref[(size_t)i * c->n_vocab];
			double num = 0, den = 0;
			int am = 0, ar = 0;
			for (int v = 0; v < c->n_vocab; v++) {
				const double dv = (double)w.logits[v] - r[v];
				num += dv * dv;
				den += (double)r[v] * r[v];
				if (w.logits[v] > w.logits[am] || isnan(w.logits[am]))
					am = v;
				if (r[v] > r[ar])
					ar = v;
			}
			const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
			if (getenv("EMU_STEP_VERBOSE"))
				fprintf(stderr, "pass %d step %d rel %.3g argmax %d/%d\n", pass, i, rel, am, ar);
			if (!(rel <= worst))
				worst = isnan(rel) ? INFINITY : fmax(worst, rel);
			agree += am == ar;
			if (pass == 0)
				memcpy(&first[(size_t)i * c->n_vocab], w.logits, sizeof(float) * c->n_vocab);
			else
				same = same && !memcmp(&first[(size_t)i * c->n_vocab], w.logits, sizeof(float) * c->n_vocab);
		}
		char name[96];
		snprintf(name, sizeof name, "step.nw%d.nslot%d.g%d.%s", nw, nslot, G, pass ? "random" : "ordered");
		report(worst <= 1e-3 && agree == steps, name,
		       "%d steps: worst relative L2 error %.3g of the CPU trunk's logits (bound 1e-3), "
		       "argmax %d/%d", steps, worst, agree, steps);
		if (pass)
			report(same, (std::string(name) + ".same_bits").c_str(),
			       "the random schedule with late copies gives the ordered run's bits");
	}
	x4_model_close(m);
	printf("# emu_step: %d passed, %d failed\n", passes, fails);
	return fails ? 1 : 0;
}
