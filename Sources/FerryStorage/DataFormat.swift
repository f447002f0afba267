/// The format of a data directory, recorded in `<data>/FORMAT` (`ferry-data <n>` and a newline).
///
/// - Format 1: what ferryd wrote before the marker existed (no `FORMAT` file): event records of
///   kind ``LogRecord/Kind/event``.
/// - Format 2: records of kind ``LogRecord/Kind/eventWithMetadata``, erased records that keep
///   the client session and sequence, the session table snapshot (`sessions.snapshot`).
///
/// A ferryd reads every format up to its own and upgrades the marker before it writes anything
/// in its own format; it refuses a directory whose format is newer than it knows, so an older
/// ferryd never mistakes records it cannot read for damage. (Ferryd builds from before the
/// marker do not read it: see "Upgrading" in docs/PROTOCOL.md.)
public enum DataFormat {
    /// The format this build writes.
    public static let current = 2
    /// The marker file's name inside the data directory.
    public static let fileName = "FORMAT"

    /// The format recorded in `directory`: `nil` when there is no marker (format 1, or an empty
    /// new directory). Throws ``StorageError/Code/corrupt`` for a marker that cannot be read.
    public static func recorded(in directory: String) throws -> Int? {
        let path = directory + "/" + fileName
        guard let bytes = try FileIO.readFile(path) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self)
        let parts = text.split(whereSeparator: \.isWhitespace)
        guard parts.count == 2, parts[0] == "ferry-data", let format = Int(parts[1]), format >= 1 else {
            throw StorageError(code: .corrupt, message: "\(path) is not a Ferry data format marker (expected \"ferry-data <n>\")")
        }
        return format
    }

    /// Checks `directory` before anything in it is read or written, then records ``current``
    /// durably. Returns the format found (`nil`: no marker). Throws ``StorageError/Code/corrupt``
    /// naming the path and both versions when the directory is newer than this build.
    @discardableResult
    public static func prepare(_ directory: String) throws -> Int? {
        let found = try recorded(in: directory)
        if let found, found > current {
            throw StorageError(
                code: .corrupt,
                message: "data directory \(directory) has data format \(found), written by a newer ferryd; "
                    + "this ferryd reads formats 1 to \(current). Run the newer ferryd, or point this one at another data directory")
        }
        if found != current {
            try FileIO.writeAtomically(Array("ferry-data \(current)\n".utf8), to: directory + "/" + fileName)
        }
        return found
    }
}
