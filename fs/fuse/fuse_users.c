/*
 * fuse_users.c - what one reader uid may hold open at once, so that no
 * one user's open files use up the daemon's descriptors or memory, and
 * with them everybody else's opens and computations (docs/security.md,
 * matfs(8) LIMITS):
 *   - shard handles: a quarter of the daemon's descriptors (matfs raises
 *     its soft limit to the hard one at start), at least MFS_FH_CAP_MIN.
 *     A shard no one else has open costs one descriptor; the rest stay
 *     for other users, the catalog, the store and the stages' pipes;
 *   - directory handles: MFS_DIR_CAP, as each holds a copy of its
 *     folder's listing (a snapshot of 100,000 shards is megabytes), and
 *     MFS_DIR_BYTES_CAP of listings in all, past the first;
 *   - batch handles: one shard handle for each shard a batch draws on
 *     (each may hold a descriptor), and MFS_PLAN_BYTES_CAP of plans in
 *     all, past the first (a plan is tens of bytes a run of records:
 *     megabytes for a shuffled batch of a million records).
 * Past its bound a uid's opens fail with EMFILE, logged once a minute.
 * A uid is a user's: a uid in a user's subordinate range (/etc/subuid,
 * which newuidmap grants a rootless container from) counts as that user,
 * for these bounds, the batch tree's and the workers' turns.
 *
 * Not for: the handles themselves (fuse_open.c, fuse_dir.c).
 */
#include "fuse_i.h"

#include <assert.h>
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define MFS_FH_CAP_MIN 32

/* The handles one reader uid holds, by kind; in m->user_fhs while it
 * holds any. Guarded by node_lock. */
struct mfs_user_fhs {
	struct mfs_user_fhs *next;
	uid_t uid;
	size_t n[MFS_HANDLE_KINDS];
	size_t dir_bytes; /* of the listings its directory handles hold */
	size_t plan_bytes; /* of the plans its batch handles hold */
};

static size_t shard_cap(void)
{
	struct rlimit r;
	rlim_t n = getrlimit(RLIMIT_NOFILE, &r) == 0 ? r.rlim_cur : 1024;
	if (n == RLIM_INFINITY || n > (rlim_t)1 << 30)
		n = (rlim_t)1 << 30;
	return n / 4 > MFS_FH_CAP_MIN ? (size_t)(n / 4) : MFS_FH_CAP_MIN;
}

static size_t cap_of(struct mfs *m, enum mfs_handle_kind k)
{
	if (k == MFS_HANDLE_DIR)
		return MFS_DIR_CAP;
	if (!m->fh_cap)
		m->fh_cap = shard_cap(); /* the limit is set before the mount */
	return m->fh_cap;
}

/* ---- subordinate uids ----
 *
 * /etc/subuid, read again when its size or mtime changed, looked at
 * once a second at most. A line is NAME:FIRST:COUNT, NAME a user name or
 * a uid; lines that do not parse, or name no user, are skipped. */
#define SUBUID_PATH "/etc/subuid"
#define SUBUID_MAX 65536 /* ranges kept */

struct subid_range {
	uint64_t first, count;
	uid_t owner;
	uint64_t reach; /* the largest first + count of this and those before */
};

static pthread_mutex_t subid_lock = PTHREAD_MUTEX_INITIALIZER;
static struct subid_range *subids; /* sorted by first */
static size_t nsubids;
static struct stat subid_st; /* of the file read; st_ino 0: none */
static uint64_t subid_checked_ns;

static int by_first(const void *a, const void *b)
{
	uint64_t x = ((const struct subid_range *)a)->first;
	uint64_t y = ((const struct subid_range *)b)->first;
	return (x > y) - (x < y);
}

/* The uid a line's NAME is; false when it names none. */
static bool owner_of(const char *name, uid_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(name, &end, 10);
	if (*name && !*end && errno == 0 && v < (uid_t)-1) {
		*out = (uid_t)v;
		return true;
	}
	struct passwd pw, *res = NULL;
	char buf[4096];
	if (getpwnam_r(name, &pw, buf, sizeof(buf), &res) != 0 || !res)
		return false;
	*out = pw.pw_uid;
	return true;
}

/* Reads the file at f into a new table; caller holds subid_lock. */
static void subids_read(FILE *f)
{
	struct subid_range *t = NULL;
	size_t n = 0, cap = 0;
	char line[512];
	while (fgets(line, sizeof(line), f) && n < SUBUID_MAX) {
		char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
		if (!b)
			continue;
		*a = *b = '\0';
		char *e1, *e2;
		errno = 0;
		unsigned long long first = strtoull(a + 1, &e1, 10);
		unsigned long long count = strtoull(b + 1, &e2, 10);
		uid_t owner;
		if (errno || e1 == a + 1 || *e1 || e2 == b + 1 ||
		    (*e2 && *e2 != '\n') || count == 0 ||
		    !owner_of(line, &owner))
			continue;
		if (n == cap) {
			size_t c = cap ? 2 * cap : 64;
			void *q = realloc(t, c * sizeof(*t));
			if (!q)
				break;
			t = q;
			cap = c;
		}
		t[n++] = (struct subid_range){first, count, owner, 0};
	}
	if (n)
		qsort(t, n, sizeof(*t), by_first);
	for (size_t i = 0; i < n; i++) {
		uint64_t end = t[i].first + t[i].count;
		t[i].reach = i && t[i - 1].reach > end ? t[i - 1].reach : end;
	}
	free(subids);
	subids = t;
	nsubids = n;
}

