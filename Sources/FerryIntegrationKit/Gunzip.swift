import FerryHTTPIngest
import FerryTestKit

/// gzip (RFC 1952) decompression for the test HTTP server, through the agent's own bounded
/// inflater (FerryHTTPIngest's `BoundedGunzip`, which inflates the local HTTP API's bodies).
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
        do {
            return try BoundedGunzip.inflate(bytes, limit: limit)
        } catch {
            switch error {
            case .tooLarge: throw Failure(message: "gzip: content exceeds \(limit) bytes")
            case .corrupt(let message): throw Failure(message: "gzip: \(message)")
            }
        }
    }
}
