#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes all of `bytes` to the blocking descriptor `fd`: as many `write(2)` calls as it takes (a
/// pipe or a terminal may take part of them), again after `EINTR`. Returns 0, or the `errno` of
/// the write that failed (what was written before it stays written).
@discardableResult
package func writeAll(_ fd: CInt, _ bytes: [UInt8]) -> CInt {
    var rest = bytes[...]
    while !rest.isEmpty {
        let written = rest.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if written < 0 {
            if errno == EINTR { continue }
            return errno
        }
        rest = rest.dropFirst(written)
    }
    return 0
}
