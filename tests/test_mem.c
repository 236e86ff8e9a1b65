/*
 * test_mem.c - the memory plan (x4.h section 6b, lib/cuda/mem_plan.c) without a
 * device: the cache and a chunk token's workspace of the released shape
 * against figures counted by hand from docs/forward.md's widths, the
 * weights of the tiny checkpoint counted from its file, its bound model and
 * its preset's layout alike, and the solve's own promises (the promise
 * loads and one more position does not, more memory never a shorter
 * context, the chunk a power of two up to X4_MEM_MAX_CHUNK, the reserve the whole gap
 * between the promise and the edge).
 */
#include "t.h"
#include "x4.h"

#include <inttypes.h>

#define MIB ((uint64_t)1 << 20)

static void hand_counts(const x4_config *full)
{
	/* 40 blocks x (kv_lora 512 + rope 64) x 2 bytes (fp16) */
	T_OK(x4_mem_cache_bytes(full, 1) == 46080 && x4_mem_cache_bytes(full, 8192) == 8192ull * 46080,
	     "mem.cache_full", "%" PRIu64 " bytes a position", x4_mem_cache_bytes(full, 1));
	/* A prefill token's workspace, counted by hand for the released shape
	 * (D 3584, 4 streams, 32 heads, q_lora 768, d_qk 192, d_v 128, F 9216,
	 * vocabulary 131072, top-4 of 64 experts of 1024): fp32 activations
	 * 2*4*3584 + 5*3584 + 2*24 + 768 + 32*192 + 576 + 32*576 + 32*512 +
	 * 32*128 + 3*9216 + 131072 = 251,760 floats (1,007,040 B); the ids 4;
	 * the gate's workspace 4 + 25*4 = 104 (unsplit past 8 tokens); the
	 * route table 3*16 + 2*4/16 + 64*4 = 304.5 (64-route tiles); the
	 * experts' h and out 4*(1024 + 3584)*4 = 73,728: 1,081,180.5 bytes. */
	double per = (double)(x4_mem_ws_bytes(full, 8192, 1024) - x4_mem_ws_bytes(full, 8192, 512)) / 512;
	T_OK(per > 1081180.5 * 0.999 && per < 1081180.5 * 1.001, "mem.ws_token_full",
	     "%.1f bytes a chunk token, by hand 1081180.5", per);
	/* The decode attention's partials stop growing at 64 splits (2048 positions). */
	T_OK(x4_mem_ws_bytes(full, 2048, 128) == x4_mem_ws_bytes(full, 262144, 128) &&
	     x4_mem_ws_bytes(full, 1024, 128) < x4_mem_ws_bytes(full, 2048, 128),
	     "mem.ws_context_term", "the attention's splits");
}

static void weights(void)
{
	x4_err e = {0};
	x4_paths p;
	x4_model *m = NULL;
	x4_tensor_spec *fs = NULL, *ls = NULL;
	int nf = 0, nl = 0;
	x4_config pc;
	if (x4_paths_resolve("build/models/tiny", NULL, &p, &e) || x4_model_open(&m, &p, &e) ||
	    x4_tensor_specs_from_gguf(x4_model_gguf(m), &fs, &nf, &e) ||
	    x4_config_preset("tiny", &pc, &e) || x4_layout(&pc, &ls, &nl, &e)) {
		T_OK(0, "mem.weights_tiny", "%s", e.msg);
		x4_model_close(m);
		return;
	}
	const x4_config *c = x4_model_config(m);
	uint64_t wm = x4_mem_weight_bytes(m), wf = x4_mem_weight_bytes_specs(c, fs, nf),
		 wl = x4_mem_weight_bytes_specs(&pc, ls, nl), all = 0;
	for (int i = 0; i < nf; i++)
		all += x4_type_bytes(fs[i].type, fs[i].ne[0] * fs[i].ne[1] * fs[i].ne[2] * fs[i].ne[3]);
	T_OK(wm == wf && wf == wl && wm % 256 == 0 && wm < all + 256ull * (uint64_t)nf && wm > all / 2,
	     "mem.weights_tiny", "bound %" PRIu64 ", directory %" PRIu64 ", layout %" PRIu64
	     ", every tensor %" PRIu64, wm, wf, wl, all);
	free(fs);
	free(ls);
	x4_model_close(m);
}

