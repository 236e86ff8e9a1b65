/*
 * x4-ceiling - the longest context a card takes, predicted from the memory
 * plan and, on a GPU, measured.
 *
 * The plan (lib/cuda/mem_plan.c, x4.h section 6b) is the arithmetic the CUDA
 * trunk sizes its allocations and makes its refusals with: the weights as
 * uploaded, the fp16 cache for a context, the workspaces of a prefill chunk,
 * a reserve.  On a GPU this tool measures the device memory a prefill chunk
 * holds at a fixed context across chunk sizes, beside the plan's figure and
 * a least-squares line through both; the CUDA context's own memory, which
 * the plan does not know, apart; finds by bisection the runtime's promise
 * (the longest context a load accepts) and the hardware edge (the longest
 * whose last chunk runs with no reserve kept), with the refusal one past
 * it; and prints docs/record.md 5's table for each card size asked for.
 * Without a GPU (or with --predict) every figure is the plan's.
 */
#include "tool.h"

#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PROG "x4-ceiling"
#define MIB (1024.0 * 1024.0)
#define MAX_LIST 32

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " [-m PATH | --preset tiny|small|full] [--device cuda:N]\n"
"                  [--gpu-memory SIZE] [--cards LIST] [--contexts LIST]\n"
"                  [--context N] [--chunks LIST] [--predict] [--no-run] [--json]\n"
"The longest context a card takes: the memory plan's prediction and, on a GPU,\n"
"the measurement (docs/record.md 5).\n"
"  -m, --model PATH        a .gguf or a folder holding one (default: the tiny\n"
"                          preset beside this binary)\n"
"      --preset NAME       predict for a preset's layout without a file\n"
"                          (tiny, small, full: x4-synth's)\n"
"      --device cuda:N     measure on this GPU (default: predict only)\n"
"      --gpu-memory SIZE   act as a card of SIZE (e.g. 22G): x4 holds at most SIZE;\n"
"                          the edge and the promise are found for it\n"
"      --cards LIST        card sizes for the table (default 22G,24G,48G,80G,141G)\n"
"      --contexts LIST     the table's --max-model-len rows (default powers of two\n"
"                          from 4096 to the model's context)\n"
"      --context N         the context a chunk is measured at (default 8192, at\n"
"                          most the model's)\n"
"      --chunks LIST       prefill chunks to measure (default 128,256,512,1024)\n"
"      --predict           the plan's figures only, even with --device\n"
"      --no-run            find the edge by what a load accepts, without running\n"
"                          the last chunk (for a context too long to prefill)\n"
"      --json              one JSON object a row instead of the TSV\n"
"  -h, --help              this help\n"
"      --version           version, commit and CUDA runtime\n"
"Sizes take K, M and G (binary: 22G is 22 GiB).\n"
"Exit status: 0 done, 1 failure or a measurement more than 5%% off the plan,\n"
"2 usage.\n");
}

struct opts {
	const char *model, *preset;
	int device;
	uint64_t cap;
	uint64_t cards[MAX_LIST];
	int n_cards;
	long contexts[MAX_LIST];
	int n_contexts;
	long chunks[MAX_LIST];
	int n_chunks;
	long context;
	bool predict, no_run, json;
};

