/*
 * x4-synth - write a synthetic xing4_0 checkpoint with the released layout:
 * DIR/xing4_0-<preset>.gguf and the tokenizer folder the release ships
 * beside it (tokenizer.model, config.json, tokenizer_config.json,
 * chat_template.jinja).  See man/x4-synth.1.
 */
#include "x4.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROG "x4-synth"
#define MAX_LOUD 16
#define MAX_WRITTEN 8
#define MAX_DIRS 32

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --preset tiny|small|full [--seed N] [--loud BLOCK:EXPERT:FACTOR]\n"
		"                [--threads N] -o DIR\n"
		"Write DIR/xing4_0-<preset>.gguf and its tokenizer folder.\n"
		"  -p, --preset NAME     tiny (~35 MB), small (~1 GB) or full (20.1 GB, as released)\n"
		"  -s, --seed N          weight seed (default 1); the bytes depend on it alone\n"
		"  -l, --loud B:E:F      multiply expert E of MoE block B by F (gate, up and down\n"
		"                        block scales) and force it into the top-k; repeatable\n"
		"  -t, --threads N       worker threads (default: all CPUs)\n"
		"  -o, --output DIR      the folder to write (created if missing)\n"
		"  -h, --help            this text\n"
		"      --version         version, commit and CUDA runtime\n");
}

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, PROG ": ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n" PROG ": try '" PROG " -h'\n");
	return 2;
}

/* ---- what this run has written, so a failure can take it back ---- */

static char written[MAX_WRITTEN][4200];
static int n_written;
static char made_dirs[MAX_DIRS][4096];
static int n_made_dirs;
/* The GGUF writer's temporary name: removed if a signal ends the run. */
static char gguf_tmp[4400];

static void undo(void)
{
	for (int i = n_written - 1; i >= 0; i--)
		unlink(written[i]);
	for (int i = n_made_dirs - 1; i >= 0; i--)
		rmdir(made_dirs[i]);
}

static void on_signal(int sig)
{
	/* async-signal-safe only: unlink, rmdir, _exit */
	if (gguf_tmp[0])
		unlink(gguf_tmp);
	undo();
	_exit(128 + sig);
}

static int make_dirs(const char *dir)
{
	char p[4096];
	if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
		return ENAMETOOLONG;
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, 0755) == 0) {
			if (n_made_dirs < MAX_DIRS)
				snprintf(made_dirs[n_made_dirs++], sizeof made_dirs[0], "%s", p);
		} else if (errno != EEXIST) {
			return errno;
		}
		*s = c;
		if (c == '\0')
			break;
	}
	struct stat st;
	if (stat(dir, &st) != 0)
		return errno;
	return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

/* Temporary name, then rename: a reader never sees half a file. */
static int write_file(const char *dir, const char *name, const void *data, size_t len)
{
	char path[4200], tmp[4300];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	FILE *f = fopen(tmp, "wb");
	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", tmp, strerror(errno));
		return 1;
	}
	bool ok = fwrite(data, 1, len, f) == len;
	ok = (fflush(f) == 0) && ok;
	ok = (fsync(fileno(f)) == 0) && ok;
	int err = errno;
	ok = (fclose(f) == 0) && ok;
	if (!ok || rename(tmp, path) != 0) {
		if (ok)
			err = errno;
		fprintf(stderr, PROG ": writing %s: %s\n", path, strerror(err));
		unlink(tmp);
		return 1;
	}
	if (n_written < MAX_WRITTEN)
		snprintf(written[n_written++], sizeof written[0], "%s", path);
	return 0;
}

/* ---- JSON, by hand: a few dozen fixed keys ---- */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p == '\n')
			fputs("\\n", f);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

/* A float that reads back as a float in Python (2.0, not 2). */
static void json_num(FILE *f, double v)
{
	char b[64];
	snprintf(b, sizeof b, "%.9g", v);
	fputs(b, f);
	if (!strpbrk(b, ".eEn"))
		fputs(".0", f);
}

