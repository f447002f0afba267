#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryAgent
import FerryProtocol
import FerryStorage

// The file sink's erasure (docs/PROTOCOL.md, "File sink lines", and docs/CONSENT.md, "Erasure
// upstream"): the user's delivered lines are overwritten in place, each by an erased line of the
// same length. Offsets do not move, so the sink's checkpoint (file, length), a reader's position
// in a file and the exactly-once cut-back at start all stay valid, as the log's own erased records
// do; nothing is copied or renamed under a reader.

extension FileSink {
    /// Overwrites every delivered line of `request`'s user (a line holding `"user_id":"<id>"`)
    /// with an erased line of the same length: `{"line_format":3,"erased":true,"erasure":"<request
    /// id>"}` (or a shorter form that fits), padded with spaces before its newline. Returns how
    /// many lines it overwrote (`"<n> lines"`).
    ///
    /// Safe against `kill -9` and power cuts: each file is rewritten in two passes, each followed
    /// by `fdatasync` — first every byte of the matching lines but their `user_id` member, then
    /// that member — so a line torn by a power cut still matches when the request is run again
    /// (it stays pending until this returns). Running it again finds nothing left to overwrite.
    /// Crash points (docs/FAULTS.md): `sink.file.erase.pass1`, `sink.file.erase.pass2`, per file
    /// changed. Files are read in 1 MiB windows.
    public func erase(_ request: SinkErasure) async throws -> String? {
        var member: [UInt8] = Array(#""user_id":"#.utf8)
        JSONText.appendString(request.userID, to: &member)
        let needle = member, directory = self.directory, requestID = request.id, format = lineFormat
        let erased: Int
        do {
            erased = try await runOnSinkThread {
                // A directory that does not exist holds no line (listDirectory answers []); one
                // that cannot be read (a failing disk, ENOTDIR, EACCES) throws: retried, never
                // answered "sent" with the user's lines still there.
                var total = 0
                for name in try FileIO.listDirectory(directory).sorted() where Self.index(ofFileName: name) != nil {
                    total += try Self.eraseLines(in: directory + "/" + name, needle: needle, request: requestID, lineFormat: format)
                }
                return total
            }
        } catch {
            throw SinkError(.retry(after: nil), "file sink: erasure: \(error)")
        }
        return "\(erased) lines"
    }

    /// A line's replacement of exactly `length` bytes (its newline not counted).
    static func erasedLine(length: Int, request: String, lineFormat: Int) -> [UInt8] {
        let prefix = lineFormat >= 2 ? #"{"line_format":\#(lineFormat),"# : "{"
        let candidates = [prefix + #""erased":true,"erasure":"\#(request)"}"#, prefix + #""erased":true}"#, #"{"erased":true}"#, "{}"]
        let text = candidates.first { $0.utf8.count <= length } ?? ""
        return Array(text.utf8) + Array(repeating: UInt8(ascii: " "), count: max(0, length - text.utf8.count))
    }

    /// Overwrites the lines of `path` holding `needle`; returns how many.
    private static func eraseLines(in path: String, needle: [UInt8], request: String, lineFormat: Int) throws -> Int {
        let fd = try FileIO.open(path, O_RDWR)
        defer { close(fd) }
        let size = try FileIO.fileSize(fd, path: path)
        // (line start, line length, needle's offset in the line)
        var matches: [(start: Int64, length: Int, needle: Int)] = []
        var carry: [UInt8] = []
        var carryStart: Int64 = 0
        var offset: Int64 = 0
        while offset < size {
            let chunk = try FileIO.pread(fd, count: Int(min(Int64(1 << 20), size - offset)), at: offset, path: path)
            if chunk.isEmpty { break }
            offset += Int64(chunk.count)
            carry += chunk
            var lineStart = 0
            while let newline = carry[lineStart...].firstIndex(of: UInt8(ascii: "\n")) {
                let line = carry[lineStart..<newline]
                if let at = line.firstRange(of: needle) {
                    matches.append((carryStart + Int64(lineStart), line.count, at.lowerBound - lineStart))
                }
                lineStart = newline + 1
            }
            carryStart += Int64(lineStart)
            carry.removeFirst(lineStart)
        }
        guard !matches.isEmpty else { return 0 }
        // Pass 1: everything but the member that identifies the line as the user's.
        for match in matches {
            let line = erasedLine(length: match.length, request: request, lineFormat: lineFormat)
            let keep = match.needle..<min(match.length, match.needle + needle.count)
            try line[..<keep.lowerBound].withUnsafeBytes { try FileIO.pwriteAll(fd, $0, at: match.start, path: path) }
            try line[keep.upperBound...].withUnsafeBytes {
                try FileIO.pwriteAll(fd, $0, at: match.start + Int64(keep.upperBound), path: path)
            }
        }
        try FileIO.fdatasync(fd, path: path)
        try CrashPoints.reach("sink.file.erase.pass1")
        // Pass 2: the member itself.
        for match in matches {
            let line = erasedLine(length: match.length, request: request, lineFormat: lineFormat)
            let keep = match.needle..<min(match.length, match.needle + needle.count)
            try line[keep].withUnsafeBytes { try FileIO.pwriteAll(fd, $0, at: match.start + Int64(keep.lowerBound), path: path) }
        }
        try FileIO.fdatasync(fd, path: path)
        try CrashPoints.reach("sink.file.erase.pass2")
        return matches.count
    }
}