static void solve(const char *name, const x4_config *c, uint64_t w, uint64_t lo, uint64_t hi,
		  uint64_t step)
{
	char what[64];
	int last = 0, bad = 0, checked = 0;
	for (uint64_t u = lo; u <= hi; u += step) {
		int p = x4_mem_max_ctx(c, w, u, X4_MEM_RESERVE_BYTES);
		int edge = x4_mem_max_ctx(c, w, u, 0);
		x4_mem_plan a, b;
		if (p < last || edge < p)
			bad++, snprintf(what, sizeof what, "usable %" PRIu64 ": promise %d edge %d", u, p, edge);
		last = p;
		if (!p)
			continue;
		checked++;
		x4_mem_plan_solve(c, w, p, 0, u, X4_MEM_RESERVE_BYTES, &a);
		bool pow2 = a.chunk == p || (a.chunk <= X4_MEM_MAX_CHUNK && !(a.chunk & (a.chunk - 1)));
		if (a.verdict != X4_MEM_FITS || !pow2 || a.free_after < (int64_t)a.reserve)
			bad++, snprintf(what, sizeof what, "usable %" PRIu64 ": promise %d verdict %s chunk %d",
					u, p, x4_mem_verdict_name(a.verdict), a.chunk);
		if (p < c->n_ctx_train) {
			x4_mem_plan_solve(c, w, p + 1, 0, u, X4_MEM_RESERVE_BYTES, &b);
			if (b.verdict != X4_MEM_NO_CONTEXT)
				bad++, snprintf(what, sizeof what, "usable %" PRIu64 ": %d past the promise is %s",
						u, p + 1, x4_mem_verdict_name(b.verdict));
		}
	}
	char tn[64];
	snprintf(tn, sizeof tn, "mem.solve_%s", name);
	T_OK(!bad && checked > 0, tn, "%d bad (%s), %d promises checked", bad, bad ? what : "", checked);
}

int main(void)
{
	x4_err e;
	x4_config full, tiny;
	x4_config_preset("full", &full, &e);
	x4_config_preset("tiny", &tiny, &e);
	hand_counts(&full);
	weights();
	uint64_t wfull = (uint64_t)18212 * MIB; /* about the released trunk's */
	solve("full", &full, wfull, 18 * 1024 * MIB, 48 * 1024 * MIB, 512 * MIB);
	solve("tiny", &tiny, 26 * MIB, 260 * MIB, 340 * MIB, MIB / 2);

	/* The reserve is the gap between the promise and the edge: 256 MiB of
	 * cache, to a position either way (each is the last whole position
	 * that fits, so which way the gap rounds depends on what the rest of
	 * the plan leaves over; the narrowest chunk is the same at both). */
	uint64_t u = 22ull << 30;
	int p = x4_mem_max_ctx(&full, wfull, u, X4_MEM_RESERVE_BYTES), ed = x4_mem_max_ctx(&full, wfull, u, 0);
	int64_t gap = (int64_t)(ed - p) * 46080 - (int64_t)X4_MEM_RESERVE_BYTES;
	T_OK(p > 0 && gap < 46080 && gap > -46080, "mem.reserve_gap", "promise %d, edge %d (%lld bytes "
	     "past the reserve)", p, ed, (long long)gap);

	/* The chunk: the caller's when it fits, else none; the automatic one the
	 * largest power of two up to X4_MEM_MAX_CHUNK (4096) that fits, capped by
	 * the context (about 1 MiB a chunk token at the released shape). */
	uint64_t room = 4096 * MIB;
	T_OK(X4_MEM_MAX_CHUNK == 4096 &&
	     x4_mem_chunk(&full, 8192, 300, room, X4_MEM_RESERVE_BYTES) == 300 &&
	     x4_mem_chunk(&full, 8192, 4096, room, X4_MEM_RESERVE_BYTES) == 0 &&
	     x4_mem_chunk(&full, 8192, 0, room, X4_MEM_RESERVE_BYTES) == 2048 &&
	     x4_mem_chunk(&full, 8192, 0, 8192 * MIB, X4_MEM_RESERVE_BYTES) == 4096 &&
	     x4_mem_chunk(&full, 2000, 0, 8192 * MIB, X4_MEM_RESERVE_BYTES) == 2000 &&
	     x4_mem_chunk(&full, 100, 0, room, X4_MEM_RESERVE_BYTES) == 100 &&
	     x4_mem_chunk(&full, 8192, 0, 256 * MIB + 300 * MIB, X4_MEM_RESERVE_BYTES) == 256 &&
	     x4_mem_chunk(&full, 8192, 0, 256 * MIB + 100 * MIB, X4_MEM_RESERVE_BYTES) == 0,
	     "mem.chunk_pick", "the chunk's pick");
	x4_mem_plan pw;
	x4_mem_plan_solve(&full, wfull, 4096, 0, wfull, X4_MEM_RESERVE_BYTES, &pw);
	T_OK(pw.verdict == X4_MEM_NO_WEIGHTS && pw.chunk == 0, "mem.no_weights", "verdict %s",
	     x4_mem_verdict_name(pw.verdict));
	T_OK(x4_mem_max_ctx(&full, wfull, wfull, 0) == 0, "mem.no_weights_no_context", "a context");
	return t_done();
}
