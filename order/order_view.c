/*
 * order_view.c - batches and rank views of a batch order: global batch g
 * is places [g B, (g+1) B); rank R of W from G holds global batches
 * G + R + kW, and only whole rounds (k < rounds, a round being the W
 * batches G + kW .. G + kW + W - 1), so every rank counts the same.
 *
 * Every number is at most MF_ORDER_MAX (2^63 - 1), so the products and
 * sums below are formed in 128 bits or bounded first and never wrap.
 */
#include "mf_order.h"

#include <errno.h>

__extension__ typedef unsigned __int128 u128;

int mf_order_view_check(const struct mf_order_view *v)
{
	if (v->batch < 1 || v->batch > MF_ORDER_MAX || v->world < 1 ||
	    v->world > MF_ORDER_MAX || v->rank >= v->world ||
	    v->from > MF_ORDER_MAX)
		return -EINVAL;
	return 0;
}

/* Whole rounds of the view among nbatches global batches. */
static uint64_t view_rounds(const struct mf_order_view *v, uint64_t nbatches)
{
	return nbatches > v->from ? (nbatches - v->from) / v->world : 0;
}

int mf_order_view_count(const struct mf_order *o, const struct mf_order_view *v,
			uint64_t *count, bool *complete)
{
	int rc = mf_order_view_check(v);
	if (rc)
		return rc;
	*count = view_rounds(v, mf_order_known(o) / v->batch);
	*complete = mf_order_complete(o);
	return 0;
}

int mf_order_view_batch(const struct mf_order *o, const struct mf_order_view *v,
			uint64_t k, uint64_t *g)
{
	int rc = mf_order_view_check(v);
	if (rc)
		return rc;
	if (k > MF_ORDER_MAX)
		return -EINVAL;
	/* Round k is whole when its last batch, G + kW + W - 1, ends within
	 * the records: (G + (k + 1) W) B places are needed. */
	u128 need = ((u128)v->from + ((u128)k + 1) * v->world) * v->batch;
	if (need > MF_ORDER_MAX)
		return -ENOENT; /* more than any epoch holds */
	if (need > mf_order_known(o))
		return mf_order_complete(o) ? -ENOENT : -EAGAIN;
	*g = v->from + v->rank + k * v->world;
	return 0;
}
