/*
 * striped.c - which stripe of a struct kvt_striped counter (internal.h) the
 * calling thread adds to: threads take stripes in turn at their first add,
 * so up to KVT_STRIPES threads write no cache line in common. Knows nothing
 * about what is counted.
 */
#include "internal.h"

static unsigned next_stripe;
static _Thread_local unsigned my_stripe; /* stripe + 1; 0: none yet */

unsigned kvt_stripe(void)
{
	if (!my_stripe)
		my_stripe = __atomic_fetch_add(&next_stripe, 1, __ATOMIC_RELAXED) %
			    KVT_STRIPES + 1;
	return my_stripe - 1;
}
