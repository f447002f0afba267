import CZlib
import FerryAgent

/// gzip (RFC 1952) through the system zlib: `deflateInit2` with window bits 31 (15 + 16 selects
/// the gzip wrapper instead of zlib's). Compression only: the test HTTP server's decompression is
/// FerryIntegrationKit's `Gunzip`.
package enum Gzip {
    /// `bytes` compressed as one gzip member.
    package static func compress(_ bytes: [UInt8], level: Int32 = 6) throws(AgentError) -> [UInt8] {
        var stream = z_stream()
        guard CZlib_deflateInit2(&stream, level, 31) == Z_OK else {
            throw AgentError(code: .delivery, message: "gzip: deflateInit2 failed")
        }
        defer { deflateEnd(&stream) }
        var output = [UInt8](repeating: 0, count: Int(deflateBound(&stream, uLong(bytes.count))))
        let status = bytes.withUnsafeBufferPointer { input in
            output.withUnsafeMutableBufferPointer { out -> Int32 in
                stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
                stream.avail_in = uInt(input.count)
                stream.next_out = out.baseAddress
                stream.avail_out = uInt(out.count)
                // deflateBound guarantees one Z_FINISH call is enough.
                return deflate(&stream, Z_FINISH)
            }
        }
        guard status == Z_STREAM_END else {
            throw AgentError(code: .delivery, message: "gzip: deflate failed (\(status))")
        }
        output.removeSubrange(Int(stream.total_out)...)
        return output
    }
}
