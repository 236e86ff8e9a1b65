/*
 * model.c - where a checkpoint's parts are (docs/record.md 7), and the
 * opened model: the mapping, its config, every trunk tensor bound by name
 * against x4_layout (the one list of what a xing4_0 file holds) and the
 * tokenizer from the GGUF header.
 */
#include "tok_int.h"
#include "trunk_int.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

/* ---- paths ---- */

static bool is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* A whole small file, NUL-terminated, or NULL; *len its length when len
 * is given, *big set when the file holds more than max bytes. */
static char *slurp_n(const char *path, size_t max, size_t *len, bool *big)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = malloc(max + 2);
	size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
	bool bad = ferror(f);
	fclose(f);
	if (!buf || bad) {
		free(buf);
		return NULL;
	}
	if (big)
		*big = n > max;
	n = X4_MIN(n, max);
	buf[n] = 0;
	if (len)
		*len = n;
	return buf;
}

static char *slurp(const char *path, size_t max) { return slurp_n(path, max, NULL, NULL); }

/* The value after "key": in a JSON text, found by the quoted key anywhere
 * (config.json is flat where x4 looks); NULL when absent. */
static const char *json_value(const char *js, const char *key)
{
	size_t kl = strlen(key);
	for (const char *p = js; (p = strchr(p, '"')); p++) {
		if (strncmp(p + 1, key, kl) != 0 || p[1 + kl] != '"')
			continue;
		const char *q = p + 2 + kl;
		while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
			q++;
		if (*q != ':')
			continue;
		q++;
		while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
			q++;
		return q;
	}
	return NULL;
}

static bool json_str_is(const char *js, const char *key, const char *want)
{
	const char *v = json_value(js, key);
	size_t wl = strlen(want);
	return v && *v == '"' && strncmp(v + 1, want, wl) == 0 && v[1 + wl] == '"';
}

static bool json_num(const char *js, const char *key, double *out)
{
	const char *v = json_value(js, key);
	if (!v)
		return false;
	char *end;
	double d = strtod(v, &end);
	if (end == v || !isfinite(d))
		return false;
	*out = d;
	return true;
}

/* A xing4_0 release folder: identified by what it declares, never by
 * merely holding a config.json (docs/record.md 7: a sibling checkpoint's folder
 * would otherwise be taken and tokenize with the wrong vocabulary). */
static bool is_release_dir(const char *dir)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/tokenization_xing4_0.py", dir);
	if (is_file(p))
		return true;
	snprintf(p, sizeof p, "%s/config.json", dir);
	char *js = slurp(p, 1 << 20);
	bool ok = js && json_str_is(js, "model_type", "xing4_0");
	free(js);
	return ok;
}

static int copy_path(char *dst, const char *src, x4_err *e)
{
	if (strlen(src) >= 4096)
		return x4_err_set(e, X4_EINVAL, "path too long: %.64s...", src);
	strcpy(dst, src);
	return 0;
}

static int find_one_gguf(const char *dir, char *out, x4_err *e)
{
	DIR *d = opendir(dir);
	if (!d)
		return x4_err_set(e, X4_EIO, "%s: %s", dir, strerror(errno));
	char found[768] = ""; /* the names that fit, then "..." */
	int n = 0;
	bool cut = false;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l < 6 || strcmp(de->d_name + l - 5, ".gguf") != 0)
			continue;
		char p[4200];
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		if (!is_file(p))
			continue;
		if (n == 0 && copy_path(out, p, e)) {
			closedir(d);
			return X4_EINVAL;
		}
		size_t fl = strlen(found), room = sizeof found - fl - 6; /* 6: ", ..." fits */
		int k = cut ? -1 : snprintf(found + fl, room, "%s%s", n ? ", " : "", p);
		if (!cut && (k < 0 || (size_t)k >= room)) {
			snprintf(found + fl, sizeof found - fl, "%s...", n ? ", " : "");
			cut = true;
		}
		n++;
	}
	closedir(d);
	if (n == 0)
		return x4_err_set(e, X4_ENOTFOUND, "%s holds no .gguf file: name the weights file "
				  "with -m FILE.gguf", dir);
	if (n > 1)
		return x4_err_set(e, X4_EINVAL, "%s holds %d .gguf files (%s): name one with "
				  "-m FILE.gguf", dir, n, found);
	return 0;
}

