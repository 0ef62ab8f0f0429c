/*
 * faultdev.h - a device layer for tests that injects faults around the real
 * io_uring one (uring_dev_ops): failed, short, delayed or scribbled I/O, a
 * queue that breaks, and a device that reports other request limits. The
 * disk tier takes it through disk_open_cfg(); a store through
 * store_dev_ops. Counters are atomic, so tests set them while I/O runs.
 */
#ifndef KVT_TESTS_FAULTDEV_H
#define KVT_TESTS_FAULTDEV_H

#include <stdatomic.h>
#include <stdint.h>

#include "dev.h"

/* The fds whose writes faults.unsynced follows. */
enum { FAULT_FDS = 1024 };

struct fault_state {
	_Atomic int fail_reads;   /* next N reads complete with -EIO */
	_Atomic int fail_writes;  /* next N writes complete with -EIO */
	_Atomic int short_reads;  /* next N reads report half their length */
	_Atomic int delay_us;     /* sleep before every reap */
	_Atomic int break_reaps;  /* next N reaps fail (the queue is broken) */
	_Atomic int broken_used;  /* submissions to a queue after it broke */
	_Atomic int closes;       /* queues closed */
	_Atomic int scribble_len; /* the next read of this length: its first
				     byte (a vectored read: its last
				     segment's) changed after it completes
				     (another writer of the buffer) */
	_Atomic uint64_t max_req;   /* the bytes the device says one request
				       carries (0: the real device's) */
	_Atomic unsigned max_segs;  /* the memory segments it says one request
				       carries (0: the real device's;
				       SEGS_UNKNOWN: that it does not know,
				       as tmpfs) */
	_Atomic int writes;       /* writes submitted to the device */
	_Atomic int reads_out;    /* reads submitted to the device, not reaped */
	_Atomic int nread_log;    /* reads_out before each read went out, */
	int read_log[256];        /* in submission order (the first 256) */
	_Atomic int fail_errno;   /* what failed ios complete with (0: EIO) */
	/* per fd (below FAULT_FDS): 1 once a write to it was submitted, 0
	   again at its dev_sync; so 1 marks writes not made durable */
	_Atomic unsigned char unsynced[FAULT_FDS];
};

/* What the next I/O does; all zero is the real device unchanged. */
extern struct fault_state faults;

/* uring_dev_ops with the queue calls and dev_sync wrapped; set by
 * faultdev_init(). */
extern struct kvt_dev_ops fops;

/* faults.max_segs: the device says it does not know (as tmpfs). */
enum { SEGS_UNKNOWN = 0xffffffffu };

/* Fills fops from uring_dev_ops; call once before using it. */
void faultdev_init(void);

#endif
