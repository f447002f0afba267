#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryAgent
import FerryProtocol
import FerryStorage
import FerryThreads
import Synchronization

/// The default sink: JSON Lines files in a directory, one event object per line.
///
/// Files are named `events-<20-digit sequence>.jsonl` and rolled at a size limit. Every line is
/// one event in line format ``lineFormat`` (docs/PROTOCOL.md, "File sink lines"). Each batch is
/// appended and `fdatasync`'d; its checkpoint (file and length) is then stored atomically with the
/// delivery cursor (one in-place write and `fdatasync`, ``CursorStore/save(_:checkpoint:)``), and
/// on start the current file is cut back to the checkpoint, so a crash between the write and the
/// cursor update never leaves a line twice: delivery to this sink is exactly-once. A reader sees a
/// batch's lines from its write on; only lines past the stored checkpoint (the batch in hand when
/// the agent stopped) can be cut back at the next start, and are then written again. Batches are
/// paced by the delivery loop (``DeliveryPacing``): a trickle of events costs one write and two
/// syncs per `batch.maxWaitMilliseconds`, not per event.
///
/// The file being written stays open between batches, as the cursor file does
/// (``CursorStore``): a batch costs an `lstat` of the file's path (is it still the file opened?),
/// its `pwrite` and its `fdatasync`. The file is opened anew when it rolls, when its path names
/// another file or none (moved away, replaced or removed by someone else: the lines then go where
/// the path points, as before), and after a failed write. An erasure overwrites lines in place,
/// through a descriptor of its own: the file stays the same, and so does the one kept open.
public final class FileSink: Sink {
    public let name: String
    /// The directory the files are written to.
    public let directory: String
    private let maxFileBytes: Int64
    /// The line format written: 3 (the default) starts each line with `"line_format":3` and
    /// writes the consent stamp of this release (``ConsentStampStyle/current``: `consent_seq` a
    /// number, `ad_personalization`); 2 wrote `ads_personalization`, and 1 (no `line_format`)
    /// `consent_seq` as a string too. The older formats are kept for readers not yet updated.
    public let lineFormat: Int
    private let state = Mutex<State>(State())
    private let io: BlockingExecutor

    private struct State {
        var fileIndex: UInt64 = 1
        var length: Int64 = 0
        /// The file being written, kept open between batches (used on the sink's thread only).
        var output: Output?
    }

    /// The open file of ``State/fileIndex``: its descriptor, and the device and inode it had when
    /// opened, to notice the path naming another file (rotated away, replaced or removed).
    private struct Output {
        var fd: CInt
        var device: UInt64
        var inode: UInt64
    }

    deinit {
        if let output = state.withLock({ $0.output }) { close(output.fd) }
    }

    /// Creates a sink named `name` writing into `directory` (created 0700 if missing), with a
    /// thread of its own for its file I/O.
    public convenience init(
        name: String = "file", directory: String, maxFileBytes: Int64 = 64 << 20, lineFormat: Int = FileSink.currentLineFormat
    ) {
        self.init(name: name, directory: directory, maxFileBytes: maxFileBytes, lineFormat: lineFormat,
                  io: BlockingExecutor(name: "ferry-sink-" + name))
    }

    /// Creates a sink whose file I/O runs on `io` (its delivery loop's thread).
    package init(name: String, directory: String, maxFileBytes: Int64, lineFormat: Int = FileSink.currentLineFormat, io: BlockingExecutor) {
        self.name = name
        self.directory = directory
        self.maxFileBytes = maxFileBytes
        self.lineFormat = lineFormat
        self.io = io
    }

    /// The newest line format, written by default (``LineFormat/current``).
    public static let currentLineFormat = LineFormat.current
    /// The line formats this sink can write (``LineFormat/all``).
    public static let lineFormats = LineFormat.all

    /// The file name for sequence `index`.
    public static func fileName(_ index: UInt64) -> String {
        "events-" + SegmentFile.paddedIndex(index) + ".jsonl"
    }

    private var currentPath: String { directory + "/" + Self.fileName(state.withLock { $0.fileIndex }) }

    public func recover(checkpoint: [UInt8]?) async throws -> [UInt8]? {
        let directory = self.directory
        try await io.run { [self] in
            try FileIO.makeDirectory(directory, mode: 0o700)
            guard let checkpoint, checkpoint.count == 16 else {
                // No checkpoint: continue after the newest existing file, never rewriting one.
                let newest = try FileIO.listDirectory(directory).compactMap(Self.index(ofFileName:)).max() ?? 0
                state.withLock { $0 = State(fileIndex: newest + 1, length: 0, output: $0.output) }
                return
            }
            let index: UInt64 = readLE(checkpoint, at: 0)
            let length: Int64 = readLE(checkpoint, at: 8)
            state.withLock { $0 = State(fileIndex: index, length: length, output: $0.output) }
            // Cut away anything written after the checkpoint (a batch whose cursor never got
            // stored: it will be delivered again).
            let path = currentPath
            if let fd = try? FileIO.open(path, O_WRONLY) {
                defer { close(fd) }
                if try FileIO.fileSize(fd, path: path) > length {
                    try FileIO.ftruncate(fd, length, path: path)
                    try FileIO.fsync(fd, path: path)
                }
            }
            // Later files can only hold uncommitted batches too.
            for name in try FileIO.listDirectory(directory) {
                if let other = Self.index(ofFileName: name), other > index { try FileIO.unlink(directory + "/" + name) }
            }
        }
        return Self.encode(state.withLock { $0 })
    }

