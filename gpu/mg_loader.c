/*
 * mg_loader.c - a loader over a list of files: one prefetch thread loads
 * the files in order, ahead of the caller, bounded by a count of files and
 * a memory budget, and mg_loader_next() hands them out in order.
 *
 * Not for: reading a file (mg_load.c, mg_ring.c). The prefetch thread takes
 * a staging ring of the context for each file, once the file's room is
 * reserved, and gives it back when the file is loaded: an idle loader
 * holds no ring, and the context's max_loads bounds loaders too.
 *
 * Accounting: struct mg_budget outlives the loader while buffers it handed
 * out are alive; each such buffer gives its capacity back on release.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mg_i.h"

/* lock guards every field here and the loader's state below. It is never
 * held together with a context's lock, nor across I/O. */
struct mg_budget {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned refs; /* the loader and each live buffer it handed out */
	uint64_t in_use;
	uint64_t peak;
};

struct mg_item {
	struct mg_buf *buf;
	int err;
	int cuda_code;
	const char *cuda_name;
	bool ready;
};

struct mg_loader {
	struct mg_ctx *ctx; /* one reference */
	struct mg_budget *b;
	struct mg_loader_opts opts;
	char **paths;
	size_t n;
	/* Guarded by b->lock: */
	struct mg_item *items;
	size_t delivered; /* items handed out (or their error) */
	bool waiting; /* mg_loader_next() waits for items[delivered] */
	bool stop;
	struct mg_loader_stats st;
	/* Polled by the ring to abandon a load when stopping. */
	atomic_bool cancel;
	pthread_t thread;
};

static void budget_unref_locked(struct mg_budget *b)
{
	bool last = --b->refs == 0;

	pthread_mutex_unlock(&b->lock);
	if (last) {
		pthread_cond_destroy(&b->cond);
		pthread_mutex_destroy(&b->lock);
		free(b);
	}
}

void mg_budget_put(struct mg_budget *b, size_t cap)
{
	pthread_mutex_lock(&b->lock);
	b->in_use -= cap;
	pthread_cond_broadcast(&b->cond);
	budget_unref_locked(b);
}

void mg_loader_opts_init(struct mg_loader_opts *opts)
{
	opts->prefetch = 2;
	opts->memory_budget = (uint64_t)1 << 30;
}

/*
 * Waits until file i may start: fewer than prefetch files ahead and cap
 * bytes fit, or the caller waits for exactly this file. b->lock held.
 * Returns 0 (and *over when it does not fit) or -ECANCELED when stopping.
 */
static int wait_turn(struct mg_loader *ld, size_t i, size_t cap, bool *over)
{
	struct mg_budget *b = ld->b;
	uint64_t budget = ld->opts.memory_budget;
	bool head, fits;

	for (;;) {
		if (ld->stop)
			return -ECANCELED;
		head = i == ld->delivered && ld->waiting;
		fits = !budget || (b->in_use + cap <= budget);
		if ((i - ld->delivered < ld->opts.prefetch || head) &&
		    (fits || head)) {
			*over = !fits;
			return 0;
		}
		pthread_cond_wait(&b->cond, &b->lock);
	}
}

/* Reserves file i's room, under b->lock, once its turn came. */
static int reserve(struct mg_loader *ld, size_t i, size_t cap)
{
	struct mg_budget *b = ld->b;
	bool over = false;
	int r;

	r = wait_turn(ld, i, cap, &over);
	if (r)
		return r;
	b->in_use += cap;
	if (b->in_use > b->peak)
		b->peak = b->in_use;
	ld->st.over_budget += over;
	if (i + 1 - ld->delivered > ld->st.peak_ahead)
		ld->st.peak_ahead = i + 1 - ld->delivered;
	return 0;
}

/* Publishes file i's outcome, under b->lock. */
static void publish(struct mg_loader *ld, size_t i, struct mg_buf *buf, int err)
{
	struct mg_item *it = &ld->items[i];

	if (buf) {
		buf->budget = ld->b;
		ld->b->refs++;
	}
	it->buf = buf;
	it->err = err;
	if (err)
		it->cuda_code = mg_cuda_last_error(&it->cuda_name);
	it->ready = true;
	ld->st.files_loaded += err == 0;
	ld->st.files_failed += err != 0;
	pthread_cond_broadcast(&ld->b->cond);
}

/* Loads file i; returns -ECANCELED when the loader stops. */
static int load_one(struct mg_loader *ld, size_t i)
{
	struct mg_buf *buf = NULL;
	struct mg_reader *rd;
	size_t size = 0, cap = 0;
	int fd = -1, r, err;

	mg_cuda_clear_error();
	err = mg_open_file(ld->paths[i], &fd, &size);
	if (!err)
		cap = mg_size_class(size);
	pthread_mutex_lock(&ld->b->lock);
	r = reserve(ld, i, cap);
	pthread_mutex_unlock(&ld->b->lock);
	if (r)
		goto close_fd;
	if (!err)
		err = mg_reader_get(ld->ctx, &rd);
	if (!err) {
		err = mg_load_with(rd, fd, size, &ld->cancel, &buf);
		mg_reader_put(ld->ctx, rd);
	}
	pthread_mutex_lock(&ld->b->lock);
	if (err)
		ld->b->in_use -= cap;
	if (err == -ECANCELED && ld->stop)
		r = err;
	else
		publish(ld, i, buf, err);
	pthread_mutex_unlock(&ld->b->lock);
close_fd:
	if (fd >= 0)
		close(fd);
	return r;
}

static void *loader_main(void *arg)
{
	struct mg_loader *ld = arg;

	for (size_t i = 0; i < ld->n; i++) {
		if (load_one(ld, i))
			break;
	}
	return NULL;
}

