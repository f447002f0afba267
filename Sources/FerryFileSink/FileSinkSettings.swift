import FerryAgent
import FerryStorage

/// The settings of the file sink (`"type": "file"`), the default sink of a configuration that
/// names none (``SinkRegistry/builtIn``).
public struct FileSinkSettings: SinkSettings {
    public static let type = "file"
    /// The directory the files are written to; `nil`: `<data dir>/delivered`.
    public var directory: String?
    /// A file is rolled once it would grow past this size.
    public var maxFileBytes: Int64
    /// The line format written (`lineFormat`): 3, the default; 2 or 1 for readers of the earlier
    /// consent stamps (docs/PROTOCOL.md, "File sink lines").
    public var lineFormat: Int

    /// Creates file sink settings.
    public init(directory: String? = nil, maxFileBytes: Int64 = 64 << 20, lineFormat: Int = FileSink.currentLineFormat) {
        self.directory = directory
        self.maxFileBytes = maxFileBytes
        self.lineFormat = lineFormat
    }

    /// The directory once the default is applied.
    public func directory(dataDirectory: String) -> String {
        directory ?? dataDirectory + "/delivered"
    }

    public func validate(name: String) throws {
        var problems: [String] = []
        if maxFileBytes <= 0 { problems.append("maxFileBytes must be positive") }
        if !FileSink.lineFormats.contains(lineFormat) {
            problems.append("lineFormat must be \(FileSink.lineFormats.map(String.init).joined(separator: " or ")), not \(lineFormat)")
        }
        if let directory, directory.isEmpty { problems.append("directory must not be empty") }
        guard problems.isEmpty else {
            throw AgentError(code: .configuration, message: problems.map { "sink \"\(name)\": " + $0 }.joined(separator: "\n"))
        }
    }

    /// The directory the sink writes into: two sinks may not share one.
    public func outputDirectory(dataDirectory: String) -> String? {
        directory(dataDirectory: dataDirectory)
    }

    public func makeSink(_ context: SinkContext) -> any Sink {
        FileSink(name: context.name, directory: directory(dataDirectory: context.dataDirectory),
                 maxFileBytes: maxFileBytes, lineFormat: lineFormat, io: context.io)
    }
}

extension SinkSettings where Self == FileSinkSettings {
    /// JSON Lines files in `directory` (`nil`: `<data dir>/delivered`), rolled at `maxFileBytes`,
    /// in line format `lineFormat`.
    public static func file(directory: String? = nil, maxFileBytes: Int64 = 64 << 20, lineFormat: Int = FileSink.currentLineFormat) -> FileSinkSettings {
        FileSinkSettings(directory: directory, maxFileBytes: maxFileBytes, lineFormat: lineFormat)
    }
}

extension SinkKind {
    /// The file sink: `{"type": "file", "directory": …, "maxFileBytes": …, "lineFormat": …}`.
    public static let file = SinkKind(FileSinkSettings.self) { object, fields, keyPath in
        let settings = FieldBox(FileSinkSettings())
        try fields.apply(object, [
            "directory": .string { settings.value.directory = $0 },
            "maxFileBytes": .int { settings.value.maxFileBytes = Int64($0) },
            "lineFormat": .int { settings.value.lineFormat = $0 },
        ], at: keyPath)
        return settings.value
    }
}

extension SinkRegistry {
    /// The file sink alone, and it as the default sink (named `file`, writing into
    /// `<data dir>/delivered`) of a configuration that names none: what `ferryd` registers with
    /// the other sinks (`SinkRegistry([.file, .http, .jetstream], defaultSink: .file())`), for
    /// tools and tests that link only this sink.
    public static let builtIn = SinkRegistry([.file], defaultSink: FileSinkSettings())
}

extension AgentConfiguration.SinkConfiguration {
    /// The file sink named `file` writing into `<data dir>/delivered` (the default when no sink
    /// is configured), with `delivery`'s batching and retry.
    public static func defaultFile(delivery: AgentConfiguration.Delivery = AgentConfiguration.Delivery()) -> Self {
        Self(name: FileSinkSettings.type, settings: FileSinkSettings(), delivery: delivery)
    }
}
