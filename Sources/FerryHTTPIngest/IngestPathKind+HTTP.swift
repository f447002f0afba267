import FerryAgent

extension IngestPathKind {
    /// The local Segment-compatible HTTP API (docs/HTTP-INGEST.md): the servers the
    /// configuration's `http` section asks for (``HTTPIngestServer/servers(for:logger:)``).
    public static let http = IngestPathKind(name: "http") { configuration, logger in
        try HTTPIngestServer.servers(for: configuration, logger: logger)
    }
}