/* The table as the file is now; caller holds subid_lock. */
static void subids_fresh(void)
{
	uint64_t now = mf_mono_ns();
	if (subid_checked_ns && now - subid_checked_ns < 1000000000ULL)
		return;
	subid_checked_ns = now;
	struct stat st;
	if (stat(SUBUID_PATH, &st) != 0) {
		free(subids);
		subids = NULL;
		nsubids = 0;
		memset(&subid_st, 0, sizeof(subid_st));
		return;
	}
	if (st.st_ino == subid_st.st_ino && st.st_dev == subid_st.st_dev &&
	    st.st_size == subid_st.st_size &&
	    st.st_mtim.tv_sec == subid_st.st_mtim.tv_sec &&
	    st.st_mtim.tv_nsec == subid_st.st_mtim.tv_nsec)
		return;
	FILE *f = fopen(SUBUID_PATH, "re");
	if (!f)
		return;
	struct stat fst;
	if (fstat(fileno(f), &fst) == 0) {
		subids_read(f);
		subid_st = fst;
	}
	fclose(f);
}

uid_t mfs_reader_uid(uid_t uid)
{
	pthread_mutex_lock(&subid_lock);
	subids_fresh();
	uid_t who = uid;
	size_t lo = 0, hi = nsubids; /* the last range with first <= uid */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (subids[mid].first <= uid)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* ranges may overlap: the nearest one holding uid, looked for while
	 * some range at or before reaches past uid */
	for (size_t i = lo; i-- > 0 && subids[i].reach > uid;) {
		const struct subid_range *r = &subids[i];
		if (uid - r->first < r->count) {
			who = r->owner;
			break;
		}
	}
	pthread_mutex_unlock(&subid_lock);
	return who;
}

/* uid's entry, made when missing (NULL: no memory). */
static struct mfs_user_fhs *user_get(struct mfs *m, uid_t uid)
{
	struct mfs_user_fhs *u = m->user_fhs;
	while (u && u->uid != uid)
		u = u->next;
	if (!u && (u = calloc(1, sizeof(*u)))) {
		u->uid = uid;
		u->next = m->user_fhs;
		m->user_fhs = u;
	}
	return u;
}

/* Drops uid's entry once it holds nothing. */
static void user_put(struct mfs *m, struct mfs_user_fhs *u)
{
	for (int k = 0; k < MFS_HANDLE_KINDS; k++)
		if (u->n[k])
			return;
	if (u->dir_bytes || u->plan_bytes)
		return;
	struct mfs_user_fhs **pp = &m->user_fhs;
	while (*pp && *pp != u)
		pp = &(*pp)->next;
	if (*pp)
		*pp = u->next;
	free(u);
}

/* A reader reached its bound: logged once a minute at most, as a log
 * line per refused open would be the reader's to fill the disk with. */
void mfs_user_capped(struct mfs *m, uid_t uid, enum mfs_handle_kind k)
{
	static _Atomic int64_t last;
	int64_t now = mf_now_s(), was = atomic_load(&last);
	if (now - was < 60 || !atomic_compare_exchange_strong(&last, &was, now))
		return;
	pthread_mutex_lock(&m->node_lock);
	size_t cap = cap_of(m, k);
	pthread_mutex_unlock(&m->node_lock);
	mfs_logf(m, MFS_LOG_WARN,
		 "uid %u holds %zu open %s, its bound: its further opens fail "
		 "with EMFILE until it closes some",
		 (unsigned)uid, cap,
		 k == MFS_HANDLE_DIR ? "directories" : "shard files");
}

int mfs_user_take_locked(struct mfs *m, uid_t uid, enum mfs_handle_kind k)
{
	assert(mf_mutex_held(&m->node_lock));
	struct mfs_user_fhs *u = user_get(m, uid);
	if (!u)
		return -ENOMEM;
	if (u->n[k] >= cap_of(m, k)) {
		user_put(m, u);
		return -EMFILE;
	}
	u->n[k]++;
	return 0;
}

void mfs_user_give_locked(struct mfs *m, uid_t uid, enum mfs_handle_kind k)
{
	assert(mf_mutex_held(&m->node_lock));
	struct mfs_user_fhs *u = user_get(m, uid);
	assert(u && u->n[k] > 0);
	if (!u)
		return;
	if (u->n[k] > 0)
		u->n[k]--;
	user_put(m, u);
}

