#ifndef CFERRYCRC32C_H
#define CFERRYCRC32C_H

#include <stddef.h>
#include <stdint.h>

/// 1 if this CPU has the SSE4.2 CRC32 instruction (x86-64), else 0.
int CFerryCRC32C_hardwareAvailable(void);

/// CRC-32C of `count` bytes continuing from `crc` (0 to start), using the CRC32 instruction.
/// Only call when CFerryCRC32C_hardwareAvailable() returned 1.
uint32_t CFerryCRC32C_hardware(uint32_t crc, const void *bytes, size_t count);

#endif