    private static func encode(_ state: State) -> [UInt8] {
        var checkpoint: [UInt8] = []
        appendLE(state.fileIndex, to: &checkpoint)
        appendLE(state.length, to: &checkpoint)
        return checkpoint
    }

    static func index(ofFileName name: String) -> UInt64? {
        guard name.hasPrefix("events-"), name.hasSuffix(".jsonl") else { return nil }
        return UInt64(name.dropFirst(7).dropLast(6))
    }

    public func deliver(_ batch: DeliveryBatch) async throws -> [UInt8]? {
        var lines: [UInt8] = []
        // About twice the stored size (JSON text and origin around each frame): one allocation.
        lines.reserveCapacity(batch.events.reduce(0) { $0 + $1.size } * 2)
        let stamp = Self.consentJSON(batch.consent, lineFormat: lineFormat)
        let disclosure = batch.disclosure ?? .all
        Self.appendLines(for: batch.events, consent: stamp, lineFormat: lineFormat, disclosure: disclosure, to: &lines)
        let payload = lines
        return try await io.run { [self] () throws -> [UInt8] in
            var current = state.withLock { $0 }
            if current.length > 0 && current.length + Int64(payload.count) > maxFileBytes {
                if let output = current.output { close(output.fd) }
                current = State(fileIndex: current.fileIndex + 1, length: 0)
            }
            let path = directory + "/" + Self.fileName(current.fileIndex)
            do {
                let (fd, created) = try Self.open(path, keeping: &current.output)
                try payload.withUnsafeBytes { raw in try FileIO.pwriteAll(fd, raw, at: current.length, path: path) }
                try CrashPoints.reach("sink.file.written")
                try FileIO.fdatasync(fd, path: path)
                if created || current.length == 0 { try FileIO.syncDirectory(directory) }
                try CrashPoints.reach("sink.file.synced")
            } catch {
                // Whatever failed, the next attempt opens the file afresh.
                if let output = current.output { close(output.fd) }
                current.output = nil
                state.withLock { $0 = current }
                throw SinkError(.retry(after: nil), "file sink: \(error)")
            }
            current.length += Int64(payload.count)
            state.withLock { $0 = current }
            return Self.encode(current)
        }
    }

    /// The descriptor to write `path` through: `output`'s when the path still names the file it
    /// opened (one `lstat`), else `path` opened anew (created if missing) and kept in `output`.
    /// `created`: this call created the file (its directory entry is not yet durable).
    ///
    /// Crash point `sink.file.opened` (docs/FAULTS.md): a file opened (a new one created empty),
    /// nothing written through it yet.
    private static func open(_ path: String, keeping output: inout Output?) throws -> (fd: CInt, created: Bool) {
        if let kept = output {
            var named = stat()
            if lstat(path, &named) == 0 && UInt64(named.st_dev) == kept.device && UInt64(named.st_ino) == kept.inode {
                return (kept.fd, false)
            }
            // Rotated away, replaced or removed under the sink: write where the path points now.
            close(kept.fd)
            output = nil
        }
        let (fd, created) = try FileIO.openCreating(path, O_WRONLY)
        var opened = stat()
        guard fstat(fd, &opened) == 0 else {
            let error = StorageError.system("fstat", path: path, errno: errno)
            close(fd)
            throw error
        }
        output = Output(fd: fd, device: UInt64(opened.st_dev), inode: UInt64(opened.st_ino))
        try CrashPoints.reach("sink.file.opened")
        return (fd, created)
    }

    /// Closes the file kept open, on the sink's thread.
    public func shutdown() async throws {
        await io.run { [self] in
            let output = state.withLock { state -> Output? in
                defer { state.output = nil }
                return state.output
            }
            if let output { close(output.fd) }
        }
    }

    /// Runs `body` on the sink's thread (after any write in progress there).
    func runOnSinkThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await io.run(body)
    }

    /// One JSON object line for `event` (``JSONWriter/storedEventObject(_:consent:)``) and a newline;
    /// `consent` is the batch's consent stamp as a JSON object. From line format 2 on, the line
    /// starts with `"line_format":N`, so a reader can tell the format of every line. `disclosure`
    /// leaves out what the sink's `disclose` setting withholds.
    static func appendLine(for stored: StoredEvent, consent: [UInt8]? = nil, lineFormat: Int = currentLineFormat,
                           disclosure: Disclosure = .all, to out: inout [UInt8]) {
        JSONWriter.appendLine(for: stored, consent: consent, lineFormat: lineFormat >= 2 ? UInt64(lineFormat) : nil,
                              disclosure: disclosure, to: &out)
    }

    /// ``appendLine(for:consent:lineFormat:disclosure:to:)`` of each of `events`, in order: a
    /// batch's lines, as the sink writes them (an origin repeated from the event before is
    /// copied, not written anew).
    static func appendLines(for events: [StoredEvent], consent: [UInt8]? = nil, lineFormat: Int = currentLineFormat,
                            disclosure: Disclosure = .all, to out: inout [UInt8]) {
        JSONWriter.appendLines(for: events, consent: consent, lineFormat: lineFormat >= 2 ? UInt64(lineFormat) : nil,
                               disclosure: disclosure, to: &out)
    }

    /// The consent stamp as a JSON object, or `nil` when empty, in the style of line format
    /// `lineFormat` (``LineFormat/consentJSON(_:lineFormat:)``).
    package static func consentJSON(_ stamp: [String: String], lineFormat: Int = currentLineFormat) -> [UInt8]? {
        LineFormat.consentJSON(stamp, lineFormat: lineFormat)
    }
}