static char *config_json(const x4_config *c, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	struct { const char *k; long v; } ints[] = {
		{ "hidden_size", c->n_embd },
		{ "num_hidden_layers", c->n_block },
		{ "num_attention_heads", c->n_head },
		{ "num_key_value_heads", c->n_head },
		{ "q_lora_rank", c->q_lora },
		{ "kv_lora_rank", c->kv_lora },
		{ "qk_nope_head_dim", c->d_nope },
		{ "qk_rope_head_dim", c->d_rope },
		{ "v_head_dim", c->d_v },
		{ "n_routed_experts", c->n_expert },
		{ "num_experts_per_tok", c->n_expert_used },
		{ "n_shared_experts", c->n_expert_shared },
		{ "moe_intermediate_size", c->n_ff_exp },
		{ "intermediate_size", c->n_ff },
		{ "first_k_dense_replace", c->n_dense },
		{ "n_group", 1 },
		{ "topk_group", 1 },
		{ "hc_mult", c->n_hc },
		{ "hc_sinkhorn_iters", c->sinkhorn_iters },
		{ "max_position_embeddings", c->n_ctx_train },
		{ "vocab_size", c->n_vocab },
		{ "bos_token_id", c->bos_id },
		{ "eos_token_id", c->eos_id },
		{ "num_nextn_predict_layers", c->n_nextn },
	};
	fputs("{\n  \"architectures\": [\"Xing4_0ForCausalLM\"],\n  \"model_type\": \"xing4_0\",\n", f);
	for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
		fprintf(f, "  \"%s\": %ld,\n", ints[i].k, ints[i].v);
	struct { const char *k; double v; } nums[] = {
		{ "routed_scaling_factor", c->expert_scale },
		{ "hc_eps", c->hc_eps },
		{ "mhc_h_res_clamp_min", c->clamp_min },
		{ "mhc_h_res_clamp_max", c->clamp_max },
		{ "rms_norm_eps", c->rms_eps },
		{ "rope_theta", c->rope_base },
	};
	for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
		fprintf(f, "  \"%s\": ", nums[i].k);
		json_num(f, nums[i].v);
		fputs(",\n", f);
	}
	fprintf(f, "  \"norm_topk_prob\": %s,\n", c->expert_norm ? "true" : "false");
	fputs("  \"scoring_func\": \"sigmoid\",\n  \"topk_method\": \"noaux_tc\",\n"
	      "  \"hidden_act\": \"silu\",\n  \"tie_word_embeddings\": false,\n"
	      "  \"torch_dtype\": \"bfloat16\",\n", f);
	/* yarn_log_multiplier = 0.1 x mscale_all_dim (spec 5) */
	fputs("  \"rope_scaling\": {\n    \"type\": \"yarn\",\n    \"factor\": ", f);
	json_num(f, c->yarn_factor);
	fprintf(f, ",\n    \"original_max_position_embeddings\": %d,\n    \"beta_fast\": ",
		c->yarn_orig_ctx);
	json_num(f, c->yarn_beta_fast);
	fputs(",\n    \"beta_slow\": ", f);
	json_num(f, c->yarn_beta_slow);
	fputs(",\n    \"mscale\": 1.0,\n    \"mscale_all_dim\": ", f);
	json_num(f, c->yarn_log_mult / 0.1);
	fputs(",\n    \"rope_interleave\": true\n  }\n}\n", f);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static char *tokenizer_config_json(const x4_config *c, const x4_vocab *v, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	fputs("{\n  \"tokenizer_class\": \"LlamaTokenizer\",\n"
	      "  \"add_bos_token\": false,\n  \"add_eos_token\": false,\n"
	      "  \"clean_up_tokenization_spaces\": false,\n", f);
	fputs("  \"bos_token\": ", f);
	json_str(f, v->pieces[v->bos_id]);
	fputs(",\n  \"eos_token\": ", f);
	json_str(f, v->pieces[v->eos_id]);
	fputs(",\n  \"unk_token\": ", f);
	json_str(f, v->pieces[v->unk_id]);
	fprintf(f, ",\n  \"model_max_length\": %d,\n", c->n_ctx_train);
	/* The special pieces are the control/unknown ones; the reserved
	 * padding ids are UNUSED and stay out of the list. */
	/* Xing4's own markers (<_system>, <think> ...), not the base
	 * vocabulary's [control_N] pieces, which stay in the decoder only. */
	fputs("  \"additional_special_tokens\": [", f);
	const char *sep = "";
	for (int i = 0; i < v->n; i++) {
		if (v->types[i] != X4_TOK_CONTROL || i == v->bos_id || i == v->eos_id ||
		    v->pieces[i][0] != '<')
			continue;
		fputs(sep, f);
		json_str(f, v->pieces[i]);
		sep = ", ";
	}
	fputs("],\n  \"added_tokens_decoder\": {", f);
	sep = "\n";
	for (int i = 0; i < v->n; i++) {
		if (v->types[i] != X4_TOK_CONTROL && v->types[i] != X4_TOK_UNKNOWN)
			continue;
		fprintf(f, "%s    \"%d\": {\"content\": ", sep, i);
		json_str(f, v->pieces[i]);
		fputs(", \"lstrip\": false, \"normalized\": false, \"rstrip\": false, "
		      "\"single_word\": false, \"special\": true}", f);
		sep = ",\n";
	}
	/* No chat_template key: HF reads chat_template.jinja beside this file. */
	fputs("\n  }\n}\n", f);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* ---- progress ---- */

struct progress {
	double t0, last;
};

static void on_progress(void *arg, uint64_t done, uint64_t total)
{
	struct progress *p = arg;
	double now = x4_now();
	if (now - p->last < 0.2 && done < total)
		return;
	p->last = now;
	double mb = (double)done / 1e6, secs = now - p->t0;
	fprintf(stderr, "\r" PROG ": %3.0f%%  %.0f / %.0f MB  %.0f MB/s ",
		total ? 100.0 * (double)done / (double)total : 100.0, mb, (double)total / 1e6,
		secs > 0 ? mb / secs : 0.0);
}

/* ---- the GGUF ---- */

static int write_gguf(const char *path, const char *preset, const x4_config *c,
		      const x4_vocab *v, const x4_synth_opts *o, int *n_tensors,
		      uint64_t *data_bytes, x4_err *e)
{
	x4_tensor_spec *t;
	int n;
	int rc = x4_layout(c, &t, &n, e);
	if (rc)
		return rc;
	x4_gguf_writer *w;
	if ((rc = x4_gguf_writer_open(&w, path, e))) {
		free(t);
		return rc;
	}
	char name[128], loud[512] = "";
	snprintf(name, sizeof name, "xing4_0-%s (x4-synth, seed %llu)", preset,
		 (unsigned long long)o->seed);
	for (int i = 0; i < o->n_loud; i++)
		snprintf(loud + strlen(loud), sizeof loud - strlen(loud), "%s%d:%d:%g",
			 i ? "," : "", o->loud[i].block, o->loud[i].expert, (double)o->loud[i].factor);
	x4_config_write(w, c);
	x4_gguf_writer_kv_str(w, "general.name", name);
	x4_gguf_writer_kv_u32(w, "general.file_type", 25); /* MOSTLY_IQ4_NL */
	x4_gguf_writer_kv_u32(w, "general.quantization_version", 2);
	x4_gguf_writer_kv_u32(w, "general.alignment", 32);
	x4_gguf_writer_kv_str(w, "x4.synth.preset", preset);
	x4_gguf_writer_kv_u64(w, "x4.synth.seed", o->seed);
	x4_gguf_writer_kv_str(w, "x4.synth.loud", loud);
	x4_gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama");
	x4_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->pieces,
				  (uint64_t)v->n);
	x4_gguf_writer_kv_arr_f32(w, "tokenizer.ggml.scores", v->scores, (uint64_t)v->n);
	x4_gguf_writer_kv_arr_i32(w, "tokenizer.ggml.token_type", v->types, (uint64_t)v->n);
	x4_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", false);
	x4_gguf_writer_kv_bool(w, "tokenizer.ggml.add_eos_token", false);
	x4_gguf_writer_kv_bool(w, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
	x4_gguf_writer_kv_bool(w, "tokenizer.ggml.remove_extra_whitespaces",
			       v->remove_extra_whitespaces);
	*data_bytes = 0;
	for (int i = 0; i < n; i++) {
		x4_gguf_writer_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne);
		*data_bytes += x4_type_bytes(t[i].type, t[i].ne[0] * t[i].ne[1] * t[i].ne[2]);
	}
	if ((rc = x4_gguf_writer_begin_data(w, e)) ||
	    (rc = x4_synth_weights(w, c, t, n, o, e))) {
		x4_gguf_writer_abort(w);
		free(t);
		return rc;
	}
	free(t);
	*n_tensors = n;
	return x4_gguf_writer_finish(w, e);
}

