import CZlib
import FerryAgent

/// gzip (RFC 1952) through the system zlib: `deflateInit2` with window bits 31 (15 + 16 selects
/// the gzip wrapper instead of zlib's).
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

    /// The content of gzip data `bytes` (concatenated members are joined); throws if the data is
    /// damaged or would inflate beyond `limit` bytes.
    package static func decompress(_ bytes: [UInt8], limit: Int = 64 << 20) throws(AgentError) -> [UInt8] {
        var stream = z_stream()
        guard CZlib_inflateInit2(&stream, 31) == Z_OK else {
            throw AgentError(code: .corrupt, message: "gzip: inflateInit2 failed")
        }
        defer { inflateEnd(&stream) }
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        var consumed = 0
        while true {
            let (status, used, produced) = bytes.withUnsafeBufferPointer { input in
                chunk.withUnsafeMutableBufferPointer { out -> (Int32, Int, Int) in
                    stream.next_in = input.baseAddress.map { UnsafeMutablePointer(mutating: $0 + consumed) }
                    stream.avail_in = uInt(input.count - consumed)
                    stream.next_out = out.baseAddress
                    stream.avail_out = uInt(out.count)
                    let status = inflate(&stream, Z_NO_FLUSH)
                    return (status, input.count - consumed - Int(stream.avail_in), out.count - Int(stream.avail_out))
                }
            }
            consumed += used
            output += chunk[..<produced]
            guard output.count <= limit else { throw AgentError(code: .corrupt, message: "gzip: content exceeds \(limit) bytes") }
            switch status {
            case Z_STREAM_END:
                if consumed == bytes.count { return output }
                // Another member follows.
                inflateReset(&stream)
            case Z_OK, Z_BUF_ERROR:
                if used == 0 && produced == 0 { throw AgentError(code: .corrupt, message: "gzip: truncated data") }
            default:
                throw AgentError(code: .corrupt, message: "gzip: damaged data (\(status))")
            }
        }
    }
}
