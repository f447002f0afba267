#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import FerryStorage
import Foundation

/// Start-up repair of the consent audit log's end.
///
/// A change writes its audit entry (fdatasync'd), then the state file that reflects it, and is
/// answered only after both. A crash in between leaves an entry — whole, or torn by a power cut —
/// after the head the state file records: a change that never took effect and was never
/// acknowledged. The next change is chained to the state's head, so such a tail would break the
/// chain for good (the power-cut explorer found it: docs/FAULTS.md section 7). It is cut off.
enum AuditTail {
    /// Cuts everything after the entry the state records as its head (`seq` 0: everything),
    /// provided that entry is where the state says it is; returns the bytes cut. Left alone
    /// otherwise, for verification to report.
    static func trim(path: String, head: (seq: Int, hash: String)) throws -> Int {
        guard let bytes = try FileIO.readFile(path) else { return 0 }
        var end = 0  // where the head's line ends (0: before the first line)
        if head.seq > 0 {
            var found = false
            var start = 0
            var number = 0
            while start < bytes.count, let newline = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) {
                number += 1
                if number == head.seq {
                    guard let entry = try? JSONDecoder().decode(AuditEntry.self, from: Data(bytes[start..<newline])),
                          entry.seq == head.seq, entry.hash == head.hash else { return 0 }
                    end = newline + 1
                    found = true
                    break
                }
                start = newline + 1
            }
            guard found else { return 0 }
        }
        guard bytes.count > end else { return 0 }
        let fd = try FileIO.open(path, O_WRONLY)
        defer { close(fd) }
        try FileIO.ftruncate(fd, Int64(end), path: path)
        try FileIO.fdatasync(fd, path: path)
        return bytes.count - end
    }
}
