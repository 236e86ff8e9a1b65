/*
 * x4-synth - write a synthetic xing4_0 checkpoint with the released layout:
 * DIR/xing4_0-<preset>.gguf and the tokenizer folder the release ships
 * beside it (tokenizer.model, config.json, tokenizer_config.json,
 * chat_template.jinja).  See man/x4-synth.1.
 */
#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <strings.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROG "x4-synth"
#define MAX_LOUD 16
#define MAX_DIRS 32

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --preset tiny|small|full [--seed N] [--loud BLOCK:EXPERT:FACTOR]\n"
		"                [--expert-type iq4_nl|q8_0] [--threads N] -o DIR\n"
		"Write DIR/xing4_0-<preset>.gguf and its tokenizer folder.\n"
		"  -p, --preset NAME     tiny (~35 MB), small (~1 GB) or full (20.1 GB, as released)\n"
		"  -s, --seed N          weight seed (default 1); the bytes depend on it alone\n"
		"  -l, --loud B:E:F      multiply expert E of MoE block B (a trunk block, not\n"
		"                        NextN) by F (gate, up and down block scales) and force\n"
		"                        it into the top-k; repeatable\n"
		"  -e, --expert-type T   the routed experts' block format: iq4_nl (default, as\n"
		"                        released) or q8_0 (llama.cpp's 8-bit blocks)\n"
		"  -t, --threads N       worker threads (default: all CPUs)\n"
		"  -o, --output DIR      the folder to write (created if missing); its files are\n"
		"                        replaced only once every new one is complete\n"
		"  -h, --help            this text\n"
		"      --version         version, commit and CUDA runtime\n");
}

/* ---- the transaction ----
 *
 * A run leaves DIR as it found it unless it succeeds.  Every file is
 * written into a private staging folder inside DIR (so the moves below stay
 * on one file system), and only when all of them are complete are they
 * moved into place: each old file is kept as a hard link (or moved) into
 * the staging folder first, so a failed move, or a signal, puts every old
 * file back.  The moves run with SIGINT, SIGTERM and SIGHUP blocked; a
 * signal during the long writes before them removes the staging folder.
 * Everything here is fixed-size and static because the signal handler
 * reads it (unlink, rename and rmdir only).  Worker threads exist only
 * inside x4_synth_weights, while the GGUF's temporary file is the one file
 * open, so a handler running on one of them races with no file being made. */

enum { F_GGUF, F_CONFIG, F_TOK_CONFIG, F_TOK_MODEL, F_TEMPLATE, N_FILES };

static char made_dirs[MAX_DIRS][4096]; /* folders of -o DIR this run created */
static volatile sig_atomic_t n_made_dirs;
static char stage[4200];               /* DIR/.x4-synth.PID */
static volatile sig_atomic_t stage_made;
static char gguf_tmp[4400 + 32];       /* the GGUF writer's temporary name */
static char staged[N_FILES][4400];     /* stage/NAME: the new file */
static char target[N_FILES][4400];     /* DIR/NAME: where it goes */
static char backup[N_FILES][4400];     /* stage/NAME.old: the file it replaces */
static volatile sig_atomic_t has_backup[N_FILES], installed[N_FILES];
static volatile sig_atomic_t committed; /* the old files are gone: nothing to undo */

static void rollback(void)
{
	if (committed)
		return;
	for (int i = N_FILES - 1; i >= 0; i--) {
		if (has_backup[i])
			rename(backup[i], target[i]); /* the old file back, over the new one */
		else if (installed[i])
			unlink(target[i]);
		has_backup[i] = installed[i] = 0;
	}
	for (int i = 0; i < N_FILES; i++)
		if (staged[i][0])
			unlink(staged[i]);
	if (gguf_tmp[0])
		unlink(gguf_tmp);
	if (stage_made)
		rmdir(stage);
	stage_made = 0;
	for (int i = n_made_dirs - 1; i >= 0; i--)
		rmdir(made_dirs[i]);
	n_made_dirs = 0;
}