int mg_loader_next(mg_loader *ld, mg_buf **out)
{
	struct mg_item *it;
	int r;

	pthread_mutex_lock(&ld->b->lock);
	if (ld->delivered == ld->n) {
		pthread_mutex_unlock(&ld->b->lock);
		*out = NULL;
		return 0;
	}
	it = &ld->items[ld->delivered];
	ld->waiting = true;
	pthread_cond_broadcast(&ld->b->cond);
	while (!it->ready)
		pthread_cond_wait(&ld->b->cond, &ld->b->lock);
	ld->waiting = false;
	ld->delivered++;
	pthread_cond_broadcast(&ld->b->cond);
	pthread_mutex_unlock(&ld->b->lock);
	r = it->err;
	if (r) {
		if (it->cuda_code)
			mg_set_cuda_error(it->cuda_code, it->cuda_name);
		return r;
	}
	*out = it->buf;
	it->buf = NULL;
	return 0;
}

void mg_loader_stats(mg_loader *ld, struct mg_loader_stats *out)
{
	pthread_mutex_lock(&ld->b->lock);
	*out = ld->st;
	out->bytes_in_use = ld->b->in_use;
	out->peak_bytes = ld->b->peak;
	pthread_mutex_unlock(&ld->b->lock);
}

static void free_paths(char **paths, size_t n)
{
	if (!paths)
		return;
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
}

static int copy_paths(const char *const *paths, size_t n, char ***out)
{
	char **p = calloc(n ? n : 1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		p[i] = paths[i] ? strdup(paths[i]) : NULL;
		if (!p[i]) {
			free_paths(p, i);
			return paths[i] ? -ENOMEM : -EINVAL;
		}
	}
	*out = p;
	return 0;
}

static int budget_new(struct mg_budget **out)
{
	struct mg_budget *b = calloc(1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	mg_mutex_init(&b->lock);
	pthread_cond_init(&b->cond, NULL);
	b->refs = 1;
	*out = b;
	return 0;
}

/* Frees what mg_loader_open built, in reverse order; the thread is gone. */
static void loader_free(struct mg_loader *ld)
{
	if (ld->items) {
		for (size_t i = 0; i < ld->n; i++)
			mg_buf_release(ld->items[i].buf);
	}
	if (ld->b) {
		pthread_mutex_lock(&ld->b->lock);
		budget_unref_locked(ld->b);
	}
	free(ld->items);
	free_paths(ld->paths, ld->n);
	mg_ctx_unref(ld->ctx);
	free(ld);
}

int mg_loader_open(mg_ctx *ctx, const char *const *paths, size_t n,
		   const struct mg_loader_opts *opts, mg_loader **out)
{
	struct mg_loader *ld;
	int r;

	if (!ctx || (n && !paths))
		return -EINVAL;
	ld = calloc(1, sizeof(*ld));
	if (!ld)
		return -ENOMEM;
	mg_ctx_ref(ctx);
	ld->ctx = ctx;
	ld->n = n;
	if (opts)
		ld->opts = *opts;
	else
		mg_loader_opts_init(&ld->opts);
	atomic_init(&ld->cancel, false);
	r = copy_paths(paths, n, &ld->paths);
	if (r) {
		ld->n = 0;
		goto fail;
	}
	ld->items = calloc(n ? n : 1, sizeof(*ld->items));
	r = ld->items ? budget_new(&ld->b) : -ENOMEM;
	if (!r)
		r = -pthread_create(&ld->thread, NULL, loader_main, ld);
	if (r)
		goto fail;
	*out = ld;
	return 0;
fail:
	loader_free(ld);
	return r;
}

void mg_loader_close(mg_loader *ld)
{
	if (!ld)
		return;
	pthread_mutex_lock(&ld->b->lock);
	ld->stop = true;
	atomic_store(&ld->cancel, true);
	pthread_cond_broadcast(&ld->b->cond);
	pthread_mutex_unlock(&ld->b->lock);
	pthread_join(ld->thread, NULL);
	loader_free(ld);
}

static int skip_hidden(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

/* dir/name for every regular file of ents; *n counts them. */
static int regular_files(const char *dir, struct dirent **ents, int nents,
			 char ***out, size_t *n)
{
	char **paths = calloc(nents ? (size_t)nents : 1, sizeof(*paths));
	size_t k = 0, len;
	struct stat st;
	char *p;

	if (!paths)
		return -ENOMEM;
	for (int i = 0; i < nents; i++) {
		len = strlen(dir) + strlen(ents[i]->d_name) + 2;
		p = malloc(len);
		if (!p) {
			free_paths(paths, k);
			return -ENOMEM;
		}
		snprintf(p, len, "%s/%s", dir, ents[i]->d_name);
		if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
			paths[k++] = p;
		else
			free(p);
	}
	*out = paths;
	*n = k;
	return 0;
}

int mg_loader_open_dir(mg_ctx *ctx, const char *dir,
		       const struct mg_loader_opts *opts, mg_loader **out)
{
	struct dirent **ents = NULL;
	char **paths = NULL;
	size_t n = 0;
	int nents, r;

	if (!dir)
		return -EINVAL;
	nents = scandir(dir, &ents, skip_hidden, by_name);
	if (nents < 0)
		return -errno;
	r = regular_files(dir, ents, nents, &paths, &n);
	for (int i = 0; i < nents; i++)
		free(ents[i]);
	free(ents);
	if (r)
		return r;
	r = mg_loader_open(ctx, (const char *const *)paths, n, opts, out);
	free_paths(paths, n);
	return r;
}
