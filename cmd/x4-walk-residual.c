/*
 * x4-walk-residual - watch the four residual streams block by block, with
 * the residual stored in fp32, fp16 and bf16 side by side.
 *
 * This is the instrument of docs/numerics.md 2: a served chat answered in
 * <_unk> because one loud expert pushed an fp16 residual past 65504 and
 * everything after it became inf - inf.  The table shows where a value
 * leaves the fp16 range and where the first non-finite value appears; the
 * float64 run says what the right answer is; --replay recomputes one MoE
 * block in float64 from the file's bytes to show the magnitude is in the
 * weights, not in a kernel.
 *
 * A thin tool over the generation session: the model is loaded once and
 * every arm is a prefill-only request with its own residual width (the
 * request options change without a reload: on a GPU the weights go up
 * once); the float64 arm runs on the CPU, in a session of its own when the
 * arms run on a GPU.  The probe on the session's trunk watches each arm.
 */
#include "tool.h"

#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG "x4-walk-residual"
#define FP16_MAX 65504.0
#define MAX_HC 8
#define TOPK 4

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " [-m PATH] [--tokenizer DIR] [-p TEXT | -f FILE | --tokens IDS]\n"
"                        [--arms f32,f16,bf16] [--replay BLOCK] [--device cpu|cuda:N]\n"
"                        [--max-model-len N] [--threads N] [--json]\n"
"Walk the residual streams of one forward pass, block by block and sublayer by\n"
"sublayer, once per residual width; TSV on stdout, a '#' summary after it.\n"
"  -m, --model PATH      a .gguf or a folder holding one (default: the tiny\n"
"                        preset beside this binary: ../build/models/tiny, or\n"
"                        ../share/x4/models/tiny once installed)\n"
"      --tokenizer DIR   the release's tokenizer folder; x4 tokenizes from the\n"
"                        GGUF and takes only config.json's clamp keys from it\n"
"                        (when the GGUF has none), after checking that its\n"
"                        config.json and tokenizer.model belong to the GGUF\n"
"  -p, --prompt TEXT     the prompt, tokenized raw (no bos)\n"
"  -f, --file FILE       read the prompt from FILE ('-' = stdin); with no -p, -f\n"
"                        or --tokens it is read from stdin when that is not a\n"
"                        terminal; one final newline is dropped\n"
"      --tokens IDS      raw token ids, comma separated (--tokens 2: the record's\n"
"                        one-token <_end> walk)\n"
"      --arms LIST       residual widths to run, of f32, f16, bf16 (default all)\n"
"      --replay BLOCK    recompute that MoE block in float64 from the file's weights\n"
"                        on the f32 arm's captured input\n"
"      --device DEV      cpu (default) or cuda:N for the arms (float64 runs on the CPU)\n"
"      --max-model-len N positions the KV cache holds (default min(context, 4096),\n"
"                        at most the model's trained context); the prompt must fit\n"
"      --threads N       CPU threads (default 0 = all)\n"
"      --json            JSON Lines instead of TSV: one JSON object per line\n"
"  -h, --help            this help\n"
"      --version         version, commit and CUDA runtime\n"
"Exit status: 0 the f32 arm stayed finite, 1 it did not or a failure, 2 usage.\n");
}

/* What one probe call saw, reduced. */
struct rowstat {
	bool seen;
	double s_max[MAX_HC], s_rms[MAX_HC]; /* per stream, after the update */
	double y_max;                        /* sublayer output */
	char nonfinite[32];                  /* "s2[117]", "y[5]" or "" */
};

struct arm {
	const char *name;  /* column prefix */
	int resid, prec;
	struct rowstat *rows; /* [n_block][2] */
	float *logits;     /* [n_vocab] of the last token */
	int top_id[TOPK];
	float top_v[TOPK];
	int n_top;
	char overflow[32], nonfinite[32]; /* "block:sublayer", "logits" or "" */
	bool failed;       /* the forward pass returned an error (in err) */
	x4_err err;
	/* the FFN sublayer of the replay block, captured (f32 arm only) */
	int capture_block;
	float *cap_in, *cap_out; /* [n_embd] */
	int cap_experts[X4_REPLAY_MAX_USED];
	bool captured;
	int n_embd, n_hc, n_used, n_block, n_vocab;
};