int x4_paths_resolve(const char *model, const char *tokdir, x4_paths *p, x4_err *e)
{
	memset(p, 0, sizeof *p);
	if (!model || !*model)
		return x4_err_set(e, X4_EINVAL, "no model given: name a .gguf file or a folder "
				  "holding one");
	char home[4096]; /* the folder the weights came from */
	int rc;
	if (is_dir(model)) {
		if ((rc = find_one_gguf(model, p->gguf, e)))
			return rc;
		if ((rc = copy_path(home, model, e)))
			return rc;
	} else if (is_file(model)) {
		if ((rc = copy_path(p->gguf, model, e)))
			return rc;
		const char *slash = strrchr(model, '/');
		if (!slash)
			strcpy(home, ".");
		else if (slash == model)
			strcpy(home, "/");
		else
			snprintf(home, sizeof home, "%.*s", (int)(slash - model), model);
	} else {
		struct stat st;
		if (stat(model, &st) == 0)
			return x4_err_set(e, X4_EINVAL, "%s is neither a regular file nor a folder: "
					  "name a .gguf file or a folder holding one", model);
		return x4_err_set(e, X4_ENOTFOUND, "%s: %s", model, strerror(errno));
	}

	if (tokdir && *tokdir) {
		if (!is_dir(tokdir))
			return x4_err_set(e, X4_ENOTFOUND, "tokenizer folder %s: no such folder",
					  tokdir);
		if (!is_release_dir(tokdir))
			return x4_err_set(e, X4_EINVAL, "%s is not a xing4_0 release folder: tried "
					  "%s/config.json (model_type \"xing4_0\") and "
					  "%s/tokenization_xing4_0.py", tokdir, tokdir, tokdir);
		return copy_path(p->tokdir, tokdir, e);
	}
	if (is_release_dir(home))
		return copy_path(p->tokdir, home, e);
	p->tokdir[0] = 0; /* the GGUF's own vocabulary */
	return 0;
}

/* ---- binding ---- */

/* Field offsets of x4_block_w by the name's part after "blk.N." (the one
 * list, X4_BLOCK_TENSORS). */
static const struct {
	const char *suffix;
	size_t off;
} block_fields[] = {
#define X4_OFF_(f, name, ...) { name, offsetof(x4_block_w, f) },
	X4_BLOCK_TENSORS(X4_OFF_)
#undef X4_OFF_
};

/* "IQ4_NL [256, 128]": types (a type's or a role's names) and the shape. */
static void shape_str(char *out, size_t cap, const char *types, int n_dims, const uint64_t *ne)
{
	int k = snprintf(out, cap, "%s [", types);
	for (int d = 0; d < n_dims && k > 0 && (size_t)k < cap; d++)
		k += snprintf(out + k, cap - (size_t)k, "%s%llu", d ? ", " : "",
			      (unsigned long long)ne[d]);
	if (k > 0 && (size_t)k < cap)
		snprintf(out + k, cap - (size_t)k, "]");
}

/* Problems are gathered into one message that ends at a problem's end:
 * past its room they are only counted, so the message still says how many
 * there were.  The room leaves the path, the count and "(and N more)"
 * their place in the X4_ERR_MSG bytes of an x4_err. */
struct report {
	char msg[X4_ERR_MSG];
	size_t room;
	int n, shown;
	bool full;
};

#define REPORT_PATH_MAX 256 /* a longer path is shown by its tail */
#define REPORT_FRAME (sizeof ": 2147483647 tensor problems: " + sizeof " (and 2147483647 more)")

