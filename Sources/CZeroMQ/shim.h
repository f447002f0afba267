#ifndef CZEROMQ_SHIM_H
#define CZEROMQ_SHIM_H

#include <zmq.h>
#include <errno.h>

/// `zmq_msg_t` is an opaque 64-byte struct; Swift imports it fine, but the
/// accessors below keep the errno read right next to the call that set it.
static inline int CZeroMQ_errno(void) { return zmq_errno(); }

/// Size of the message body; `zmq_msg_size` itself takes a non-const pointer.
static inline size_t CZeroMQ_msg_size(zmq_msg_t *msg) { return zmq_msg_size(msg); }

#endif
