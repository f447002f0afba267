// Hardware CRC-32C (SSE4.2 CRC32 instruction), chosen at run time by FerryProtocol.CRC32C.
#include "CFerryCRC32C.h"
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>

int CFerryCRC32C_hardwareAvailable(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return (ecx & bit_SSE4_2) != 0;
}

__attribute__((target("sse4.2")))
uint32_t CFerryCRC32C_hardware(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *p = bytes;
    uint64_t c = ~crc;
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = __builtin_ia32_crc32di(c, word);
        p += 8;
        count -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (count > 0) {
        c32 = __builtin_ia32_crc32qi(c32, *p++);
        count--;
    }
    return ~c32;
}
#else
int CFerryCRC32C_hardwareAvailable(void) { return 0; }
uint32_t CFerryCRC32C_hardware(uint32_t crc, const void *bytes, size_t count) {
    (void)bytes; (void)count;
    return crc;
}
#endif