static void report_add(struct report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report_add(struct report *r, const char *fmt, ...)
{
	char line[320];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	r->n++;
	size_t l = strlen(r->msg), add = (l ? 2 : 0) + strlen(line);
	if (r->full || l + add > r->room) {
		r->full = true; /* the shown ones stay the first ones */
		return;
	}
	snprintf(r->msg + l, sizeof r->msg - l, "%s%s", l ? "; " : "", line);
	r->shown++;
}

/* Is this tensor of the NextN block(s), which x4 recognises and skips? */
static bool is_nextn(const x4_config *c, const char *name)
{
	int b;
	int k;
	return sscanf(name, "blk.%d.%n", &b, &k) == 1 && k > 0 && b >= c->n_block &&
	       b < c->n_block_file;
}

static int bind(x4_model *m, x4_err *e)
{
	const x4_config *c = &m->c;
	x4_tensor_spec *spec;
	int n_spec;
	int rc = x4_layout(c, &spec, &n_spec, e);
	if (rc)
		return rc;
	m->blk = x4_calloc((size_t)c->n_block, sizeof *m->blk, "the block table", e);
	if (!m->blk) {
		free(spec);
		return X4_ENOMEM;
	}
	const char *path = m->paths.gguf;
	size_t pl = strlen(path);
	bool long_path = pl > REPORT_PATH_MAX;
	struct report r = { .room = sizeof r.msg - REPORT_PATH_MAX - REPORT_FRAME };
	int64_t nt = x4_gguf_tensor_count(m->g);
	bool *used = calloc((size_t)nt + 1, 1);
	if (!used) {
		free(spec);
		return x4_err_set(e, X4_ENOMEM, "out of memory binding tensors");
	}
	for (int i = 0; i < n_spec; i++) {
		const x4_tensor_spec *s = &spec[i];
		if (s->block >= c->n_block)
			continue; /* NextN: recognised below, never bound */
		const x4_gguf_tensor *t = x4_gguf_find_tensor(m->g, s->name);
		char want[96], got[96];
		shape_str(want, sizeof want, x4_role_types_name(s->role), s->n_dims, s->ne);
		if (!t) {
			report_add(&r, "%s missing (expected %s)", s->name, want);
			continue;
		}
		for (int64_t j = 0; j < nt; j++)
			if (x4_gguf_tensor_at(m->g, j) == t)
				used[j] = true;
		bool same = t->type >= 0 && t->type < 32 && (x4_role_types(s->role) >> t->type & 1);
		for (int d = 0; d < 4; d++)
			same = same && t->ne[d] == s->ne[d];
		if (!same) {
			shape_str(got, sizeof got, x4_type_name(t->type), t->n_dims, t->ne);
			report_add(&r, "%s: expected %s, found %s", s->name, want, got);
			continue;
		}
		if (s->block < 0) {
			if (!strcmp(s->name, "token_embd.weight"))
				m->token_embd = t;
			else if (!strcmp(s->name, "output_norm.weight"))
				m->output_norm = t;
			else if (!strcmp(s->name, "output.weight"))
				m->output = t;
			continue;
		}
		const char *suffix = strchr(s->name + 4, '.') + 1;
		size_t f;
		for (f = 0; f < X4_ARRAY_LEN(block_fields); f++)
			if (!strcmp(block_fields[f].suffix, suffix))
				break;
		if (f == X4_ARRAY_LEN(block_fields)) {
			report_add(&r, "%s: x4 has no slot for this layout tensor", s->name);
			continue;
		}
		*(const x4_gguf_tensor **)((char *)&m->blk[s->block] + block_fields[f].off) = t;
	}
	for (int64_t j = 0; j < nt; j++) {
		const x4_gguf_tensor *t = x4_gguf_tensor_at(m->g, j);
		if (used[j] || is_nextn(c, t->name))
			continue;
		char got[96];
		shape_str(got, sizeof got, x4_type_name(t->type), t->n_dims, t->ne);
		report_add(&r, "%s (%s) is extra: not part of a xing4_0 file with these keys",
			   t->name, got);
	}
	free(used);
	free(spec);
	for (int b = 0; b < c->n_block; b++) {
		x4_block_w *bw = &m->blk[b];
		bw->moe = b >= c->n_dense;
		/* one expert call takes the three stacks in one type */
		if (bw->moe && bw->ffn_gate_exps && bw->ffn_up_exps && bw->ffn_down_exps &&
		    (bw->ffn_up_exps->type != bw->ffn_gate_exps->type ||
		     bw->ffn_down_exps->type != bw->ffn_gate_exps->type))
			report_add(&r, "blk.%d: the expert stacks are %s, %s and %s (gate, up, down); "
				   "x4 takes them in one type", b, x4_type_name(bw->ffn_gate_exps->type),
				   x4_type_name(bw->ffn_up_exps->type),
				   x4_type_name(bw->ffn_down_exps->type));
	}
	if (r.n) {
		char more[40] = "";
		if (r.n > r.shown)
			snprintf(more, sizeof more, " (and %d more)", r.n - r.shown);
		return x4_err_set(e, X4_ESHAPE, "%s%s: %d tensor problem%s: %s%s",
				  long_path ? "..." : "",
				  long_path ? path + pl - (REPORT_PATH_MAX - 3) : path, r.n,
				  r.n > 1 ? "s" : "", r.msg, more);
	}
	return 0;
}

/* ---- the tokenizer folder ----
 *
 * x4 tokenizes from the GGUF's own vocabulary; from the folder it takes only
 * config.json's clamp keys, and those only when the GGUF has none.  What the
 * folder holds is checked all the same, so that a damaged or foreign folder
 * is refused instead of trusted: config.json is JSON with model_type
 * xing4_0, and tokenizer.model (when there is one) is a SentencePiece model
 * with exactly the GGUF's pieces. */

#define CONFIG_MAX_BYTES (1 << 20)
#define SPM_MAX_BYTES (64 << 20)
#define FIX_FOLDER "restore the release's file or name the right folder with --tokenizer"

static int check_config_json(const char *dir, x4_err *e)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/config.json", dir);
	struct stat st;
	if (stat(p, &st) != 0)
		return 0; /* tokenization_xing4_0.py marked the folder */
	if (!S_ISREG(st.st_mode))
		return x4_err_set(e, X4_EFORMAT, "%s is not a regular file; " FIX_FOLDER, p);
	size_t n = 0;
	bool big = false;
	char *js = slurp_n(p, CONFIG_MAX_BYTES, &n, &big);
	if (!js)
		return x4_err_set(e, X4_EIO, "%s: %s", p, strerror(errno));
	size_t at = 0;
	const char *why = NULL;
	int rc = 0;
	if (big)
		rc = x4_err_set(e, X4_EFORMAT, "%s is over 1 MiB: not a model's config.json; "
				FIX_FOLDER, p);
	else if (x4_json_check(js, n, &at, &why))
		rc = x4_err_set(e, X4_EFORMAT, "%s is not JSON (byte %zu: %s); x4 takes the "
				"hyper-connection clamp keys from it: " FIX_FOLDER, p, at, why);
	else if (js[strspn(js, " \t\r\n")] != '{')
		rc = x4_err_set(e, X4_EFORMAT, "%s is JSON but not an object; " FIX_FOLDER, p);
	else if (!json_str_is(js, "model_type", "xing4_0"))
		rc = x4_err_set(e, X4_EFORMAT, "%s does not say \"model_type\": \"xing4_0\": the "
				"folder is another model's; name the right one with --tokenizer", p);
	free(js);
	return rc;
}

