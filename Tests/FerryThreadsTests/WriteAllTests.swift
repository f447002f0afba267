#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryThreads
import Testing

@Suite("writeAll")
struct WriteAllTests {
    @Test("every byte arrives, in order")
    func wholeBuffer() throws {
        var ends: [CInt] = [0, 0]
        try #require(pipe(&ends) == 0)
        defer { close(ends[0]) }
        let bytes = (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        #expect(writeAll(ends[1], bytes) == 0)
        close(ends[1])
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(ends[0], $0.baseAddress, $0.count) }
            if count <= 0 { break }
            received += chunk[..<count]
        }
        #expect(received == bytes)
    }

    @Test("a failed write returns its errno; nothing to write is no write")
    func failure() {
        #expect(writeAll(-1, [1, 2, 3]) == EBADF)
        #expect(writeAll(-1, []) == 0)
    }
}
