#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import FerryThreads
import Synchronization

/// Reads lines from a file descriptor as they arrive (`tail -f log | ferry emit --stdin`): each
/// `read(2)` returns what the pipe holds, so a line is handed on as soon as its newline is there,
/// never held back until end of input. The blocking reads run on a thread of their own, and the
/// next read starts only when the caller asks, so a slow consumer pauses the reading.
final class LineReader: Sendable {
    private let descriptor: CInt
    private let executor = BlockingExecutor(name: "ferry-stdin")
    private let buffered = Mutex<[UInt8]>([])

    /// A reader of `descriptor` (standard input by default).
    init(descriptor: CInt = STDIN_FILENO) {
        self.descriptor = descriptor
    }

    deinit {
        executor.shutdown()
    }

    /// The next complete lines (without their `\n` or `\r\n`), at least one; nil at end of
    /// input. A last line without a newline counts as a line.
    func next() async throws -> [[UInt8]]? {
        try await executor.run { [self] in
            try buffered.withLock { pending -> [[UInt8]]? in
                var chunk = [UInt8](repeating: 0, count: 64 * 1024)
                while true {
                    if let lastNewline = pending.lastIndex(of: UInt8(ascii: "\n")) {
                        var lines = pending[..<lastNewline].split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
                            .map { Array($0) }
                        pending.removeSubrange(...lastNewline)
                        for index in lines.indices where lines[index].last == UInt8(ascii: "\r") { lines[index].removeLast() }
                        return lines
                    }
                    let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                    if count < 0 {
                        if errno == EINTR { continue }
                        throw LineReaderError(errno: errno)
                    }
                    if count == 0 {
                        guard !pending.isEmpty else { return nil }
                        defer { pending = [] }
                        return [pending.last == UInt8(ascii: "\r") ? Array(pending.dropLast()) : pending]
                    }
                    pending += chunk[..<count]
                }
            }
        }
    }
}

/// `read(2)` of standard input failed.
struct LineReaderError: Error, CustomStringConvertible {
    var errno: CInt
    var description: String { "reading standard input failed: \(String(cString: strerror(errno)))" }
}