/* The clamp bounds: the GGUF's extension keys, else the release folder's
 * config.json (where the release keeps them), else the released +-30.
 * Keys that are there but unusable are refused, not skipped. */
static int resolve_clamp(x4_model *m, x4_err *e)
{
	if (x4_gguf_find_kv(m->g, "xing4_0.hyper_connection.clamp_min") >= 0 ||
	    x4_gguf_find_kv(m->g, "xing4_0.hyper_connection.clamp_max") >= 0 ||
	    !m->paths.tokdir[0])
		return 0; /* x4_config_read took the keys, or defaulted to +-30 */
	char p[4200];
	snprintf(p, sizeof p, "%s/config.json", m->paths.tokdir);
	char *js = slurp(p, CONFIG_MAX_BYTES);
	if (!js)
		return 0; /* no config.json: the released +-30 */
	int rc = 0;
	double lo, hi;
	bool has = json_value(js, "mhc_h_res_clamp_min") || json_value(js, "mhc_h_res_clamp_max");
	if (json_num(js, "mhc_h_res_clamp_min", &lo) && json_num(js, "mhc_h_res_clamp_max", &hi) &&
	    lo < hi) {
		m->c.clamp_min = (float)lo;
		m->c.clamp_max = (float)hi;
	} else if (has) {
		rc = x4_err_set(e, X4_EFORMAT, "%s: mhc_h_res_clamp_min and mhc_h_res_clamp_max "
				"must both be finite numbers, min < max; " FIX_FOLDER, p);
	}
	free(js);
	return rc;
}

