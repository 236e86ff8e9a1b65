/*
 * chat.c - Xing4's chat format (docs/record.md 7), as text, as token
 * ids and as a Jinja template:
 *
 *   <_system>SYSTEM                       (SYSTEM empty without a system message)
 *   <_user>USER                           for each user turn
 *   <_bot></think>ANSWER<_end>\n          for each past assistant turn
 *   <_bot><think>\n                       the generation prompt
 *
 * Tokenized, each marker is its id and never comes from the text, and each
 * text between markers is encoded on its own WITHOUT the dummy prefix: the
 * rendered string has no space after a marker, so none is invented (the
 * token after <_user> is "What", not "▁What").  x4_tokenize of the rendered
 * text with X4_TOKENIZE_SPECIAL gives the same ids whenever no message
 * spells a control piece.
 */
#include "tok_int.h"

enum { SEG_TEXT, SEG_MARK };

typedef struct seg {
	int kind;
	const char *s; /* text, or the marker's piece */
} seg;

/* The segments of a conversation, in order; *nseg receives the count. */
static int segments(const x4_chat_msg *msgs, int n, bool gen, seg **out, int *nseg, x4_err *e)
{
	if (n < 0 || (n > 0 && !msgs))
		return x4_err_set(e, X4_EINVAL, "chat: %d messages", n);
	seg *s = malloc(((size_t)n * 5 + 8) * sizeof(*s));
	if (!s)
		return x4_err_set(e, X4_ENOMEM, "chat: out of memory for %d messages", n);
	int k = 0, i = 0;
	s[k++] = (seg){ SEG_MARK, "<_system>" };
	if (n > 0 && msgs[0].role && !strcmp(msgs[0].role, "system")) {
		s[k++] = (seg){ SEG_TEXT, msgs[0].content ? msgs[0].content : "" };
		i = 1;
	}
	for (; i < n; i++) {
		const char *role = msgs[i].role ? msgs[i].role : "(null)";
		const char *c = msgs[i].content ? msgs[i].content : "";
		if (!strcmp(role, "user")) {
			s[k++] = (seg){ SEG_MARK, "<_user>" };
			s[k++] = (seg){ SEG_TEXT, c };
		} else if (!strcmp(role, "assistant")) {
			s[k++] = (seg){ SEG_MARK, "<_bot>" };
			s[k++] = (seg){ SEG_MARK, "</think>" };
			s[k++] = (seg){ SEG_TEXT, c };
			s[k++] = (seg){ SEG_MARK, "<_end>" };
			s[k++] = (seg){ SEG_TEXT, "\n" };
		} else {
			free(s);
			if (!strcmp(role, "system"))
				return x4_err_set(e, X4_EINVAL,
						  "chat: message %d is a system message; only the first message may be one",
						  i);
			return x4_err_set(e, X4_EINVAL,
					  "chat: message %d has role \"%.64s\" (want system, user or assistant)",
					  i, role);
		}
	}
	if (gen) {
		s[k++] = (seg){ SEG_MARK, "<_bot>" };
		s[k++] = (seg){ SEG_MARK, "<think>" };
		s[k++] = (seg){ SEG_TEXT, "\n" };
	}
	*out = s;
	*nseg = k;
	return 0;
}

int x4_chat_render(const x4_chat_msg *msgs, int n, bool add_generation_prompt, char **out,
		   x4_err *e)
{
	seg *s;
	int ns, rc = segments(msgs, n, add_generation_prompt, &s, &ns, e);
	if (rc)
		return rc;
	size_t len = 1;
	for (int i = 0; i < ns; i++)
		len += strlen(s[i].s);
	char *buf = malloc(len), *p = buf;
	if (!buf) {
		free(s);
		return x4_err_set(e, X4_ENOMEM, "chat: out of memory for %zu bytes", len);
	}
	for (int i = 0; i < ns; i++) {
		size_t l = strlen(s[i].s);
		memcpy(p, s[i].s, l);
		p += l;
	}
	*p = 0;
	free(s);
	*out = buf;
	return 0;
}

int x4_chat_tokenize(const x4_tokenizer *t, const x4_chat_msg *msgs, int n,
		     bool add_generation_prompt, int32_t **ids, size_t *n_ids, x4_err *e)
{
	*ids = NULL;
	*n_ids = 0;
	seg *s;
	int ns, rc = segments(msgs, n, add_generation_prompt, &s, &ns, e);
	if (rc)
		return rc;
	x4_ids out = { 0 };
	for (int i = 0; i < ns; i++) {
		if (s[i].kind == SEG_MARK) {
			int32_t id = x4_token_find(t, s[i].s);
			if (id < 0 || x4_token_type(t, id) != X4_TOK_CONTROL) {
				rc = x4_err_set(e, X4_ENOTFOUND,
						"chat: the vocabulary has no control piece %s (not a Xing4 tokenizer?)",
						s[i].s);
				goto fail;
			}
			if (x4_ids_push(&out, id))
				goto oom;
		} else if (x4_tok_encode_text(t, s[i].s, strlen(s[i].s), false, &out)) {
			goto oom;
		}
	}
	free(s);
	*ids = out.v;
	*n_ids = out.n;
	return 0;
oom:
	rc = x4_err_set(e, X4_ENOMEM, "chat: out of memory");
fail:
	free(s);
	free(out.v);
	return rc;
}

/* Renders what x4_chat_render does; the release folder ships it as
 * chat_template.jinja.  Whitespace control ("-") keeps the template's own
 * line breaks out of the output: the only newlines are the '\n' literals. */
static const char chat_jinja[] =
	"{#- Xing4 chat format: <_system>SYSTEM, <_user>USER, <_bot></think>ANSWER<_end>\\n,\n"
	"    and the generation prompt <_bot><think>\\n. -#}\n"
	"{%- set ns = namespace(start=0) -%}\n"
	"{{- '<_system>' -}}\n"
	"{%- if messages and messages[0]['role'] == 'system' -%}\n"
	"    {{- messages[0]['content'] -}}\n"
	"    {%- set ns.start = 1 -%}\n"
	"{%- endif -%}\n"
	"{%- for message in messages[ns.start:] -%}\n"
	"    {%- if message['role'] == 'user' -%}\n"
	"        {{- '<_user>' + message['content'] -}}\n"
	"    {%- elif message['role'] == 'assistant' -%}\n"
	"        {{- '<_bot></think>' + message['content'] + '<_end>\\n' -}}\n"
	"    {%- elif message['role'] == 'system' -%}\n"
	"        {{- raise_exception('only the first message may be a system message') -}}\n"
	"    {%- else -%}\n"
	"        {{- raise_exception('unknown role: ' + message['role']) -}}\n"
	"    {%- endif -%}\n"
	"{%- endfor -%}\n"
	"{%- if add_generation_prompt -%}\n"
	"    {{- '<_bot><think>\\n' -}}\n"
	"{%- endif -%}\n";

const char *x4_chat_template_jinja(void)
{
	return chat_jinja;
}