/* "a,b,c" into v: sizes (x4t_size) or integers in [1, INT_MAX]. */
static int parse_list(const char *s, const char *opt, bool sizes, uint64_t *u, long *l)
{
	char buf[1024];
	if (strlen(s) >= sizeof buf || !*s)
		x4t_usage_error("%s '%s': expected a comma-separated list", opt, s);
	strcpy(buf, s);
	int n = 0;
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (n == MAX_LIST)
			x4t_usage_error("%s: more than %d values", opt, MAX_LIST);
		if (sizes)
			u[n++] = x4t_size(tok, opt);
		else
			l[n++] = x4t_long(tok, 1, INT_MAX, opt);
	}
	if (!n || s[strlen(s) - 1] == ',' || s[0] == ',' || strstr(s, ",,"))
		x4t_usage_error("%s '%s': expected a comma-separated list", opt, s);
	return n;
}

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_PRESET = 256, O_CARDS, O_CONTEXTS, O_CONTEXT, O_CHUNKS, O_PREDICT, O_NORUN,
	       O_JSON, O_VERSION };
	static const struct option lo[] = {
		{"model", required_argument, 0, 'm'},
		{"preset", required_argument, 0, O_PRESET},
		{"cards", required_argument, 0, O_CARDS},
		{"contexts", required_argument, 0, O_CONTEXTS},
		{"context", required_argument, 0, O_CONTEXT},
		{"chunks", required_argument, 0, O_CHUNKS},
		{"predict", no_argument, 0, O_PREDICT},
		{"no-run", no_argument, 0, O_NORUN},
		{"json", no_argument, 0, O_JSON},
		{"help", no_argument, 0, 'h'},
		{"version", no_argument, 0, O_VERSION},
		X4T_LOAD_LONGOPTS,
		{0, 0, 0, 0},
	};
	memset(o, 0, sizeof *o);
	o->device = -1;
	o->context = 8192;
	static const char defcards[] = "22G,24G,48G,80G,141G";
	o->n_cards = parse_list(defcards, "--cards", true, o->cards, NULL);
	static const long defchunks[] = { 128, 256, 512, 1024 };
	memcpy(o->chunks, defchunks, sizeof defchunks);
	o->n_chunks = 4;
	x4_trunk_opts t;
	x4_trunk_opts_default(&t);
	int c;
	opterr = 0; /* one line of our own for an unknown option or a missing value */
	while ((c = getopt_long(argc, argv, ":m:h", lo, NULL)) != -1) {
		if (x4t_load_opt(c, optarg, &t))
			continue;
		switch (c) {
		case 'm': o->model = optarg; break;
		case O_PRESET: o->preset = optarg; break;
		case O_CARDS: o->n_cards = parse_list(optarg, "--cards", true, o->cards, NULL); break;
		case O_CONTEXTS:
			o->n_contexts = parse_list(optarg, "--contexts", false, NULL, o->contexts);
			break;
		case O_CONTEXT: o->context = x4t_long(optarg, 1, INT_MAX, "--context"); break;
		case O_CHUNKS: o->n_chunks = parse_list(optarg, "--chunks", false, NULL, o->chunks); break;
		case O_PREDICT: o->predict = true; break;
		case O_NORUN: o->no_run = true; break;
		case O_JSON: o->json = true; break;
		case 'h': usage(stdout); exit(x4t_out_done("the help"));
		case O_VERSION:
			printf(PROG " %s (commit %s, CUDA runtime %s)\n", x4_version(), x4_commit(),
			       x4_cuda_runtime());
			exit(x4t_out_done("the version"));
		case ':': x4t_usage_error("%s needs a value", argv[optind - 1]);
		default: x4t_usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		x4t_usage_error("unexpected argument '%s'", argv[optind]);
	if (o->model && o->preset)
		x4t_usage_error("give -m or --preset, not both");
	if (o->preset && t.device >= 0 && !o->predict)
		x4t_usage_error("--preset has no weights to measure: use -m with --device, or "
				"--predict");
	o->device = t.device;
	o->cap = t.mem_limit;
}

/* ---- the rows ---- */

static const char *const cols[] = {
	"section", "card_mib", "basis", "row", "max_model_len", "chunk", "weights_mib",
	"cache_mib", "ws_mib", "room_mib", "free_after_mib", "measured_mib", "predicted_mib",
	"ratio", "a_kib_token", "b_mib", "accepted", "last_chunk", "how", "note", "model",
	"model_fingerprint", "commit", "device", "context", "reserve_mib",
};
enum { NCOL = sizeof cols / sizeof cols[0], NUM0 = 4, NUM1 = 16 };

struct prov {
	const char *model, *fingerprint, *device;
	long context;
};

/* One row: the numeric columns NUM0..NUM1-1 (NAN: not applicable). */
struct row {
	const char *section, *basis, *row;
	double card_mib;
	double v[NUM1 - NUM0];
	const char *accepted, *last_chunk, *how, *note;
};
enum { V_LEN, V_CHUNK, V_W, V_CACHE, V_WS, V_ROOM, V_FREE, V_MEAS, V_PRED, V_RATIO, V_A, V_B };

static void row_init(struct row *r, const char *section, const char *basis, const char *name)
{
	memset(r, 0, sizeof *r);
	r->section = section;
	r->basis = basis;
	r->row = name;
	r->card_mib = NAN;
	for (int i = 0; i < NUM1 - NUM0; i++)
		r->v[i] = NAN;
}

static const char *const vfmt[NUM1 - NUM0] = { "%.0f", "%.0f", "%.2f", "%.2f", "%.2f", "%.2f",
					       "%.2f", "%.2f", "%.2f", "%.4f", "%.3f", "%.3f" };

static void put_str(bool json, const char *key, const char *v, bool first)
{
	if (json) {
		x4t_outf("%s\"%s\":", first ? "{" : ",", key);
		if (v) {
			x4t_json_str(stdout, v, strlen(v));
		} else {
			x4t_outf("null");
		}
	} else {
		x4t_outf("%s%s", first ? "" : "\t", v && *v ? v : "-");
	}
}

static void put_num(bool json, const char *key, double v, const char *fmt)
{
	if (json)
		x4t_outf(",\"%s\":", key);
	else
		x4t_outf("\t");
	if (isfinite(v))
		x4t_outf(fmt, v == 0 ? 0.0 : v); /* no "-0" */
	else
		x4t_outf(json ? "null" : "-");
}

static void put_row(bool json, const struct prov *p, const struct row *r)
{
	put_str(json, cols[0], r->section, true);
	put_num(json, cols[1], r->card_mib, "%.0f");
	put_str(json, cols[2], r->basis, false);
	put_str(json, cols[3], r->row, false);
	for (int i = 0; i < NUM1 - NUM0; i++)
		put_num(json, cols[NUM0 + i], r->v[i], vfmt[i]);
	put_str(json, cols[16], r->accepted, false);
	put_str(json, cols[17], r->last_chunk, false);
	put_str(json, cols[18], r->how, false);
	put_str(json, cols[19], r->note, false);
	put_str(json, cols[20], p->model, false);
	put_str(json, cols[21], p->fingerprint, false);
	put_str(json, cols[22], x4_commit(), false);
	put_str(json, cols[23], p->device, false);
	put_num(json, cols[24], (double)p->context, "%.0f");
	put_num(json, cols[25], X4_MEM_RESERVE_BYTES / MIB, "%.0f");
	x4t_outf(json ? "}\n" : "\n");
}

static double mib(double b) { return b / MIB; }

/* y = a x + b by least squares over n points; false when the x are all equal. */
static bool fit_line(const double *x, const double *y, int n, double *a, double *b)
{
	double mx = 0, my = 0, sxx = 0, sxy = 0;
	for (int i = 0; i < n; i++)
		mx += x[i] / n, my += y[i] / n;
	for (int i = 0; i < n; i++)
		sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
	if (n < 2 || sxx <= 0)
		return false;
	*a = sxy / sxx;
	*b = my - *a * mx;
	return true;
}

/* ---- what the plan predicts ---- */

struct model_shape {
	x4_config c;
	uint64_t weights;
};

/* What a card loses before the plan's first byte, measured (0 when predicted). */
struct overhead {
	bool measured;
	uint64_t context;  /* total - free once the CUDA context exists */
	uint64_t modules;  /* kept after a trunk has run and gone: kernel images and the like */
	uint64_t run;      /* beyond the plan while a chunk runs, the largest seen */
};

/* One table row for a card: the context len on usable bytes at load and
 * usable_run while running. */
static void card_row(const struct model_shape *ms, uint64_t usable, uint64_t usable_run,
		     long len, const char *name, struct row *r)
{
	x4_mem_plan p, raw;
	x4_mem_plan_solve(&ms->c, ms->weights, (int)len, 0, usable, X4_MEM_RESERVE_BYTES, &p);
	x4_mem_plan_solve(&ms->c, ms->weights, (int)len, 0, usable_run, 0, &raw);
	r->v[V_LEN] = (double)len;
	r->v[V_W] = mib((double)ms->weights);
	r->v[V_CACHE] = mib((double)p.cache_bytes);
	r->v[V_ROOM] = mib((double)p.room);
	/* The chunk a load picks; for a context it refuses that would still
	 * run without the reserve, the chunk that would run; else none. */
	bool ok = p.verdict == X4_MEM_FITS, runs = raw.verdict == X4_MEM_FITS;
	int chunk = ok ? p.chunk : runs ? raw.chunk : p.narrow_chunk;
	uint64_t ws = x4_mem_ws_bytes(&ms->c, (int)len, chunk);
	r->v[V_CHUNK] = ok || runs ? chunk : NAN;
	r->v[V_WS] = mib((double)ws);
	r->v[V_FREE] = mib((double)usable_run - (double)ms->weights - (double)p.cache_bytes -
			   (double)ws);
	r->accepted = ok ? "yes" : "no";
	r->last_chunk = ok ? "fits" : p.verdict == X4_MEM_NO_WEIGHTS ? "no_weights"
		      : runs ? "refused" : "oom";
	r->row = name;
}

static void print_cards(const struct opts *o, const struct prov *pv, const struct model_shape *ms,
			const struct overhead *ov)
{
	const char *basis = ov->measured ? "plan+overhead" : "plan";
	for (int k = 0; k < o->n_cards; k++) {
		uint64_t card = o->cards[k];
		uint64_t pre = ov->context, run = ov->context + ov->modules + ov->run;
		uint64_t usable = card > pre ? card - pre : 0, usable_run = card > run ? card - run : 0;
		int promise = x4_mem_max_ctx(&ms->c, ms->weights, usable, X4_MEM_RESERVE_BYTES);
		int edge = x4_mem_max_ctx(&ms->c, ms->weights, usable_run, 0);
		struct row r;
		if (ms->weights >= usable) {
			row_init(&r, "card", basis, "weights");
			r.card_mib = mib((double)card);
			r.v[V_W] = mib((double)ms->weights);
			r.v[V_ROOM] = mib((double)usable - (double)ms->weights);
			r.accepted = "no";
			r.last_chunk = "no_weights";
			char note[160];
			snprintf(note, sizeof note, "the weights need %.0f MiB of the %.0f MiB x4 may hold",
				 mib((double)ms->weights), mib((double)usable));
			r.note = note;
			put_row(o->json, pv, &r);
			x4t_warn("card %.0f MiB: the weights alone (%.0f MiB) do not fit", mib((double)card),
				 mib((double)ms->weights));
			continue;
		}
		long lens[MAX_LIST + 3];
		const char *names[MAX_LIST + 3];
		int n = 0;
		for (int i = 0; i < o->n_contexts; i++)
			if (o->contexts[i] <= ms->c.n_ctx_train)
				lens[n] = o->contexts[i], names[n++] = "context";
		if (promise > 0)
			lens[n] = promise, names[n++] = "promise";
		if (edge > 0)
			lens[n] = edge, names[n++] = "edge";
		if (edge < ms->c.n_ctx_train)
			lens[n] = edge + 1, names[n++] = "past_edge";
		for (int i = 0; i < n; i++) {
			row_init(&r, "card", basis, names[i]);
			r.card_mib = mib((double)card);
			card_row(ms, usable, usable_run, lens[i], names[i], &r);
			put_row(o->json, pv, &r);
		}
		x4t_warn("card %.0f MiB (%s): the runtime promises %d positions, the edge is %d%s",
			 mib((double)card), basis, promise, edge,
			 edge == ms->c.n_ctx_train ? " (the model's whole context)" : "");
	}
}

/* The formula rows and the chunk rows of the plan (measured ones beside
 * them when meas is given): the workspace of each chunk at the context. */
static int print_formula(const struct opts *o, const struct prov *pv, const struct model_shape *ms,
			 const double *meas)
{
	double x[MAX_LIST], yp[MAX_LIST], ym[MAX_LIST];
	int n = 0, nm = 0, bad = 0;
	struct row r;
	row_init(&r, "formula", "plan", "weights");
	r.v[V_W] = mib((double)ms->weights);
	r.note = "the trunk's tensors, each at a 256-byte boundary";
	put_row(o->json, pv, &r);
	row_init(&r, "formula", "plan", "cache");
	r.v[V_A] = (double)x4_mem_cache_bytes(&ms->c, 1) / 1024.0;
	r.v[V_B] = 0;
	r.note = "n_block x (kv_lora + d_rope) x 2 bytes a position (a_kib_token)";
	put_row(o->json, pv, &r);
	for (int i = 0; i < o->n_chunks; i++) {
		long T = o->chunks[i];
		if (T > o->context)
			continue;
		row_init(&r, "chunk", meas ? "measured" : "plan", "chunk");
		r.v[V_LEN] = (double)o->context;
		r.v[V_CHUNK] = (double)T;
		r.v[V_PRED] = mib((double)x4_mem_ws_bytes(&ms->c, (int)o->context, (int)T));
		x[n] = (double)T;
		yp[n] = r.v[V_PRED];
		if (meas && isfinite(meas[i])) {
			r.v[V_MEAS] = meas[i];
			r.v[V_RATIO] = meas[i] / r.v[V_PRED];
			ym[nm++] = meas[i];
			/* CUDA hands device memory out in 2 MiB pages: each of the
			 * three allocations (weights, cache, workspace) may round up
			 * by up to that much, which the plan does not count. */
			bool off = fabs(meas[i] - r.v[V_PRED]) > fmax(0.05 * r.v[V_PRED], 6.0);
			bad += off;
			r.note = off ? "more than 5% (and 6 MiB) off the plan" : "within 5% of the plan";
		} else if (meas) {
			r.note = "not measured: the chunk did not fit (see stderr)";
		}
		put_row(o->json, pv, &r);
		n++;
	}
	static const char *const notes[2] = {
		"the workspace of a chunk at the context: a_kib_token x chunk + b_mib",
		"device memory in use beside the weights and the cache, least squares" };
	for (int k = 0; k < (meas ? 2 : 1); k++) {
		double a, b;
		if ((k && nm != n) || !fit_line(x, k ? ym : yp, n, &a, &b))
			continue;
		row_init(&r, "formula", k ? "measured" : "plan", "chunk");
		r.v[V_LEN] = (double)o->context;
		r.v[V_A] = a * 1024.0;
		r.v[V_B] = b;
		r.note = notes[k];
		put_row(o->json, pv, &r);
		x4t_warn("%s: a chunk of T tokens at context %ld holds %.1f KiB x T + %.1f MiB",
			 k ? "measured" : "plan", o->context, a * 1024.0, b);
	}
	return bad;
}

/* ---- on the GPU ---- */

struct gpu {
	const struct opts *o;
	const x4_model *m;
	const struct model_shape *ms;
	int32_t *ids;       /* [n_ctx_train] the prompt */
	uint64_t base_free; /* free after the warm-up trunk is gone */
	x4_trunk *t;
	x4_trunk_opts topt;
	char msg[X4_ERR_MSG];
};

static int32_t prompt_id(long i, int n_vocab)
{
	if (n_vocab <= 2000)
		return (int32_t)(i % n_vocab);
	return (int32_t)(1000 + (i * 7919) % (n_vocab - 1000));
}

static uint64_t dev_free(const struct gpu *g)
{
	uint64_t f = 0, tot = 0;
	x4_err e;
	if (x4_device_mem(g->o->device, &f, &tot, NULL, 0, &e))
		x4t_die("%s", e.msg);
	return f;
}

/* Prefill n positions from 0 (in the trunk's chunks), the last of them
 * as a decode step that picks a token. */
static int fill(struct gpu *g, long n, x4_err *e)
{
	x4_trunk_reset(g->t);
	int rc = n > 1 ? x4_trunk_forward(g->t, g->ids, (int)(n - 1), NULL, false, e) : 0;
	x4_sampler_opts so = { .temperature = 0, .top_k = 0, .top_p = 1, .seed = 1 };
	int32_t next;
	if (!rc)
		rc = x4_trunk_forward_next(g->t, g->ids + n - 1, 1, NULL, &so, &next, NULL, e);
	return rc;
}

static int make_trunk(struct gpu *g, bool no_reserve, int max_ctx, int chunk, x4_err *e)
{
	x4_trunk_free(g->t);
	g->t = NULL;
	x4_trunk_opts_default(&g->topt);
	g->topt.device = g->o->device;
	g->topt.mem_limit = g->o->cap;
	g->topt.no_reserve = no_reserve;
	g->topt.max_ctx = max_ctx;
	g->topt.prefill_chunk = chunk;
	return x4_trunk_create(&g->t, g->m, &g->topt, e);
}

static int configure(struct gpu *g, int max_ctx, int chunk, x4_err *e)
{
	x4_trunk_opts o = g->topt;
	o.max_ctx = max_ctx;
	o.prefill_chunk = chunk;
	int rc = x4_trunk_configure(g->t, &o, e);
	if (!rc)
		g->topt = o;
	return rc;
}

/* The peak of each chunk at the context: x4 allocates nothing inside a
 * forward, so what is in use after the last chunk is its peak. */
static void measure_chunks(struct gpu *g, double *meas, struct overhead *ov)
{
	const struct opts *o = g->o;
	x4_err e;
	for (int i = 0; i < o->n_chunks; i++) {
		meas[i] = NAN;
		long T = o->chunks[i];
		if (T > o->context)
			continue;
		int rc = g->t ? configure(g, (int)o->context, (int)T, &e)
			      : make_trunk(g, false, (int)o->context, (int)T, &e);
		long pre = o->context - T;
		if (!rc && pre > 0)
			rc = (x4_trunk_reset(g->t), x4_trunk_forward(g->t, g->ids, (int)pre, NULL,
								      false, &e));
		if (!rc)
			rc = x4_trunk_forward(g->t, g->ids + pre, (int)T, NULL, false, &e);
		if (rc) {
			x4t_warn("chunk %ld at context %ld: %s", T, o->context, e.msg);
			continue;
		}
		x4_trunk_stats st;
		x4_trunk_get_stats(g->t, &st);
		uint64_t f = dev_free(g);
		double used = (double)g->base_free - (double)f;
		double plan = (double)(g->ms->weights + st.cache_bytes + st.work_bytes);
		meas[i] = mib(used - (double)g->ms->weights - (double)st.cache_bytes);
		if (used > plan && (uint64_t)(used - plan) > ov->run)
			ov->run = (uint64_t)(used - plan);
		x4t_warn("chunk %ld at context %ld: %.1f MiB in use beside the weights and the cache, "
			 "the plan's workspace %.1f MiB", T, o->context, meas[i],
			 mib((double)st.work_bytes));
	}
}

/* Does max_ctx len load (and, unless --no-run, its last chunk run)? 1 yes,
 * 0 refused or failed (g->msg says why). */
static int probe(struct gpu *g, long len, bool run)
{
	x4_err e;
	int rc = configure(g, (int)len, 0, &e);
	if (!rc && run)
		rc = fill(g, len, &e);
	if (rc)
		snprintf(g->msg, sizeof g->msg, "%s", e.msg);
	return rc == 0;
}

/* The longest context in [0, n_ctx_train] that probe() passes: bisect on
 * what a load accepts (cheap), then run the answer; only if that run
 * fails, bisect below it with runs. */
static long bisect(struct gpu *g, bool run, char *past, size_t past_cap)
{
	long lo = 0, hi = g->ms->c.n_ctx_train + 1L; /* lo passes (trivially), hi does not */
	if (probe(g, hi - 1, false))
		lo = hi - 1;
	while (hi - lo > 1) {
		long mid = lo + (hi - lo) / 2;
		if (probe(g, mid, false))
			lo = mid;
		else
			hi = mid, snprintf(past, past_cap, "%s", g->msg);
	}
	if (run && lo > 0 && !probe(g, lo, true)) {
		x4t_warn("context %ld loads but its last chunk failed: %s", lo, g->msg);
		snprintf(past, past_cap, "%s", g->msg);
		hi = lo;
		lo = 0;
		while (hi - lo > 1) {
			long mid = lo + (hi - lo) / 2;
			if (probe(g, mid, true))
				lo = mid;
			else
				hi = mid, snprintf(past, past_cap, "%s", g->msg);
		}
	}
	/* the refusal one past the edge, in the trunk's own words */
	if (lo < g->ms->c.n_ctx_train && !probe(g, lo + 1, run))
		snprintf(past, past_cap, "%s", g->msg);
	return lo;
}

static void edge_rows(const struct opts *o, const struct prov *pv, const struct model_shape *ms,
		      uint64_t usable, long promise, long edge, const char *how, const char *past)
{
	struct row r;
	const char *names[3] = { "promise", "edge", "past_edge" };
	long lens[3] = { promise, edge, edge + 1 };
	for (int i = 0; i < 3; i++) {
		if (i == 2 && edge >= ms->c.n_ctx_train)
			break;
		row_init(&r, "edge", how, names[i]);
		r.card_mib = mib((double)usable);
		r.v[V_LEN] = (double)lens[i];
		if (lens[i] > 0)
			r.v[V_CACHE] = mib((double)x4_mem_cache_bytes(&ms->c, (int)lens[i]));
		r.v[V_W] = mib((double)ms->weights);
		r.accepted = i == 2 ? "no" : lens[i] > 0 ? "yes" : "no";
		r.how = how;
		r.note = i == 2 ? past : i == 0 ? "the longest context a load accepts (its reserve kept)"
			 : "the longest whose last chunk runs with no reserve kept";
		put_row(o->json, pv, &r);
	}
}

static int measure(const struct opts *o, const struct prov *pv, const x4_model *m,
		   const struct model_shape *ms, struct overhead *ov, double *meas)
{
	x4_err e;
	struct gpu g = { .o = o, .m = m, .ms = ms };
	uint64_t f0 = 0, tot = 0;
	char name[160];
	if (x4_device_mem(o->device, &f0, &tot, name, sizeof name, &e))
		x4t_die("%s; without a GPU, --predict gives the plan's figures", e.msg);
	g.ids = malloc(sizeof *g.ids * (size_t)ms->c.n_ctx_train);
	if (!g.ids)
		x4t_die("out of memory for %d token ids", ms->c.n_ctx_train);
	for (long i = 0; i < ms->c.n_ctx_train; i++)
		g.ids[i] = prompt_id(i, ms->c.n_vocab);
	ov->measured = true;
	ov->context = tot - f0;
	/* The warm-up: a trunk that runs a chunk and a decode step (every
	 * kernel's image is loaded at its first launch), then goes. */
	int wctx = X4_MEM_NARROW_CHUNK * 2 < ms->c.n_ctx_train ? X4_MEM_NARROW_CHUNK * 2
							      : ms->c.n_ctx_train;
	int rc = make_trunk(&g, false, wctx, 0, &e);
	if (!rc)
		rc = fill(&g, wctx, &e);
	x4_trunk_free(g.t);
	g.t = NULL;
	if (rc)
		x4t_warn("the warm-up: %s", e.msg);
	g.base_free = dev_free(&g);
	ov->modules = f0 > g.base_free ? f0 - g.base_free : 0;
	x4t_warn("%s: %.0f MiB in all, %.0f MiB taken before x4 (the CUDA context and anything "
		 "else on the card), %.0f MiB kept after a trunk ran and went (kernel images)",
		 name, mib((double)tot), mib((double)ov->context), mib((double)ov->modules));
	measure_chunks(&g, meas, ov);

	/* The promise (the reserve kept) and the edge (none), on one trunk each
	 * reconfigured from probe to probe: the weights load once a trunk. */
	const char *how = o->no_run ? "create" : "run";
	char past_p[X4_ERR_MSG] = "", past_e[X4_ERR_MSG] = "";
	long promise = 0, edge = 0;
	if (!(rc = make_trunk(&g, false, 1, 0, &e)))
		promise = bisect(&g, false, past_p, sizeof past_p);
	else
		snprintf(past_e, sizeof past_e, "%s", e.msg);
	if (!rc && !o->no_run && promise > 0 && !probe(&g, promise, true))
		x4t_warn("the promise %ld loads but its last chunk failed: %s", promise, g.msg);
	if (!rc && !(rc = make_trunk(&g, true, 1, 0, &e)))
		edge = bisect(&g, !o->no_run, past_e, sizeof past_e);
	else if (!*past_e)
		snprintf(past_e, sizeof past_e, "%s", e.msg);
	x4_trunk_free(g.t);
	uint64_t usable = o->cap ? o->cap : tot;
	edge_rows(o, pv, ms, usable, promise, edge, how, past_e);
	x4t_warn("%s%s: the runtime promises %ld positions; the edge (%s) is %ld", name,
		 o->cap ? " under --gpu-memory" : "", promise,
		 o->no_run ? "a load accepts it" : "its last chunk runs", edge);
	free(g.ids);
	return 0;
}

static void print_overhead(const struct opts *o, const struct prov *pv, const struct overhead *ov)
{
	static const char *const names[3] = { "context", "modules", "run" };
	static const char *const notes[3] = {
		"taken before x4: the CUDA context (and anything else on the card)",
		"kept after a trunk ran and went: kernel images loaded at first launch",
		"beyond the plan while a chunk ran, the largest over the chunks" };
	uint64_t v[3] = { ov->context, ov->modules, ov->run };
	for (int i = 0; i < 3; i++) {
		struct row r;
		row_init(&r, "overhead", "measured", names[i]);
		r.v[V_MEAS] = mib((double)v[i]);
		r.note = notes[i];
		put_row(o->json, pv, &r);
	}
}

int main(int argc, char **argv)
{
	x4t_prog = PROG;
	struct opts o;
	parse_args(argc, argv, &o);
	x4_err e = {0};
	struct model_shape ms;
	x4_model *m = NULL;
	x4_paths paths;
	char defmodel[4096], mname[4200];
	const char *fp = "-";
	if (o.preset) {
		x4_tensor_spec *specs = NULL;
		int n = 0;
		if (x4_config_preset(o.preset, &ms.c, &e))
			x4t_usage_error("--preset: %s", e.msg);
		if (x4_layout(&ms.c, &specs, &n, &e))
			x4t_die("%s", e.msg);
		ms.weights = x4_mem_weight_bytes_specs(&ms.c, specs, n);
		free(specs);
		snprintf(mname, sizeof mname, "preset:%s", o.preset);
	} else {
		if (!o.model) {
			x4t_default_model(defmodel, sizeof defmodel);
			o.model = defmodel;
		}
		if (x4_paths_resolve(o.model, NULL, &paths, &e) || x4_model_open(&m, &paths, &e))
			x4t_die("%s%s", e.msg, x4t_default_model_hint(o.model, defmodel));
		ms.c = *x4_model_config(m);
		ms.weights = x4_mem_weight_bytes(m);
		fp = x4_model_fingerprint(m);
		snprintf(mname, sizeof mname, "%s", paths.gguf);
	}
	if (o.context > ms.c.n_ctx_train)
		o.context = ms.c.n_ctx_train;
	if (!o.n_contexts)
		for (long L = 4096; L <= ms.c.n_ctx_train && o.n_contexts < MAX_LIST; L *= 2)
			o.contexts[o.n_contexts++] = L;
	bool gpu = o.device >= 0 && !o.predict;
	char dev[160] = "none (predicted)";
	if (gpu) {
		uint64_t f, t;
		if (x4_device_mem(o.device, &f, &t, dev, sizeof dev, &e))
			x4t_die("%s; without a GPU, --predict gives the plan's figures", e.msg);
	}
	struct prov pv = { mname, fp, dev, o.context };
	if (!o.json) {
		for (int i = 0; i < NCOL; i++)
			x4t_outf("%s%s", i ? "\t" : "", cols[i]);
		x4t_outf("\n");
	}
	struct overhead ov = { 0 };
	double meas[MAX_LIST];
	int status = 0;
	if (gpu) {
		measure(&o, &pv, m, &ms, &ov, meas);
		print_overhead(&o, &pv, &ov);
	} else if (o.cap) {
		int promise = x4_mem_max_ctx(&ms.c, ms.weights, o.cap, X4_MEM_RESERVE_BYTES);
		int edge = x4_mem_max_ctx(&ms.c, ms.weights, o.cap, 0);
		x4_mem_plan p;
		x4_mem_plan_solve(&ms.c, ms.weights, edge + 1, 0, o.cap, 0, &p);
		char past[160];
		snprintf(past, sizeof past, "the plan refuses it: %s", x4_mem_verdict_name(p.verdict));
		edge_rows(&o, &pv, &ms, o.cap, promise, edge, "plan", past);
	}
	if (print_formula(&o, &pv, &ms, gpu ? meas : NULL))
		status = 1;
	print_cards(&o, &pv, &ms, &ov);
	if (x4t_out_done("the table"))
		status = 1;
	x4_model_close(m);
	return status;
}