static int check_tokenizer_model(const x4_model *m, x4_err *e)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/tokenizer.model", m->paths.tokdir);
	struct stat st;
	if (stat(p, &st) != 0)
		return 0; /* the GGUF's vocabulary is all x4 needs */
	if (!S_ISREG(st.st_mode))
		return x4_err_set(e, X4_EFORMAT, "%s is not a regular file; " FIX_FOLDER, p);
	size_t n = 0;
	bool big = false;
	unsigned char *buf = (unsigned char *)slurp_n(p, SPM_MAX_BYTES, &n, &big);
	if (!buf)
		return x4_err_set(e, X4_EIO, "%s: %s", p, strerror(errno));
	if (big) {
		free(buf);
		return x4_err_set(e, X4_EFORMAT, "%s is over 64 MiB: not a SentencePiece model; "
				  FIX_FOLDER, p);
	}
	x4_spm sp;
	x4_err pe = { 0 };
	if (x4_spm_parse(&sp, buf, n, &pe)) {
		free(buf);
		/* pe.msg starts "tokenizer.model: " */
		return x4_err_set(e, X4_EFORMAT, "%s/%s; x4 tokenizes from the GGUF and checks "
				  "the folder's tokenizer.model against it: " FIX_FOLDER,
				  m->paths.tokdir, pe.msg);
	}
	int rc = 0, nv = x4_tokenizer_n_vocab(m->tok);
	if (sp.n != nv)
		rc = x4_err_set(e, X4_EFORMAT, "%s has %d pieces and %s's vocabulary %d: the "
				"folder is not this checkpoint's; name the right one with --tokenizer",
				p, sp.n, m->paths.gguf, nv);
	for (int i = 0; rc == 0 && i < nv; i++) {
		const char *want = x4_token_piece(m->tok, i);
		const x4_spm_piece *got = &sp.pieces[i];
		if (strlen(want) != got->len || memcmp(want, got->s, got->len) != 0)
			rc = x4_err_set(e, X4_EFORMAT, "%s: piece %d is '%.*s' where %s's vocabulary "
					"has '%.40s': the folder is not this checkpoint's; name the "
					"right one with --tokenizer", p, i, (int)X4_MIN(got->len, 40),
					got->s, m->paths.gguf, want);
	}
	x4_spm_free(&sp);
	free(buf);
	return rc;
}

int x4_model_open(x4_model **out, const x4_paths *p, x4_err *e)
{
	*out = NULL;
	x4_model *m = x4_calloc(1, sizeof *m, "the model", e);
	if (!m)
		return X4_ENOMEM;
	m->paths = *p;
	int rc = x4_gguf_open(&m->g, p->gguf, e);
	if (rc == 0 && (rc = x4_config_read(m->g, &m->c, e)) != 0) {
		char why[X4_ERR_MSG];
		snprintf(why, sizeof why, "%s", e ? e->msg : "");
		x4_err_set(e, rc, "%s: %s", p->gguf, why);
	}
	if (rc == 0 && p->tokdir[0])
		rc = check_config_json(p->tokdir, e);
	if (rc == 0 && (rc = resolve_clamp(m, e)) == 0)
		rc = bind(m, e);
	if (rc == 0 && x4_tokenizer_from_gguf(&m->tok, m->g, e) != 0) {
		char why[X4_ERR_MSG];
		snprintf(why, sizeof why, "%s", e ? e->msg : "");
		rc = x4_err_set(e, X4_EFORMAT, "%s: the file's vocabulary is unusable (%s); a "
				"xing4_0 file carries tokenizer.ggml.tokens/scores/token_type: "
				"rewrite it with x4-synth or take the release's GGUF", p->gguf, why);
	}
	if (rc == 0 && p->tokdir[0])
		rc = check_tokenizer_model(m, e);
	if (rc == 0 && x4_fingerprint(p->gguf, false, m->fingerprint, e) != 0)
		rc = e ? e->code : X4_EIO;
	if (rc) {
		x4_model_close(m);
		return rc;
	}
	*out = m;
	return 0;
}

void x4_model_close(x4_model *m)
{
	if (!m)
		return;
	if (m->tok)
		x4_tokenizer_free(m->tok);
	free(m->blk);
	if (m->g)
		x4_gguf_close(m->g);
	free(m);
}

const x4_config *x4_model_config(const x4_model *m) { return &m->c; }
const x4_gguf *x4_model_gguf(const x4_model *m) { return m->g; }
const x4_tokenizer *x4_model_tokenizer(const x4_model *m) { return m->tok; }
const char *x4_model_fingerprint(const x4_model *m) { return m->fingerprint; }
