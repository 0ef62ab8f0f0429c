/*
 * uring.h - the io_uring implementation of the device seam (dev.h):
 * liburing, O_DIRECT, devices opened exclusively, the RAM arena registered
 * as fixed buffers. Tests wrap uring_dev_ops to inject errors, short
 * transfers and latency.
 */
#ifndef KVT_URING_H
#define KVT_URING_H

#include "dev.h"

extern const struct kvt_dev_ops uring_dev_ops;

#endif