static void on_signal(int sig)
{
	rollback();
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
			if (n_made_dirs < MAX_DIRS) {
				snprintf(made_dirs[n_made_dirs], sizeof made_dirs[0], "%s", p);
				n_made_dirs++;
			}
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

/* Each name in DIR is absent or a regular file that may be replaced:
 * checked before any work, so a 20 GB write is not spent on a refusal. */
static int check_targets(const char *dir, const char *const *names)
{
	for (int i = 0; i < N_FILES; i++) {
		char p[4400];
		struct stat st;
		snprintf(p, sizeof p, "%s/%s", dir, names[i]);
		if (lstat(p, &st) != 0) {
			if (errno == ENOENT || errno == ENOTDIR)
				continue;
			x4t_warn("%s: %s", p, strerror(errno));
			return 1;
		}
		if (!S_ISREG(st.st_mode)) {
			x4t_warn("%s is %s, not a file: " PROG " replaces only regular "
				"files; move it away or write to another folder with -o", p,
				S_ISDIR(st.st_mode) ? "a folder" : S_ISLNK(st.st_mode) ?
				"a symbolic link" : "something else");
			return 1;
		}
	}
	return 0;
}

static void sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd); /* some file systems cannot; the renames stand */
		close(fd);
	}
}

/* Move every staged file into place; on any failure put the old ones back.
 * Returns 0, or 1 with the message printed. */
static int commit(const char *dir)
{
	sigset_t sigs, old, pend;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, &old);
	int rc = 0;
	for (int i = 0; i < N_FILES && !rc; i++) {
		struct stat st;
		if (lstat(target[i], &st) == 0) {
			if (!S_ISREG(st.st_mode)) {
				x4t_warn("%s is no longer a regular file; nothing was "
					"replaced", target[i]);
				rc = 1;
				break;
			}
			/* A hard link keeps the old file where it is until the rename
			 * replaces it; a file system without links gets a move. */
			if (link(target[i], backup[i]) == 0 || rename(target[i], backup[i]) == 0) {
				has_backup[i] = 1;
			} else {
				x4t_warn("keeping %s aside as %s: %s", target[i],
					backup[i], strerror(errno));
				rc = 1;
				break;
			}
		}
		if (rename(staged[i], target[i]) != 0) {
			x4t_warn("moving %s to %s: %s", staged[i], target[i],
				strerror(errno));
			rc = 1;
			break;
		}
		installed[i] = 1;
		staged[i][0] = '\0';
	}
	/* A signal that came during the moves undoes them, as one before would. */
	sigpending(&pend);
	bool signalled = sigismember(&pend, SIGINT) || sigismember(&pend, SIGTERM) ||
			 sigismember(&pend, SIGHUP);
	if (rc || signalled) {
		rollback();
		pthread_sigmask(SIG_SETMASK, &old, NULL); /* a pending signal exits here */
		return 1;
	}
	committed = 1;
	for (int i = 0; i < N_FILES; i++)
		if (has_backup[i])
			unlink(backup[i]);
	rmdir(stage);
	sync_dir(dir);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return 0;
}

/* One whole file into the staging folder; nobody else reads it there. */
static int write_staged(int i, const void *data, size_t len)
{
	FILE *f = fopen(staged[i], "wb");
	if (!f) {
		x4t_warn("%s: %s", staged[i], strerror(errno));
		return 1;
	}
	bool ok = fwrite(data, 1, len, f) == len;
	ok = (fflush(f) == 0) && ok;
	ok = (fsync(fileno(f)) == 0) && ok;
	int err = errno;
	ok = (fclose(f) == 0) && ok;
	if (!ok) {
		x4t_warn("writing %s: %s", staged[i], strerror(err ? err : errno));
		return 1;
	}
	return 0;
}

/* ---- JSON, by hand: a few dozen fixed keys ---- */

