import FerryAgent
import FerryDaemon
import FerryFileSink
import FerryHTTPIngest
import FerryHTTPSink
import FerryJetStreamSink
import FerryZeroMQIngest

// `ferryd`: the agent with the file, HTTP and JetStream sinks — the file sink also the default of a
// configuration that names none — and two ingest paths: the ZeroMQ socket and the local HTTP API.
// Everything else is in FerryDaemon.
await FerryDaemon.main(sinkKinds: SinkRegistry([.file, .http, .jetstream], defaultSink: .file()),
                       ingestPathKinds: IngestPathRegistry([.zeromq, .http]))