static void reduce(const float *v, int n, double *max, double *rms, int *first_bad)
{
	double mx = 0, ss = 0;
	bool nan = false;
	*first_bad = -1;
	for (int i = 0; i < n; i++) {
		double a = fabs((double)v[i]);
		if (!isfinite(a) && *first_bad < 0)
			*first_bad = i;
		if (isnan(a))
			nan = true;
		else if (a > mx)
			mx = a;
		ss += (double)v[i] * v[i];
	}
	*max = nan ? NAN : mx;
	*rms = sqrt(ss / n);
}

static void on_probe(void *ctx, const x4_probe_row *p)
{
	struct arm *a = ctx;
	struct rowstat *r = &a->rows[p->block * 2 + p->sublayer];
	int bad;
	double rms;
	r->seen = true;
	r->nonfinite[0] = 0;
	for (int s = 0; s < a->n_hc; s++) {
		reduce(p->streams + (size_t)s * a->n_embd, a->n_embd, &r->s_max[s], &r->s_rms[s], &bad);
		if (bad >= 0 && !r->nonfinite[0])
			snprintf(r->nonfinite, sizeof r->nonfinite, "s%d[%d]", s, bad);
	}
	reduce(p->sub_out, a->n_embd, &r->y_max, &rms, &bad);
	if (bad >= 0 && !r->nonfinite[0])
		snprintf(r->nonfinite, sizeof r->nonfinite, "y[%d]", bad);
	if (a->cap_in && p->block == a->capture_block && p->sublayer == 1) {
		memcpy(a->cap_in, p->sub_in, (size_t)a->n_embd * sizeof *a->cap_in);
		memcpy(a->cap_out, p->sub_out, (size_t)a->n_embd * sizeof *a->cap_out);
		a->captured = p->experts != NULL;
		for (int j = 0; p->experts && j < a->n_used; j++)
			a->cap_experts[j] = p->experts[j];
	}
}

static int cmp_int(const void *x, const void *y)
{
	return *(const int *)x - *(const int *)y;
}

/* Top-4 of the logits (NaN never ranks) and the summary fields. */
static void summarize(struct arm *a, int n_block, int n_vocab)
{
	static const char *sub[2] = {"attn", "ffn"};
	a->overflow[0] = a->nonfinite[0] = 0;
	for (int i = 0; i < n_block * 2; i++) {
		struct rowstat *r = &a->rows[i];
		if (!r->seen)
			continue;
		bool over = !(r->y_max <= FP16_MAX) || r->nonfinite[0];
		for (int s = 0; s < a->n_hc; s++)
			over |= !(r->s_max[s] <= FP16_MAX);
		if (over && !a->overflow[0])
			snprintf(a->overflow, sizeof a->overflow, "%d:%s", i / 2, sub[i % 2]);
		if (r->nonfinite[0] && !a->nonfinite[0])
			snprintf(a->nonfinite, sizeof a->nonfinite, "%d:%s", i / 2, sub[i % 2]);
	}
	bool logits_bad = false;
	a->n_top = 0;
	for (int v = 0; !a->failed && v < n_vocab; v++) {
		float x = a->logits[v];
		if (!isfinite(x))
			logits_bad = true;
		if (isnan(x))
			continue;
		int j = a->n_top < TOPK ? a->n_top++ : TOPK;
		/* strict >: on a tie the lower id keeps its rank */
		while (j > 0 && x > a->top_v[j - 1]) {
			if (j < TOPK) {
				a->top_v[j] = a->top_v[j - 1];
				a->top_id[j] = a->top_id[j - 1];
			}
			j--;
		}
		if (j < TOPK) {
			a->top_v[j] = x;
			a->top_id[j] = v;
		}
	}
	if (logits_bad && !a->nonfinite[0])
		snprintf(a->nonfinite, sizeof a->nonfinite, "logits");
}

/* The last position's logits: every chunk's rows come here, the last
 * chunk's last row stays. */
