import CZlib
import FerryTestKit

/// gzip (RFC 1952) decompression through the system zlib, for the test HTTP server: the agent
/// only compresses (FerryHTTPSink's `Gzip.compress`), so inflating lives here, on the test side.
public enum Gunzip {
    /// Why gzip data could not be decompressed.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// What went wrong.
        public var message: String
        /// The message, as `corrupt: <message>` (what the agent's errors print).
        public var description: String { "corrupt: \(message)" }
    }

    /// The content of gzip data `bytes` (concatenated members are joined); throws if the data is
    /// damaged or would inflate beyond `limit` bytes.
    public static func decompress(_ bytes: [UInt8], limit: Int = 64 << 20) throws(Failure) -> [UInt8] {
        var stream = z_stream()
        // Window bits 31: 15 + 16 selects the gzip wrapper instead of zlib's.
        guard CZlib_inflateInit2(&stream, 31) == Z_OK else {
            throw Failure(message: "gzip: inflateInit2 failed")
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
            guard output.count <= limit else { throw Failure(message: "gzip: content exceeds \(limit) bytes") }
            switch status {
            case Z_STREAM_END:
                if consumed == bytes.count { return output }
                // Another member follows.
                inflateReset(&stream)
            case Z_OK, Z_BUF_ERROR:
                if used == 0 && produced == 0 { throw Failure(message: "gzip: truncated data") }
            default:
                throw Failure(message: "gzip: damaged data (\(status))")
            }
        }
    }
}