int mfs_user_take(struct mfs *m, uid_t uid, enum mfs_handle_kind k)
{
	pthread_mutex_lock(&m->node_lock);
	int rc = mfs_user_take_locked(m, uid, k);
	pthread_mutex_unlock(&m->node_lock);
	if (rc == -EMFILE)
		mfs_user_capped(m, uid, k);
	return rc;
}

void mfs_user_give(struct mfs *m, uid_t uid, enum mfs_handle_kind k)
{
	pthread_mutex_lock(&m->node_lock);
	mfs_user_give_locked(m, uid, k);
	pthread_mutex_unlock(&m->node_lock);
}

int mfs_user_take_bytes(struct mfs *m, uid_t uid, size_t bytes)
{
	pthread_mutex_lock(&m->node_lock);
	struct mfs_user_fhs *u = user_get(m, uid);
	int rc = u ? 0 : -ENOMEM;
	/* a first listing past the bound leaves no room for another */
	if (u && u->dir_bytes &&
	    (u->dir_bytes >= MFS_DIR_BYTES_CAP ||
	     bytes > MFS_DIR_BYTES_CAP - u->dir_bytes))
		rc = -EMFILE;
	if (rc == 0)
		u->dir_bytes += bytes;
	size_t held = u ? u->dir_bytes : 0;
	if (u)
		user_put(m, u);
	pthread_mutex_unlock(&m->node_lock);
	if (rc == -EMFILE) {
		static _Atomic int64_t last;
		int64_t now = mf_now_s(), was = atomic_load(&last);
		if (now - was >= 60 &&
		    atomic_compare_exchange_strong(&last, &was, now))
			mfs_logf(m, MFS_LOG_WARN,
				 "uid %u holds %zu MiB of directory listings, "
				 "its bound: its further opendirs fail with "
				 "EMFILE until it closes some",
				 (unsigned)uid, held >> 20);
	}
	return rc;
}

void mfs_user_give_bytes(struct mfs *m, uid_t uid, size_t bytes)
{
	pthread_mutex_lock(&m->node_lock);
	struct mfs_user_fhs *u = user_get(m, uid);
	assert(u && u->dir_bytes >= bytes);
	if (u) {
		u->dir_bytes -= bytes <= u->dir_bytes ? bytes : u->dir_bytes;
		user_put(m, u);
	}
	pthread_mutex_unlock(&m->node_lock);
}

int mfs_user_take_batch(struct mfs *m, uid_t uid, size_t units, size_t bytes)
{
	pthread_mutex_lock(&m->node_lock);
	struct mfs_user_fhs *u = user_get(m, uid);
	int rc = u ? 0 : -ENOMEM;
	size_t cap = cap_of(m, MFS_HANDLE_SHARD);
	if (u &&
	    (u->n[MFS_HANDLE_SHARD] > cap ||
	     units > cap - u->n[MFS_HANDLE_SHARD]))
		rc = -EMFILE;
	/* as for listings: a uid's first plan is always let through */
	if (rc == 0 && u->plan_bytes &&
	    (u->plan_bytes >= MFS_PLAN_BYTES_CAP ||
	     bytes > MFS_PLAN_BYTES_CAP - u->plan_bytes))
		rc = -ENOMEM;
	if (rc == 0) {
		u->n[MFS_HANDLE_SHARD] += units;
		u->plan_bytes += bytes;
	}
	if (u)
		user_put(m, u);
	pthread_mutex_unlock(&m->node_lock);
	if (rc == -EMFILE) {
		mfs_user_capped(m, uid, MFS_HANDLE_SHARD);
	} else if (rc == -ENOMEM && u) {
		static _Atomic int64_t last;
		int64_t now = mf_now_s(), was = atomic_load(&last);
		if (now - was >= 60 &&
		    atomic_compare_exchange_strong(&last, &was, now))
			mfs_logf(m, MFS_LOG_WARN,
				 "uid %u holds %zu MiB of batch plans, its "
				 "bound: its further batch opens fail with "
				 "ENOMEM until it closes some",
				 (unsigned)uid, MFS_PLAN_BYTES_CAP >> 20);
	}
	return rc;
}

void mfs_user_give_batch(struct mfs *m, uid_t uid, size_t units, size_t bytes)
{
	pthread_mutex_lock(&m->node_lock);
	struct mfs_user_fhs *u = user_get(m, uid);
	assert(u && u->n[MFS_HANDLE_SHARD] >= units && u->plan_bytes >= bytes);
	if (u) {
		u->n[MFS_HANDLE_SHARD] -= units <= u->n[MFS_HANDLE_SHARD]
		    ? units
		    : u->n[MFS_HANDLE_SHARD];
		u->plan_bytes -= bytes <= u->plan_bytes ? bytes : u->plan_bytes;
		user_put(m, u);
	}
	pthread_mutex_unlock(&m->node_lock);
}