static int keep_last_row(void *ctx, const float *rows, int n, x4_err *e)
{
	struct arm *a = ctx;
	memcpy(a->logits, rows + (size_t)(n - 1) * (size_t)a->n_vocab,
	       (size_t)a->n_vocab * sizeof *a->logits);
	return 0;
}

/* The probe sees the last token of each forward, and the session forwards
 * the prompt a chunk at a time: what a chunk before the last saw is not the
 * prompt's last token, so it is forgotten (an arm that fails in its last
 * chunk shows what that chunk saw, as one forward of the whole prompt would). */
static int next_chunk(void *ctx, size_t done, size_t total)
{
	struct arm *a = ctx;
	if (done < total) {
		memset(a->rows, 0, (size_t)a->n_block * 2 * sizeof *a->rows);
		a->captured = false;
	}
	return 0;
}

/* One arm: a prefill-only request with the arm's residual width and
 * arithmetic, the probe watching.  A session not loaded yet (or whose load
 * failed for an earlier arm) is loaded with this arm's options. */
static int run_arm(x4_session *s, const x4_trunk_opts *base, struct arm *a,
		   const int32_t *ids, size_t n, x4_err *e)
{
	x4_trunk_opts o = *base;
	o.resid = a->resid;
	o.prec = a->prec;
	if (a->prec == X4_PREC_F64)
		o.device = -1; /* float64 is the CPU oracle's */
	int rc = x4_session_trunk(s) ? 0 : x4_session_load(s, &o, e);
	if (rc)
		return rc;
	x4_trunk_set_probe(x4_session_trunk(s), on_probe, a);
	x4_request r = {
		.ids = ids, .n_ids = n, .max_tokens = 0, .sampler = { .top_p = 1 }, .opts = &o,
		.on_prefill = next_chunk, .on_logits = keep_last_row, .ctx = a,
	};
	x4_gen_stats st;
	return x4_session_generate(s, &r, &st, e);
}