static void json_str(FILE *f, const char *s) { x4t_json_str(f, s, strlen(s)); }

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
	/* yarn_log_multiplier = 0.1 x mscale_all_dim (docs/gguf.md 4) */
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
		      const x4_vocab *v, const x4_synth_opts *o, int expert_type, int *n_tensors,
		      uint64_t *data_bytes, x4_err *e)
{
	x4_tensor_spec *t;
	int n;
	int rc = x4_layout(c, &t, &n, e);
	if (rc)
		return rc;
	for (int i = 0; i < n; i++) /* the routed experts in the format asked for */
		if (t[i].role == X4_ROLE_EXPERT)
			t[i].type = expert_type;
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
	/* ggml's file types: 25 MOSTLY_IQ4_NL, 7 MOSTLY_Q8_0 (the experts are most of the bytes) */
	x4_gguf_writer_kv_u32(w, "general.file_type", expert_type == X4_T_Q8_0 ? 7 : 25);
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

/* The folder (and its parents) made, the staging folder in it, and every
 * name of the transaction filled in.  1 with the message printed. */
static int make_stage(const char *dir, const char *const *names)
{
	int err = make_dirs(dir);
	if (err) {
		x4t_warn("cannot make the folder %s: %s", dir, strerror(err));
		return 1;
	}
	long pid = (long)getpid();
	if (snprintf(stage, sizeof stage, "%s/.x4-synth.%ld", dir, pid) >= (int)sizeof stage - 64) {
		x4t_warn("the folder name %.64s... is too long", dir);
		stage[0] = '\0';
		return 1;
	}
	for (int i = 0; i < N_FILES; i++) {
		snprintf(target[i], sizeof target[i], "%s/%s", dir, names[i]);
		snprintf(staged[i], sizeof staged[i], "%s/%s", stage, names[i]);
		snprintf(backup[i], sizeof backup[i], "%s/%s.old", stage, names[i]);
	}
	/* x4_gguf_writer_open's temporary name, for the signal handler */
	snprintf(gguf_tmp, sizeof gguf_tmp, "%s.tmp.%ld", staged[F_GGUF], pid);
	if (mkdir(stage, 0755) != 0) {
		x4t_warn("cannot make the staging folder %s: %s", stage,
			strerror(errno));
		return 1;
	}
	stage_made = 1;
	return 0;
}

/* The four files beside the GGUF, into the staging folder. */
static int write_tokenizer_folder(const x4_config *c, const x4_vocab *v)
{
	size_t len = 0;
	char *json = config_json(c, &len);
	bool oom = !json;
	int bad = oom || write_staged(F_CONFIG, json, len);
	free(json);
	json = bad ? NULL : tokenizer_config_json(c, v, &len);
	oom = oom || (!bad && !json);
	bad = bad || !json || write_staged(F_TOK_CONFIG, json, len);
	free(json);
	if (oom)
		x4t_warn("out of memory for the folder's JSON files");
	bad = bad || write_staged(F_TOK_MODEL, v->model, v->model_len);
	const char *tmpl = x4_chat_template_jinja();
	return bad || write_staged(F_TEMPLATE, tmpl, strlen(tmpl));
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
	x4t_prog = PROG;
	static const struct option opts[] = {
		{ "preset", required_argument, 0, 'p' },
		{ "seed", required_argument, 0, 's' },
		{ "loud", required_argument, 0, 'l' },
		{ "threads", required_argument, 0, 't' },
		{ "expert-type", required_argument, 0, 'e' },
		{ "output", required_argument, 0, 'o' },
		{ "help", no_argument, 0, 'h' },
		{ "version", no_argument, 0, 'V' },
		{ 0, 0, 0, 0 },
	};
	const char *preset = NULL, *dir = NULL;
	x4_synth_loud loud[MAX_LOUD];
	x4_synth_opts o = { .seed = 1, .loud = loud };
	int opt;
	int expert_type = X4_T_IQ4_NL;
	while ((opt = getopt_long(argc, argv, "p:s:l:t:e:o:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'p': preset = optarg; break;
		case 's': o.seed = x4t_u64(optarg, "--seed"); break;
		case 'l':
			if (o.n_loud == MAX_LOUD)
				x4t_usage_error("at most %d --loud experts (%s)", MAX_LOUD, optarg);
			if (parse_loud(optarg, &loud[o.n_loud]))
				x4t_usage_error("--loud '%s' is not BLOCK:EXPERT:FACTOR (e.g. 3:0:40)",
						optarg);
			o.n_loud++;
			break;
		case 't': o.threads = (int)x4t_long(optarg, 1, 1024, "--threads"); break;
		case 'e':
			if (!strcasecmp(optarg, "iq4_nl"))
				expert_type = X4_T_IQ4_NL;
			else if (!strcasecmp(optarg, "q8_0"))
				expert_type = X4_T_Q8_0;
			else
				x4t_usage_error("--expert-type '%s': use iq4_nl or q8_0", optarg);
			break;
		case 'o': dir = optarg; break;
		case 'h':
			usage(stdout);
			return x4t_out_done("the help");
		case 'V':
			printf(PROG " %s (commit %s, CUDA runtime %s)\n", x4_version(), x4_commit(),
			       x4_cuda_runtime());
			return x4t_out_done("the version");
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc)
		x4t_usage_error("unexpected argument '%s'", argv[optind]);
	if (!preset)
		x4t_usage_error("--preset tiny|small|full is required");
	if (!dir || !*dir)
		x4t_usage_error("-o DIR is required");

	x4_err e = { 0 };
	x4_config c;
	if (x4_config_preset(preset, &c, &e))
		x4t_usage_error("%s", e.msg);
	for (int i = 0; i < o.n_loud; i++) {
		const x4_synth_loud *l = &loud[i];
		/* The NextN block (n_block..) is MoE too, but no x4 trunk runs it. */
		if (l->block < c.n_dense || l->block >= c.n_block || l->expert >= c.n_expert ||
		    l->factor > 1000.0f)
			x4t_usage_error("--loud %d:%d:%g: the %s preset's MoE blocks are %d..%d (block "
					"%d is the NextN block, which x4 does not run), its experts "
					"0..%d, and FACTOR must be in (0, 1000]", l->block, l->expert,
					(double)l->factor, preset, c.n_dense, c.n_block - 1, c.n_block,
					c.n_expert - 1);
	}

	x4_vocab v;
	if (x4_vocab_xing4(c.n_vocab, &v, &e)) {
		x4t_warn("the tokenizer: %s", e.msg);
		return 1;
	}
	if (v.bos_id != c.bos_id || v.eos_id != c.eos_id || v.unk_id != c.unk_id) {
		x4t_warn("the vocabulary's bos/eos/unk ids %d/%d/%d differ from the "
			"preset's %d/%d/%d", v.bos_id, v.eos_id, v.unk_id, c.bos_id, c.eos_id,
			c.unk_id);
		x4_vocab_free(&v);
		return 1;
	}

	char gguf_name[64];
	snprintf(gguf_name, sizeof gguf_name, "xing4_0-%s.gguf", preset);
	const char *const names[N_FILES] = {
		[F_GGUF] = gguf_name, [F_CONFIG] = "config.json",
		[F_TOK_CONFIG] = "tokenizer_config.json", [F_TOK_MODEL] = "tokenizer.model",
		[F_TEMPLATE] = "chat_template.jinja",
	};
	if (check_targets(dir, names)) {
		x4_vocab_free(&v);
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	if (make_stage(dir, names)) {
		rollback();
		x4_vocab_free(&v);
		return 1;
	}

	struct progress pr = { .t0 = x4_now() };
	if (isatty(STDERR_FILENO)) {
		o.progress = on_progress;
		o.progress_arg = &pr;
	}
	int n_tensors = 0;
	uint64_t data_bytes = 0;
	double t0 = x4_now();
	int rc = write_gguf(staged[F_GGUF], preset, &c, &v, &o, expert_type, &n_tensors, &data_bytes, &e);
	double secs = x4_now() - t0;
	if (o.progress)
		fputs("\r\033[K", stderr);
	if (rc)
		x4t_warn("%s", e.msg);

	int bad = rc || write_tokenizer_folder(&c, &v);
	x4_vocab_free(&v);
	if (bad || commit(dir)) {
		rollback();
		x4t_warn("nothing in %s was changed", dir);
		return 1;
	}
	const char *path = target[F_GGUF];
	x4t_warn("wrote %s: %d tensors, %llu bytes of tensor data, %.2f s, "
		"%.2f GB/s", path, n_tensors, (unsigned long long)data_bytes, secs,
		secs > 0 ? (double)data_bytes / secs / 1e9 : 0.0);
	return 0;
}
