import FerryAgent

extension IngestPathKind {
    /// The local Segment-compatible HTTP API (docs/HTTP-INGEST.md): its table `http`
    /// (``HTTPIngestConfiguration``), its metrics `ferry_http_*` (``IngestPathMetricSet/http``)
    /// and the servers the table asks for (``HTTPIngestServer/servers(for:configuration:logger:)``).
    public static let http = IngestPathKind(HTTPIngestConfiguration.self, metrics: .http) { table, base, fields, keyPath in
        try HTTPIngestConfiguration.parse(table, base: base, fields: &fields, at: keyPath)
    } makePaths: { settings, configuration, logger in
        try HTTPIngestServer.servers(for: settings, configuration: configuration, logger: logger)
    }
}
