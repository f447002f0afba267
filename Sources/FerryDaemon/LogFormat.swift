#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ArgumentParser
import FerryProtocol
import FerryThreads
import Foundation
import Logging
import Synchronization

/// How `ferryd` writes its log lines to standard error (`--log-format`).
public enum LogFormat: String, Sendable, CaseIterable, ExpressibleByArgument {
    /// `2026-11-22T22:04:05+0000 info ferryd: message key=value`, for people.
    case text
    /// One JSON object per line, for log shippers:
    /// `{"ts":"2026-11-22T22:04:05.123Z","level":"info","label":"ferryd","source":"FerryAgent","msg":"…","metadata":{"key":"value"}}`.
    case json
    /// For journald: each line starts with its syslog priority (`<7>` debug and trace, `<6>` info,
    /// `<5>` notice, `<4>` warning, `<3>` error, `<2>` critical), no timestamp (journald adds its own).
    case journal

    /// The default: ``journal`` when standard error is the journal's stream (`JOURNAL_STREAM`
    /// names its device and inode, as systemd sets it for a service's stderr), else ``text``.
    public static func automatic(environment: [String: String] = ProcessInfo.processInfo.environment) -> LogFormat {
        guard let stream = environment["JOURNAL_STREAM"] else { return .text }
        var info = stat()
        guard fstat(STDERR_FILENO, &info) == 0 else { return .text }
        return journalStream(stream, matchesDevice: UInt64(info.st_dev), inode: UInt64(info.st_ino)) ? .journal : .text
    }

    /// Whether `JOURNAL_STREAM`'s value (`<device>:<inode>`, both decimal) names this device and inode.
    public static func journalStream(_ value: String, matchesDevice device: UInt64, inode: UInt64) -> Bool {
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let streamDevice = UInt64(parts[0]), let streamInode = UInt64(parts[1]) else { return false }
        return streamDevice == device && streamInode == inode
    }
}

/// `ferryd`'s log handler: writes each message as one line in a ``LogFormat`` (one `write` per
/// line, so lines from several threads never interleave).
public struct FerryLogHandler: LogHandler {
    /// The logger's label.
    public let label: String
    /// The line format.
    public let format: LogFormat
    /// The handler's metadata, on every line.
    public var metadata: Logger.Metadata = [:]
    /// The least severe level written.
    public var logLevel: Logger.Level = .info
    /// Adds metadata to every line (task-local context and the like).
    public var metadataProvider: Logger.MetadataProvider?
    private let output: @Sendable (String) -> Void

    /// A handler for `label` writing lines in `format` to `output` (standard error by default).
    /// `output` gets each line with its trailing newline.
    public init(
        label: String, format: LogFormat, metadataProvider: Logger.MetadataProvider? = nil,
        output: @escaping @Sendable (String) -> Void = FerryLogHandler.standardError
    ) {
        self.label = label
        self.format = format
        self.metadataProvider = metadataProvider
        self.output = output
    }

    /// Metadata for `key`.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Formats and writes one message.
    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let metadata = event.metadata { merged.merge(metadata) { $1 } }
        output(Self.line(format: format, label: label, level: event.level, message: "\(event.message)",
                         metadata: merged, source: event.source, date: Date()))
    }

    /// One line, with its newline, as ``log(event:)`` writes it.
    public static func line(
        format: LogFormat, label: String, level: Logger.Level, message: String, metadata: Logger.Metadata,
        source: String, date: Date
    ) -> String {
        switch format {
        case .text:
            return "\(timestamp(date, fractional: false)) \(level) \(label):\(text(metadata)) \(message)\n"
        case .journal:
            // One record per line for journald: a message's own newlines would start new records.
            let flat = message.replacingOccurrences(of: "\n", with: " ")
            // journald already prefixes the syslog identifier (`ferryd[450]: `): the agent's own
            // label would say it twice. Any other label is kept.
            let words = (label == journalIdentifier ? [] : ["\(label):"])
                + (metadata.isEmpty ? [] : [String(text(metadata).dropFirst())]) + [flat]
            return "<\(priority(level))>" + words.joined(separator: " ") + "\n"
        case .json:
            var out: [UInt8] = []
            out += Array("{\"ts\":".utf8)
            JSONText.appendString(timestamp(date, fractional: true), to: &out)
            out += Array(",\"level\":".utf8)
            JSONText.appendString(level.rawValue, to: &out)
            out += Array(",\"label\":".utf8)
            JSONText.appendString(label, to: &out)
            out += Array(",\"source\":".utf8)
            JSONText.appendString(source, to: &out)
            out += Array(",\"msg\":".utf8)
            JSONText.appendString(message, to: &out)
            if !metadata.isEmpty {
                out += Array(",\"metadata\":".utf8)
                appendJSON(.dictionary(metadata), to: &out)
            }
            out += Array("}\n".utf8)
            return String(decoding: out, as: UTF8.self)
        }
    }

    /// The label journald shows for ferryd's lines anyway (the unit's syslog identifier, the
    /// executable's name): ``LogFormat/journal`` lines leave it out.
    public static let journalIdentifier = "ferryd"

    /// The syslog priority of `level` (sd-daemon's `<N>` prefixes).
    public static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// Writes to standard error with one `write(2)`.
    public static let standardError: @Sendable (String) -> Void = { line in
        writeAll(STDERR_FILENO, Array(line.utf8))
    }

    private static func text(_ metadata: Logger.Metadata) -> String {
        metadata.isEmpty ? "" : " " + metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
    }

    private static func appendJSON(_ value: Logger.Metadata.Value, to out: inout [UInt8]) {
        switch value {
        case .string(let string): JSONText.appendString(string, to: &out)
        case .stringConvertible(let value): JSONText.appendString(value.description, to: &out)
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                appendJSON(value, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .dictionary(let entries):
            out.append(UInt8(ascii: "{"))
            for (index, entry) in entries.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendString(entry.key, to: &out)
                out.append(UInt8(ascii: ":"))
                appendJSON(entry.value, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let formatters = Mutex<(plain: ISO8601DateFormatter, fractional: ISO8601DateFormatter)>({
        let plain = ISO8601DateFormatter()
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return (plain, fractional)
    }())

    private static func timestamp(_ date: Date, fractional: Bool) -> String {
        formatters.withLock { fractional ? $0.fractional.string(from: date) : $0.plain.string(from: date) }
    }
}
