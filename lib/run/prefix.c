/*
 * prefix.c - the prefix store: the cache rows of requests already served,
 * in host memory under an LRU byte budget, so that a request whose prompt
 * begins as one of them did restores those positions and forwards only the
 * rest (docs/serving.md, "The prefix store").
 *
 * An entry is a run of token ids, the rows x4_trunk_cache_read gave for
 * them ([n][row_bytes], position-major, so its first m rows are the rows of
 * its first m ids) and the key of the trunk that made them (x4_cache_key,
 * lib/run/trunk.c: the options that change what a row holds).  It costs
 * n * (row_bytes + 4) bytes against the budget.  The list is kept most
 * recently used first; a restore and an offer both count as a use.
 */
#include "trunk_int.h"

typedef struct entry {
	struct entry *prev, *next; /* most recently used first */
	x4_cache_key key;
	int32_t *ids;              /* [n] */
	void *rows;                /* [n][key.row_bytes] */
	size_t n;
	uint64_t bytes;            /* n * (row_bytes + sizeof *ids) */
} entry;

struct x4_prefix_store {
	uint64_t budget;
	entry *head, *tail;
	x4_prefix_stats st; /* entries and bytes kept current; budget set at create */
};

int x4_prefix_store_create(x4_prefix_store **out, uint64_t budget, x4_err *e)
{
	*out = x4_calloc(1, sizeof **out, "the prefix store", e);
	if (!*out)
		return X4_ENOMEM;
	(*out)->budget = (*out)->st.budget = budget;
	return 0;
}

static void unlink_entry(x4_prefix_store *ps, entry *en)
{
	if (en->prev)
		en->prev->next = en->next;
	else
		ps->head = en->next;
	if (en->next)
		en->next->prev = en->prev;
	else
		ps->tail = en->prev;
	en->prev = en->next = NULL;
}

static void push_front(x4_prefix_store *ps, entry *en)
{
	en->prev = NULL;
	en->next = ps->head;
	if (ps->head)
		ps->head->prev = en;
	ps->head = en;
	if (!ps->tail)
		ps->tail = en;
}

static void entry_free(entry *en)
{
	if (!en)
		return;
	free(en->ids);
	free(en->rows);
	free(en);
}

static void drop(x4_prefix_store *ps, entry *en)
{
	unlink_entry(ps, en);
	ps->st.entries--;
	ps->st.bytes -= en->bytes;
	entry_free(en);
}

void x4_prefix_store_clear(x4_prefix_store *ps)
{
	while (ps->head)
		drop(ps, ps->head);
}

void x4_prefix_store_free(x4_prefix_store *ps)
{
	if (!ps)
		return;
	x4_prefix_store_clear(ps);
	free(ps);
}

void x4_prefix_store_stats(const x4_prefix_store *ps, x4_prefix_stats *st)
{
	*st = ps->st;
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
	size_t n = X4_MIN(na, nb), i = 0;
	while (i < n && a[i] == b[i])
		i++;
	return i;
}

int x4_prefix_restore(x4_prefix_store *ps, x4_trunk *t, const int32_t *ids, size_t n,
		      size_t max, size_t *restored, x4_err *e)
{
	*restored = 0;
	/* Nothing of an earlier request is context unless it is restored
	 * below (the shared-cache bug of docs/serving.md). */
	x4_trunk_reset(t);
	x4_cache_key k;
	x4_trunk_cache_key(t, &k);
	entry *best = NULL;
	size_t shared = 0;
	/* The longest shared prefix; the most recent entry on a tie. */
	for (entry *en = ps->head; en; en = en->next) {
		if (memcmp(&en->key, &k, sizeof k))
			continue;
		size_t m = common_prefix(en->ids, en->n, ids, n);
		if (m > shared) {
			shared = m;
			best = en;
		}
	}
	size_t r = X4_MIN(shared, max);
	if (!r) {
		ps->st.misses++;
		return 0;
	}
	int rc = x4_trunk_cache_restore(t, (int)r, best->rows, e);
	if (rc)
		return rc;
	unlink_entry(ps, best);
	push_front(ps, best);
	ps->st.hits++;
	ps->st.reused_tokens += r;
	*restored = r;
	return 0;
}

int x4_prefix_offer(x4_prefix_store *ps, x4_trunk *t, const int32_t *ids, size_t n, x4_err *e)
{
	x4_cache_key k;
	x4_trunk_cache_key(t, &k);
	uint64_t bytes = (uint64_t)n * (k.row_bytes + sizeof *ids);
	/* An entry larger than the whole budget is not kept (0 keeps none). */
	if (!n || bytes > ps->budget)
		return 0;
	/* An entry that holds these ids and more has these rows already. */
	for (entry *en = ps->head; en; en = en->next)
		if (!memcmp(&en->key, &k, sizeof k) && en->n >= n &&
		    common_prefix(en->ids, en->n, ids, n) == n) {
			unlink_entry(ps, en);
			push_front(ps, en);
			return 0;
		}
	entry *nw = calloc(1, sizeof *nw);
	if (nw) {
		nw->ids = malloc(n * sizeof *ids);
		nw->rows = malloc((size_t)n * (size_t)k.row_bytes);
	}
	if (!nw || !nw->ids || !nw->rows) {
		entry_free(nw);
		return 0;
	}
	/* The positions an entry of the same options already holds are its
	 * rows (a position's rows depend on the ids up to it alone): copied on
	 * the host; only the rest is read from the trunk, on a GPU the only
	 * device-to-host copy of a turn that continues a conversation. */
	const entry *src = NULL;
	size_t have = 0;
	for (entry *en = ps->head; en; en = en->next) {
		size_t m = memcmp(&en->key, &k, sizeof k) ? 0 : common_prefix(en->ids, en->n, ids, n);
		if (m > have) {
			have = m;
			src = en;
		}
	}
	if (have)
		memcpy(nw->rows, src->rows, have * (size_t)k.row_bytes);
	int rc = x4_trunk_cache_read_from(t, (int)have, (int)(n - have),
					  (char *)nw->rows + have * (size_t)k.row_bytes, e);
	if (rc) {
		entry_free(nw);
		return rc;
	}
	memcpy(nw->ids, ids, n * sizeof *ids);
	/* memcpy, not assignment: keys compare with memcmp, padding and all */
	memcpy(&nw->key, &k, sizeof k);
	nw->n = n;
	nw->bytes = bytes;
	/* Entries that are a prefix of this one are replaced by it, so that
	 * the turns of one conversation do not pile up copies of its start. */
	for (entry *en = ps->head, *next; en; en = next) {
		next = en->next;
		if (!memcmp(&en->key, &k, sizeof k) && en->n <= n &&
		    common_prefix(en->ids, en->n, ids, n) == en->n)
			drop(ps, en);
	}
	push_front(ps, nw);
	ps->st.entries++;
	ps->st.bytes += bytes;
	/* The least recently used go until the budget holds; the new entry
	 * fits on its own, so it is never the one dropped. */
	while (ps->st.bytes > ps->budget && ps->tail != nw) {
		drop(ps, ps->tail);
		ps->st.evictions++;
	}
	return 0;
}
