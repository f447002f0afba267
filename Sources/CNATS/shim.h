#ifndef CNATS_SHIM_H
#define CNATS_SHIM_H

#include <nats/nats.h>

/// The text nats.c keeps for the calling thread's last error (more precise than
/// `natsStatus_GetText`, e.g. "no server available for connection"). Read it right after the
/// failing call, on the same thread. Never NULL.
static inline const char *CNATS_lastErrorText(void) {
    natsStatus status = NATS_OK;
    const char *text = nats_GetLastError(&status);
    return text != NULL ? text : "";
}

#endif
