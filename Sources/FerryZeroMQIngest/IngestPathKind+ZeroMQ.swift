import FerryAgent

extension IngestPathKind {
    /// The ZeroMQ ingest socket (`<runtime>/ingest`, docs/PROTOCOL.md), always on: no table of its
    /// own (its limits are the agent's `maxEventBytes` and `access.ingest`) and no metrics but the
    /// core's (`ferry_messages_refused_total`, `ferry_messages_denied_total`,
    /// `ferry_clients_connected`). `ferryd` registers it first:
    /// `IngestPathRegistry([.zeromq, .http])`.
    public static let zeromq = IngestPathKind(name: "zeromq") { configuration, logger in
        [ZeroMQIngestPath(configuration: configuration, logger: logger)]
    }
}
