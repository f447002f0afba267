import CZlib

/// gzip (RFC 1952) request bodies, inflated through the system zlib with a bound on the output,
/// so a small body that inflates to gigabytes (a gzip bomb) costs at most the bound. The one
/// inflater of the package: FerryIntegrationKit's `Gunzip` (the test HTTP server) calls it too.
package enum BoundedGunzip {
    /// Why a body could not be inflated.
    package enum Failure: Error, Equatable {
        /// It would inflate beyond the bound.
        case tooLarge
        /// It is not gzip data, or it is damaged or cut short.
        case corrupt(String)
    }

    /// The content of gzip data `bytes` (concatenated members are joined), at most `limit` bytes.
    package static func inflate(_ bytes: [UInt8], limit: Int) throws(Failure) -> [UInt8] {
        var stream = z_stream()
        // Window bits 31: 15 + 16 selects the gzip wrapper.
        guard CZlib_inflateInit2(&stream, 31) == Z_OK else { throw .corrupt("inflateInit2 failed") }
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
                    let status = CZlib.inflate(&stream, Z_NO_FLUSH)
                    return (status, input.count - consumed - Int(stream.avail_in), out.count - Int(stream.avail_out))
                }
            }
            consumed += used
            guard output.count + produced <= limit else { throw .tooLarge }
            output += chunk[..<produced]
            switch status {
            case Z_STREAM_END:
                if consumed == bytes.count { return output }
                inflateReset(&stream)
            case Z_OK, Z_BUF_ERROR:
                if used == 0 && produced == 0 { throw .corrupt("the gzip data is cut short") }
            default:
                throw .corrupt("the gzip data is damaged (zlib status \(status))")
            }
        }
    }
}