static int parse_loud(const char *s, x4_synth_loud *l)
{
	char *end;
	errno = 0;
	long b = strtol(s, &end, 10);
	if (end == s || *end != ':' || errno || b < 0 || b > 1 << 20)
		return -1;
	s = end + 1;
	long x = strtol(s, &end, 10);
	if (end == s || *end != ':' || errno || x < 0 || x > 1 << 20)
		return -1;
	s = end + 1;
	double f = strtod(s, &end);
	if (end == s || *end || errno || !isfinite(f) || f <= 0)
		return -1;
	l->block = (int)b;
	l->expert = (int)x;
	l->factor = (float)f;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "preset", required_argument, 0, 'p' },
		{ "seed", required_argument, 0, 's' },
		{ "loud", required_argument, 0, 'l' },
		{ "threads", required_argument, 0, 't' },
		{ "output", required_argument, 0, 'o' },
		{ "help", no_argument, 0, 'h' },
		{ "version", no_argument, 0, 'V' },
		{ 0, 0, 0, 0 },
	};
	const char *preset = NULL, *dir = NULL;
	x4_synth_loud loud[MAX_LOUD];
	x4_synth_opts o = { .seed = 1, .loud = loud };
	int opt;
	while ((opt = getopt_long(argc, argv, "p:s:l:t:o:h", opts, NULL)) != -1) {
		char *end;
		switch (opt) {
		case 'p':
			preset = optarg;
			break;
		case 's':
			errno = 0;
			o.seed = strtoull(optarg, &end, 0);
			if (end == optarg || *end || errno || optarg[0] == '-')
				return usage_error("--seed '%s' is not an unsigned integer", optarg);
			break;
		case 'l':
			if (o.n_loud == MAX_LOUD)
				return usage_error("at most 16 --loud experts (%s)", optarg);
			if (parse_loud(optarg, &loud[o.n_loud]))
				return usage_error("--loud '%s' is not BLOCK:EXPERT:FACTOR (e.g. 3:0:40)",
						   optarg);
			o.n_loud++;
			break;
		case 't': {
			errno = 0;
			long v = strtol(optarg, &end, 10);
			if (end == optarg || *end || errno || v < 1 || v > 1024)
				return usage_error("--threads '%s' is not a count in 1..1024", optarg);
			o.threads = (int)v;
			break;
		}
		case 'o':
			dir = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf(PROG " %s (commit %s, CUDA runtime %s)\n", x4_version(), x4_commit(),
			       x4_cuda_runtime());
			return 0;
		default:
			return usage_error("%s", "unknown option");
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!preset)
		return usage_error("%s", "--preset tiny|small|full is required");
	if (!dir || !*dir)
		return usage_error("%s", "-o DIR is required");

	x4_err e = { 0 };
	x4_config c;
	if (x4_config_preset(preset, &c, &e))
		return usage_error("%s", e.msg);
	for (int i = 0; i < o.n_loud; i++) {
		const x4_synth_loud *l = &loud[i];
		if (l->block < c.n_dense || l->block >= c.n_block_file || l->expert >= c.n_expert ||
		    l->factor > 1000.0f) {
			char m[256];
			snprintf(m, sizeof m, "--loud %d:%d:%g: the %s preset's MoE blocks are %d..%d, "
				 "its experts 0..%d, and FACTOR must be in (0, 1000]", l->block,
				 l->expert, (double)l->factor, preset, c.n_dense, c.n_block_file - 1,
				 c.n_expert - 1);
			return usage_error("%s", m);
		}
	}

	x4_vocab v;
	if (x4_vocab_xing4(c.n_vocab, &v, &e)) {
		fprintf(stderr, PROG ": the tokenizer: %s\n", e.msg);
		return 1;
	}
	if (v.bos_id != c.bos_id || v.eos_id != c.eos_id || v.unk_id != c.unk_id) {
		fprintf(stderr, PROG ": the vocabulary's bos/eos/unk ids %d/%d/%d differ from the "
			"preset's %d/%d/%d\n", v.bos_id, v.eos_id, v.unk_id, c.bos_id, c.eos_id,
			c.unk_id);
		x4_vocab_free(&v);
		return 1;
	}

	int err = make_dirs(dir);
	if (err) {
		fprintf(stderr, PROG ": cannot make the folder %s: %s\n", dir, strerror(err));
		undo();
		x4_vocab_free(&v);
		return 1;
	}
	char path[4200];
	snprintf(path, sizeof path, "%s/xing4_0-%s.gguf", dir, preset);
	snprintf(gguf_tmp, sizeof gguf_tmp, "%s.tmp.%ld", path, (long)getpid());
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);

	struct progress pr = { .t0 = x4_now() };
	if (isatty(STDERR_FILENO)) {
		o.progress = on_progress;
		o.progress_arg = &pr;
	}
	int n_tensors = 0;
	uint64_t data_bytes = 0;
	double t0 = x4_now();
	int rc = write_gguf(path, preset, &c, &v, &o, &n_tensors, &data_bytes, &e);
	double secs = x4_now() - t0;
	if (o.progress)
		fputs("\r\033[K", stderr);
	if (rc) {
		fprintf(stderr, PROG ": %s\n", e.msg);
		undo();
		x4_vocab_free(&v);
		return 1;
	}
	if (n_written < MAX_WRITTEN)
		snprintf(written[n_written++], sizeof written[0], "%s", path);
	gguf_tmp[0] = '\0';

	size_t len = 0;
	char *json = config_json(&c, &len);
	int bad = !json || write_file(dir, "config.json", json, len);
	free(json);
	json = bad ? NULL : tokenizer_config_json(&c, &v, &len);
	bad = bad || !json || write_file(dir, "tokenizer_config.json", json, len);
	free(json);
	bad = bad || write_file(dir, "tokenizer.model", v.model, v.model_len);
	const char *tmpl = x4_chat_template_jinja();
	bad = bad || write_file(dir, "chat_template.jinja", tmpl, strlen(tmpl));
	x4_vocab_free(&v);
	if (bad) {
		fprintf(stderr, PROG ": the tokenizer folder could not be written; removed what "
			"this run wrote in %s\n", dir);
		undo();
		return 1;
	}
	fprintf(stderr, PROG ": wrote %s: %d tensors, %llu bytes of tensor data, %.2f s, "
		"%.2f GB/s\n", path, n_tensors, (unsigned long long)data_bytes, secs,
		secs > 0 ? (double)data_bytes / secs / 1e9 : 0.0);
	return 0;
}