static void put_num(double v, bool json)
{
	if (isfinite(v))
		x4t_outf("%.4g", v);
	else if (json)
		x4t_outf("\"%s\"", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
	else
		x4t_outf("%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

static void print_table(struct arm *arms, int n_arms, int n_block, bool json)
{
	static const char *sub[2] = {"attn", "ffn"};
	int n_hc = arms[0].n_hc;
	if (!json) {
		x4t_outf("block\tsublayer");
		for (int k = 0; k < n_arms; k++) {
			for (int s = 0; s < n_hc; s++)
				x4t_outf("\t%s_s%d_max\t%s_s%d_rms", arms[k].name, s, arms[k].name, s);
			x4t_outf("\t%s_y_max\t%s_nonfinite", arms[k].name, arms[k].name);
		}
		x4t_outf("\n");
	}
	for (int i = 0; i < n_block * 2; i++) {
		x4t_outf(json ? "{\"block\":%d,\"sublayer\":\"%s\"" : "%d\t%s", i / 2, sub[i % 2]);
		for (int k = 0; k < n_arms; k++) {
			struct rowstat *r = &arms[k].rows[i];
			if (!r->seen) { /* an arm that failed before this row */
				if (json)
					x4t_outf(",\"%s\":null", arms[k].name);
				for (int c = 0; !json && c < 2 * n_hc + 2; c++)
					x4t_outf("\t-");
				continue;
			}
			if (json) {
				x4t_outf(",\"%s\":{\"s_max\":[", arms[k].name);
				for (int s = 0; s < n_hc; s++) {
					x4t_outf(s ? "," : "");
					put_num(r->s_max[s], true);
				}
				x4t_outf("],\"s_rms\":[");
				for (int s = 0; s < n_hc; s++) {
					x4t_outf(s ? "," : "");
					put_num(r->s_rms[s], true);
				}
				x4t_outf("],\"y_max\":");
				put_num(r->y_max, true);
				if (r->nonfinite[0])
					x4t_outf(",\"nonfinite\":\"%s\"}", r->nonfinite);
				else
					x4t_outf(",\"nonfinite\":null}");
				continue;
			}
			for (int s = 0; s < n_hc; s++) {
				x4t_outf("\t");
				put_num(r->s_max[s], false);
				x4t_outf("\t");
				put_num(r->s_rms[s], false);
			}
			x4t_outf("\t");
			put_num(r->y_max, false);
			x4t_outf("\t%s", r->nonfinite[0] ? r->nonfinite : "-");
		}
		x4t_outf(json ? "}\n" : "\n");
	}
}

/* "key":"value", or "key":null for an empty value */
static void json_opt(const char *key, const char *v)
{
	if (v[0])
		x4t_outf("\"%s\":\"%s\",", key, v);
	else
		x4t_outf("\"%s\":null,", key);
}

static void print_summary(const struct arm *a, bool json)
{
	if (json) {
		x4t_outf("{\"arm\":\"%s\",\"prec\":\"%s\",\"resid\":\"%s\",", a->name,
		       a->prec == X4_PREC_F64 ? "f64" : "f32", x4_resid_name(a->resid));
		json_opt("first_fp16_overflow", a->overflow);
		json_opt("first_nonfinite", a->nonfinite);
		x4t_outf("\"top4\":[");
		for (int j = 0; j < a->n_top; j++)
			x4t_outf("%s[%d,%.6g]", j ? "," : "", a->top_id[j], a->top_v[j]);
		x4t_outf("],\"error\":");
		if (a->failed)
			x4t_json_str(stdout, a->err.msg, strlen(a->err.msg));
		else
			x4t_outf("null");
		x4t_outf("}\n");
		return;
	}
	/* A failed arm's fields are what it saw before it failed, '-' if none. */
	const char *none = a->failed ? "-" : "none";
	x4t_outf("# %s\t%s\t%s\t%s\t%s\t", a->name, a->prec == X4_PREC_F64 ? "f64" : "f32",
	       x4_resid_name(a->resid), a->overflow[0] ? a->overflow : none,
	       a->nonfinite[0] ? a->nonfinite : none);
	for (int j = 0; j < a->n_top; j++)
		x4t_outf("%s%d:%.4f", j ? "," : "", a->top_id[j], a->top_v[j]);
	x4t_outf("%s\n", a->n_top ? "" : "none");
}

static void magnitude(const float *v, int n, double *max, double *rms)
{
	int bad;
	reduce(v, n, max, rms, &bad);
}

/* --replay: the block's MoE in float64 beside the trunk's own output. */
static int replay(const x4_model *m, const struct arm *a, int block, bool json, x4_err *e)
{
	int D = a->n_embd, k = a->n_used;
	x4_moe_replay r, rf;
	double *y = malloc((size_t)D * sizeof *y);
	if (!y)
		return x4_err_set(e, X4_ENOMEM, "out of memory for the replay");
	int rc = x4_moe_replay_block(m, block, a->cap_in, NULL, &r, y, e);
	if (rc) {
		free(y);
		return rc;
	}
	int trunk_sel[X4_REPLAY_MAX_USED];
	memcpy(trunk_sel, a->cap_experts, (size_t)k * sizeof *trunk_sel);
	qsort(trunk_sel, (size_t)k, sizeof *trunk_sel, cmp_int);
	bool agree = r.n_used == k && !memcmp(trunk_sel, r.experts, (size_t)k * sizeof *trunk_sel);
	/* A near tie can route differently in float64; the output is then
	 * compared on the trunk's own experts so that like meets like. */
	const x4_moe_replay *cmp = &r;
	if (!agree) {
		if ((rc = x4_moe_replay_block(m, block, a->cap_in, trunk_sel, &rf, y, e))) {
			free(y);
			return rc;
		}
		cmp = &rf;
	}
	double t_max, t_rms, diff = 0;
	magnitude(a->cap_out, D, &t_max, &t_rms);
	for (int i = 0; i < D; i++)
		diff = fmax(diff, fabs(y[i] - (double)a->cap_out[i]));
	double rel = t_max > 0 ? diff / t_max : diff;
	free(y);
	if (json) {
		x4t_outf("{\"replay_block\":%d,\"router_agrees\":%s,\"experts\":[", block,
		       agree ? "true" : "false");
		for (int j = 0; j < r.n_used; j++)
			x4t_outf("%s{\"id\":%d,\"weight\":%.6g,\"out_max\":%.6g,\"out_rms\":%.6g}",
			       j ? "," : "", r.experts[j], r.weight[j], r.out_max[j], r.out_rms[j]);
		x4t_outf("],\"shared_max\":%.6g,\"shared_rms\":%.6g,\"y_max\":%.6g,\"y_rms\":%.6g,"
		       "\"trunk_y_max\":", r.shared_max, r.shared_rms, cmp->y_max, cmp->y_rms);
		put_num(t_max, true);
		x4t_outf(",\"trunk_y_rms\":");
		put_num(t_rms, true);
		x4t_outf(",\"rel_err\":");
		put_num(rel, true);
		x4t_outf("}\n");
		return 0;
	}
	x4t_outf("# replay of block %d: its MoE in float64 from the dequantized weights, on the %s "
	       "arm's captured FFN input\n", block, a->name);
	x4t_outf("# expert\tweight\tout_max\tout_rms\n");
	for (int j = 0; j < r.n_used; j++)
		x4t_outf("# %d\t%.4f\t%.4g\t%.4g\n", r.experts[j], r.weight[j], r.out_max[j],
		       r.out_rms[j]);
	if (x4_model_config(m)->n_expert_shared > 0)
		x4t_outf("# shared\t1\t%.4g\t%.4g\n", r.shared_max, r.shared_rms);
	x4t_outf("# y_replay\t-\t%.4g\t%.4g\n", cmp->y_max, cmp->y_rms);
	x4t_outf("# y_trunk\t-\t%.4g\t%.4g\n", t_max, t_rms);
	x4t_outf("# trunk experts: ");
	for (int j = 0; j < k; j++)
		x4t_outf("%s%d", j ? "," : "", trunk_sel[j]);
	x4t_outf(" (%s the float64 router)\n", agree ? "the same as" : "differ from");
	x4t_outf("# replay_vs_trunk: max |y_replay - y_trunk| / max |y_trunk| = %.3g\n", rel);
	return 0;
}

/* Why the f32 arm is not finite, from what the table saw before it. */
static void explain_nonfinite(const struct arm *a, int n_block)
{
	static const char *sub[2] = {"attn", "ffn"};
	double before = 0; /* the largest stream magnitude up to the row before */
	bool any_before = false;
	for (int i = 0; i < n_block * 2; i++) {
		const struct rowstat *r = &a->rows[i];
		if (!r->seen)
			continue;
		if (r->nonfinite[0]) {
			if (!any_before)
				x4t_warn("the f32 arm went non-finite in block %d's %s, the "
					"first sublayer it saw (%s first): a weight of the embedding or of "
					"that sublayer is not finite, or its arithmetic overflows fp32; "
					"not the residual's width", i / 2, sub[i % 2], r->nonfinite);
			else if (before > 1e37)
				x4t_warn("the f32 arm overflowed fp32 at block %d's %s "
					"(%s first): the streams had reached %.3g before it, near "
					"fp32's 3.4e38; the table shows where they grew", i / 2,
					sub[i % 2], r->nonfinite, before);
			else
				x4t_warn("the f32 arm went non-finite at block %d's %s "
					"(%s first) while the streams before it were at most %.3g, far "
					"inside fp32's range: that sublayer made the value itself (a "
					"weight that is not finite, or arithmetic that overflows fp32), "
					"not the residual's width", i / 2, sub[i % 2], r->nonfinite,
					before);
			return;
		}
		for (int s = 0; s < a->n_hc; s++)
			before = fmax(before, r->s_max[s]);
		any_before = true;
	}
	x4t_warn("the f32 arm's streams stayed finite (at most %.3g) but its "
		"logits are not: the output norm or the head's weights are not finite", before);
}

/* --arms: the residual widths, each once, into arms[]; their count. */
static int parse_arms(const char *list_arg, struct arm *arms)
{
	char list[64];
	int n = 0;
	if (strlen(list_arg) >= sizeof list)
		x4t_usage_error("--arms: expected a list of f32, f16, bf16, got '%s'", list_arg);
	strcpy(list, list_arg);
	char *save = NULL;
	for (char *w = strtok_r(list, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		int resid = strcmp(w, "f32") == 0 ? X4_RESID_F32 : strcmp(w, "f16") == 0
			? X4_RESID_F16 : strcmp(w, "bf16") == 0 ? X4_RESID_BF16 : -1;
		if (resid < 0)
			x4t_usage_error("--arms: expected a list of f32, f16, bf16, got '%s'", list_arg);
		for (int k = 0; k < n; k++)
			if (arms[k].resid == resid)
				x4t_usage_error("--arms: an arm is named twice in '%s'", list_arg);
		arms[n].resid = resid;
		arms[n++].name = x4_resid_name(resid);
	}
	if (!n)
		x4t_usage_error("--arms: expected a list of f32, f16, bf16, got '%s'", list_arg);
	return n;
}

int main(int argc, char **argv)
{
	x4t_prog = PROG;
	enum { O_TOK = 256, O_TOKENS, O_ARMS, O_REPLAY, O_JSON, O_VERSION };
	static const struct option lo[] = {
		{"model", required_argument, 0, 'm'},
		{"tokenizer", required_argument, 0, O_TOK},
		{"prompt", required_argument, 0, 'p'},
		{"file", required_argument, 0, 'f'},
		{"tokens", required_argument, 0, O_TOKENS},
		{"arms", required_argument, 0, O_ARMS},
		{"replay", required_argument, 0, O_REPLAY},
		/* of the shared request and load options, the ones an arm does not set */
		{"device", required_argument, 0, X4T_O_DEVICE},
		{"max-model-len", required_argument, 0, X4T_O_MAXLEN},
		{"threads", required_argument, 0, X4T_O_THREADS},
		{"json", no_argument, 0, O_JSON},
		{"help", no_argument, 0, 'h'},
		{"version", no_argument, 0, O_VERSION},
		{0, 0, 0, 0},
	};
	const char *model = NULL, *tokdir = NULL, *prompt = NULL, *file = NULL, *tokens = NULL;
	const char *arm_list = "f32,f16,bf16";
	int replay_block = -1;
	bool json = false;
	x4_trunk_opts base;
	x4_trunk_opts_default(&base);
	base.device = -1;
	int c;
	while ((c = getopt_long(argc, argv, "m:p:f:h", lo, NULL)) != -1) {
		if (x4t_trunk_opt(c, optarg, &base) || x4t_load_opt(c, optarg, &base))
			continue;
		switch (c) {
		case 'm': model = optarg; break;
		case O_TOK: tokdir = optarg; break;
		case 'p': prompt = optarg; break;
		case 'f': file = optarg; break;
		case O_TOKENS: tokens = optarg; break;
		case O_ARMS: arm_list = optarg; break;
		case O_REPLAY: replay_block = (int)x4t_long(optarg, 0, INT_MAX, "--replay"); break;
		case O_JSON: json = true; break;
		case 'h':
			usage(stdout);
			return x4t_out_done("the help");
		case O_VERSION:
			x4t_outf(PROG " %s (commit %s, CUDA runtime %s)\n", x4_version(), x4_commit(),
				 x4_cuda_runtime());
			return x4t_out_done("the version");
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc)
		x4t_usage_error("unexpected argument '%s'", argv[optind]);
	if (!!prompt + !!file + !!tokens > 1)
		x4t_usage_error("give the input once: -p TEXT, -f FILE or --tokens IDS");
	if (!prompt && !file && !tokens && isatty(STDIN_FILENO))
		x4t_usage_error("no input: give -p TEXT, -f FILE, --tokens IDS or the prompt on stdin");

	/* The arms, then the float64 reference last. */
	struct arm arms[4];
	memset(arms, 0, sizeof arms);
	int n_arms = parse_arms(arm_list, arms);
	arms[n_arms].name = "f64";
	arms[n_arms].resid = X4_RESID_F32;
	arms[n_arms].prec = X4_PREC_F64;
	int f32_arm = -1;
	for (int k = 0; k < n_arms; k++)
		if (arms[k].resid == X4_RESID_F32)
			f32_arm = k;
	if (replay_block >= 0 && f32_arm < 0)
		x4t_usage_error("--replay replays on the f32 arm's activation: add f32 to --arms");

	/* Everything the command line holds is checked before the model opens. */
	x4_err e = {0};
	size_t n_raw = 0, text_len = 0;
	int32_t *raw = NULL;
	char *text = NULL;
	if (tokens) {
		x4t_ids(tokens, &raw, &n_raw);
	} else if (prompt) {
		if (!(text = strdup(prompt)))
			x4t_die("out of memory");
		text_len = strlen(text);
	} else {
		text = x4t_prompt_read(file, &text_len);
		if (!file && !text_len) /* a script's </dev/null: no input was given */
			x4t_usage_error("no input: stdin is empty; give -p TEXT, -f FILE or --tokens IDS");
	}

	char defmodel[4096];
	if (!model) {
		x4t_default_model(defmodel, sizeof defmodel);
		model = defmodel;
	}
	x4_paths paths;
	x4_session *s = NULL, *s64 = NULL; /* the arms', and the float64 arm's on the CPU */
	int32_t *ids = NULL;
	size_t n_ids = 0;
	int status = 1;
	if (x4_paths_resolve(model, tokdir, &paths, &e) || x4_session_open(&s, &paths, &e)) {
		x4t_warn("%s%s", e.msg, x4t_default_model_hint(model, defmodel));
		goto done;
	}
	const x4_model *m = x4_session_model(s);
	const x4_config *cfg = x4_model_config(m);
	if (cfg->n_hc > MAX_HC || cfg->n_expert_used > X4_REPLAY_MAX_USED) {
		x4t_warn("%d streams and %d experts a token: this tool handles at most %d and %d",
			 cfg->n_hc, cfg->n_expert_used, MAX_HC, X4_REPLAY_MAX_USED);
		goto done;
	}
	if (replay_block >= 0 && (replay_block < cfg->n_dense || replay_block >= cfg->n_block)) {
		x4t_warn("--replay %d: not an MoE block; this model's MoE blocks are %d..%d (see "
			 PROG " -h)", replay_block, cfg->n_dense, cfg->n_block - 1);
		status = 2;
		goto done;
	}
	int max_ctx = x4_session_ctx(s, &base);
	if (max_ctx > cfg->n_ctx_train) {
		x4t_warn("--max-model-len %d: the model's context is 1 to %d positions (see " PROG
			 " -h)", max_ctx, cfg->n_ctx_train);
		status = 2;
		goto done;
	}
	x4_request req = { .ids = raw, .n_ids = n_raw, .text = text, .text_len = text_len };
	if (x4_session_tokenize(s, &req, &ids, &n_ids, &e)) {
		x4t_warn("%s%s", tokens ? "" : "cannot tokenize the prompt: ", e.msg);
		goto done;
	}
	if (!n_ids) {
		x4t_warn("the prompt has no tokens");
		goto done;
	}
	if (n_ids > (size_t)max_ctx) {
		if (max_ctx < cfg->n_ctx_train)
			x4t_warn("the prompt has %zu tokens and the cache holds %d positions "
				 "(--max-model-len%s): raise --max-model-len, up to the model's context "
				 "of %d, or shorten the prompt", n_ids, max_ctx,
				 base.max_ctx ? "" : ", by default min(context, 4096)", cfg->n_ctx_train);
		else
			x4t_warn("the prompt has %zu tokens and the model's context is %d positions: "
				 "shorten the prompt", n_ids, cfg->n_ctx_train);
		goto done;
	}
	base.max_ctx = max_ctx;

	/* An arm that fails is reported and the others still run: what they
	 * saw is printed either way. */
	bool any_failed = false;
	for (int k = 0; k <= n_arms; k++) {
		struct arm *a = &arms[k];
		a->n_embd = cfg->n_embd;
		a->n_hc = cfg->n_hc;
		a->n_used = cfg->n_expert_used;
		a->n_block = cfg->n_block;
		a->n_vocab = cfg->n_vocab;
		a->capture_block = -1;
		a->rows = calloc((size_t)cfg->n_block * 2, sizeof *a->rows);
		a->logits = malloc((size_t)cfg->n_vocab * sizeof *a->logits);
		if (!a->rows || !a->logits) {
			x4t_warn("out of memory");
			goto done;
		}
		if (k == f32_arm && replay_block >= 0) {
			a->capture_block = replay_block;
			a->cap_in = malloc((size_t)cfg->n_embd * sizeof *a->cap_in);
			a->cap_out = malloc((size_t)cfg->n_embd * sizeof *a->cap_out);
			if (!a->cap_in || !a->cap_out) {
				x4t_warn("out of memory");
				goto done;
			}
		}
		/* A session is one device: the float64 arm on the CPU needs its own
		 * when the others ran on a GPU (the CPU trunk reads the mapped
		 * weights in place, so it costs no second copy). */
		int rc = 0;
		if (k == n_arms && base.device >= 0)
			rc = x4_session_open(&s64, &paths, &a->err);
		if (rc || run_arm(s64 ? s64 : s, &base, a, ids, n_ids, &a->err)) {
			x4t_warn("the %s arm: %s", a->name, a->err.msg);
			a->failed = any_failed = true;
		}
		summarize(a, cfg->n_block, cfg->n_vocab);
	}

	print_table(arms, n_arms, cfg->n_block, json);
	if (!json)
		x4t_outf("# arm\tprec\tresid\tfirst_fp16_overflow\tfirst_nonfinite\ttop4\n");
	for (int k = 0; k <= n_arms; k++)
		print_summary(&arms[k], json);
	if (f32_arm >= 0) {
		/* Two empty lists are not a match: with no finite logits on either
		 * side there is nothing to compare. */
		const struct arm *a = &arms[f32_arm], *r = &arms[n_arms];
		bool known = a->n_top > 0 && r->n_top > 0;
		bool same = known && a->n_top == r->n_top &&
			    !memcmp(a->top_id, r->top_id, (size_t)a->n_top * sizeof *a->top_id);
		if (json)
			x4t_outf("{\"f32_top4_ids_equal_f64\":%s}\n", !known ? "null" : same ? "true" : "false");
		else
			x4t_outf("# f32_top4_ids_equal_f64: %s\n", !known ? "n/a" : same ? "yes" : "no");
	}
	/* Provenance: what is needed to trust the table later. */
	char device[32];
	x4t_device_name(base.device, device, sizeof device);
	if (json) {
		x4t_outf("{\"model\":");
		x4t_json_str(stdout, paths.gguf, strlen(paths.gguf));
		x4t_outf(",\"tokenizer_dir\":");
		if (paths.tokdir[0])
			x4t_json_str(stdout, paths.tokdir, strlen(paths.tokdir));
		else
			x4t_outf("null");
		x4t_outf(",\"fingerprint\":\"%s\",\"commit\":\"%s\",\"tokens\":[",
			 x4_model_fingerprint(m), x4_commit());
	} else {
		x4t_outf("# model %s fingerprint %s commit %s tokenizer_dir %s tokens ", paths.gguf,
			 x4_model_fingerprint(m), x4_commit(), paths.tokdir[0] ? paths.tokdir : "-");
	}
	for (size_t i = 0; i < n_ids; i++)
		x4t_outf("%s%d", i ? "," : "", ids[i]);
	x4t_outf(json ? "],\"device\":\"%s\"}\n" : " device %s\n", device);
	status = any_failed ? 1 : 0;
	if (replay_block >= 0 && !arms[f32_arm].failed) {
		const struct arm *a = &arms[f32_arm];
		if (!a->captured) {
			x4t_warn("--replay %d: the trunk reported no MoE routing for that block",
				 replay_block);
			status = 1;
		} else if (replay(m, a, replay_block, json, &e)) {
			x4t_warn("--replay %d: %s", replay_block, e.msg);
			status = 1;
		}
	}
	if (x4t_out_done(json ? "the JSON lines" : "the table")) {
		status = 1;
	} else if (f32_arm >= 0 && !arms[f32_arm].failed && arms[f32_arm].nonfinite[0]) {
		explain_nonfinite(&arms[f32_arm], cfg->n_block);
		status = 1;
	}
done:
	for (int k = 0; k <= n_arms; k++) {
		free(arms[k].rows);
		free(arms[k].logits);
		free(arms[k].cap_in);
		free(arms[k].cap_out);
	}
	free(ids);
	free(raw);
	free(text);
	x4_session_close(s64);
	x4_session_close(s);
	return status;
}
